# Figures and tables of an experiment, from the recorded runs; and one target rule per experiment id.


rule aggregate:
    input:
        experiment_file,
        experiment_inputs,
    output:
        multiext("results/{experiment}/figure", ".png", ".pdf"),
        multiext("results/{experiment}/table", ".md", ".csv", ".tex"),
    log:
        "logs/aggregate/{experiment}.log",
    params:
        out=subpath(output[0], parent=True),
    shell:
        "dppo-bench aggregate {wildcards.experiment} --out {params.out} > {log} 2>&1"


for _experiment_id in EXPERIMENTS:

    rule:
        name:
            _experiment_id
        input:
            experiment_targets([_experiment_id]),
