# Figures and tables of an experiment, from the recorded runs; and one target rule per experiment id, plus
# <id>_partial: the same aggregation of whatever runs exist now (missing and failed ones shown as such).


rule aggregate_table:
    input:
        ancient(experiment_file),  # what of it (and of the recipes' names) is shown is params.shown (common.smk)
        experiment_inputs,
    output:
        multiext("results/{experiment}/table", ".md", ".csv", ".tex"),
    log:
        "logs/aggregate_table/{experiment}.log",
    params:
        out=subpath(output[0], parent=True),
        runs=experiment_runs_identity,
        shown=experiment_shown,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench aggregate {wildcards.experiment} --only table --out {params.out} > {log} 2>&1"


rule aggregate_figure:
    input:
        ancient(experiment_file),
        experiment_inputs,
    output:
        multiext("results/{experiment}/figure", ".png", ".pdf"),
    log:
        "logs/aggregate_figure/{experiment}.log",
    params:
        out=subpath(output[0], parent=True),
        runs=experiment_runs_identity,
        shown=experiment_shown,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench aggregate {wildcards.experiment} --only figure --out {params.out} > {log} 2>&1"


for _experiment_id in EXPERIMENTS:

    rule:
        name:
            _experiment_id
        input:
            experiment_targets([_experiment_id]),


# No output: a target without outputs always runs, so it reads the runs as they are at that moment. It writes
# beside (never over) the full target's files, which snakemake still tracks against every run's markers.
for _experiment_id, _experiment in EXPERIMENTS.items():

    rule:
        name:
            f"{_experiment_id}_partial"
        input:
            str(dc.EXPERIMENTS_DIR / f"{_experiment_id}.yaml"),
        log:
            f"logs/aggregate_partial/{_experiment_id}.log",
        params:
            experiment=_experiment_id,
            out=f"results/{_experiment_id}/partial",
            only="" if _experiment.panels else "--only table",
        conda:
            "../../environment.yml"
        shell:
            "dppo-bench aggregate {params.experiment} {params.only} --out {params.out} > {log} 2>&1"
