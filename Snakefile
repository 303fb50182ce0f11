# dppo-bench: the DPPO paper's figures and tables as one pipeline (DESIGN.md section 2).
#   snakemake -n <experiment>     plan one paper item (any machine)
#   snakemake --cores 2           the embedded default: the CPU miniature of the sanity test
from snakemake.utils import min_version

min_version("9.0")


# relative to this file, so that --directory can put results elsewhere (the tests do)
configfile: f"{workflow.basedir}/config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    default_target: True
    input:
        experiment_targets(config["experiments"]),
