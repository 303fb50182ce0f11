# Data: the tiny task's splits and base models of the local (CPU) settings, the packaged models (recipes/models/),
# and the prepared parquet and problem
# sets of the verl settings and every benchmark.

from dppo_bench.config import roots


rule tiny_data:
    input:
        ancient(base_setting_file),  # what of it reaches the data is params.identity (common.smk)
    output:
        train="results/data/tiny/{base}/train.jsonl",
        heldout="results/data/tiny/{base}/heldout.jsonl",
    log:
        "logs/tiny_data/{base}.log",
    params:
        out=subpath(output.train, parent=True),
        identity=base_identity,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench tiny data --setting {wildcards.base} --out {params.out} > {log} 2>&1"


rule tiny_pretrain:
    input:
        ancient(base_setting_file),
    output:
        directory("results/base/{base}/model"),
    log:
        "logs/tiny_pretrain/{base}.log",
    params:
        identity=base_identity,
    threads: machine_threads  # asked for when a job is planned: --unlock needs no --cores
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench tiny pretrain --setting {wildcards.base} --out {output} --threads {threads} --no-progress > {log} 2>&1"


rule packaged_model:
    input:
        # from the recipe root, as every rule reads its recipes: a run directory elsewhere (--directory) has none
        ancient(lambda w: str(roots.MODELS_DIR / f"{w.model}.yaml")),
    output:
        directory("results/models/{model}"),
    log:
        "logs/packaged_model/{model}.log",
    wildcard_constraints:
        model="[a-z0-9_]+",
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench model build {wildcards.model} --out {output} > {log} 2>&1"


rule prepare_data:
    input:
        dataset_source,
    output:
        parquet="results/data/verl/{dataset}.parquet",
        problems="results/data/verl/{dataset}.problems.jsonl",
        manifest="results/data/verl/{dataset}.manifest.json",
    log:
        "logs/prepare_data/{dataset}.log",
    params:
        out=subpath(output.parquet, parent=True),
        source=source_option,
    wildcard_constraints:
        dataset="[a-z0-9_]+",
    localrule: True  # reads the Hugging Face hub: on the submit host, where clusters have internet
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench data prepare {wildcards.dataset} {params.source} --out {params.out} > {log} 2>&1"
