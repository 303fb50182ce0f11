# Data and base models of the local (CPU) settings.


rule tiny_data:
    input:
        base_setting_file,
    output:
        train="results/data/tiny/{base}/train.jsonl",
        heldout="results/data/tiny/{base}/heldout.jsonl",
    log:
        "logs/tiny_data/{base}.log",
    params:
        out=subpath(output.train, parent=True),
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench tiny data --setting {wildcards.base} --out {params.out} > {log} 2>&1"


rule tiny_pretrain:
    input:
        base_setting_file,
    output:
        directory("results/base/{base}/model"),
    log:
        "logs/tiny_pretrain/{base}.log",
    threads: lambda w: workflow.cores  # asked for when a job is planned: --unlock needs no --cores
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench tiny pretrain --setting {wildcards.base} --out {output} --threads {threads} --no-progress > {log} 2>&1"
