# The verl chain (GPU settings): prepared data, one training job per (setting, method, seed) through verl and Ray,
# and the re-scoring of its online validation. The same run directory as the local chain: aggregation reads both.


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
        source=lambda w, input: f"--source {input[0]}" if input else "",  # a generated file, from this directory
    wildcard_constraints:
        dataset="[a-z0-9_]+",
    localrule: True  # reads the Hugging Face hub: on the submit host, where clusters have internet
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench data prepare {wildcards.dataset} {params.source} --out {params.out} > {log} 2>&1"


# The marker is protected and written last: a crashed run leaves its checkpoints and records, and the rerun
# resumes from verl's last checkpoint (dppo_bench.verl_plugin.launch).
rule train_verl:
    input:
        setting=setting_file,
        method=method_file,
        train=verl_train_data,
        val=verl_val_data,
        model=verl_model,
    output:
        protected("results/runs/{setting}/{method}/seed{seed}/train.completed"),
    log:
        "logs/train/{setting}/{method}/seed{seed}.log",
    params:
        run_dir=run_dir,
        identity=run_identity,
    wildcard_constraints:
        setting=VERL_SETTINGS,
    threads: verl_threads
    resources:
        nodes=verl_nodes,
        gpu=verl_gpus,
        runtime=verl_runtime,
        mpi=verl_mpi,
        tasks_per_node=verl_tasks_per_node,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench train --setting {wildcards.setting} --method {wildcards.method} --seed {wildcards.seed}"
        " --out {params.run_dir} --train-data {input.train} --val-data {input.val} > {log} 2>&1"


rule evaluate_verl:
    input:
        completed="results/runs/{setting}/{method}/seed{seed}/train.completed",
        data=verl_problems,
    output:
        "results/runs/{setting}/{method}/seed{seed}/eval/{benchmark}/summary.json",
    log:
        "logs/evaluate/{setting}/{method}/seed{seed}/{benchmark}.log",
    params:
        run_dir=run_dir,
        steps=eval_steps,
        identity=run_identity,
    wildcard_constraints:
        setting=VERL_SETTINGS,
    threads: 4
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench evaluate-verl --run-dir {params.run_dir} --benchmark {wildcards.benchmark} --steps {params.steps}"
        " --data {input.data} --workers {threads} --out {output} > {log} 2>&1"
