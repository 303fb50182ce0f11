# Figures and tables of an experiment, from the recorded runs; and one target rule per experiment id.


rule aggregate_table:
    input:
        experiment_file,
        experiment_inputs,
    output:
        multiext("results/{experiment}/table", ".md", ".csv", ".tex"),
    log:
        "logs/aggregate_table/{experiment}.log",
    params:
        out=subpath(output[0], parent=True),
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench aggregate {wildcards.experiment} --only table --out {params.out} > {log} 2>&1"


rule aggregate_figure:
    input:
        experiment_file,
        experiment_inputs,
    output:
        multiext("results/{experiment}/figure", ".png", ".pdf"),
    log:
        "logs/aggregate_figure/{experiment}.log",
    params:
        out=subpath(output[0], parent=True),
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
