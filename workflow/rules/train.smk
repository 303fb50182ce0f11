# One training run per (setting, method, seed). The marker is protected and written last: a crashed
# run leaves its checkpoints, and the rerun resumes from the last one.


rule train_local:
    input:
        setting=setting_file,
        method=method_file,
        base=base_model,
        train=tiny_train_data,
    output:
        protected("results/runs/{setting}/{method}/seed{seed}/train.completed"),
    log:
        "logs/train/{setting}/{method}/seed{seed}.log",
    params:
        run_dir=run_dir,
        identity=run_identity,
    threads: run_threads
    wildcard_constraints:
        setting=LOCAL_SETTINGS,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench train --setting {wildcards.setting} --method {wildcards.method} --seed {wildcards.seed}"
        " --out {params.run_dir} --base-model {input.base} --train-data {input.train} --no-progress > {log} 2>&1"
