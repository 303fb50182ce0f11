# Evaluation of every saved step of a run on one benchmark (scores.json per step, summary.json last).


rule evaluate:
    input:
        completed="results/runs/{setting}/{method}/seed{seed}/train.completed",
        data=eval_data,
    output:
        "results/runs/{setting}/{method}/seed{seed}/eval/{benchmark}/summary.json",
    log:
        "logs/evaluate/{setting}/{method}/seed{seed}/{benchmark}.log",
    params:
        run_dir=run_dir,
        steps=eval_steps,
        identity=run_identity,
        spec=benchmark_identity,
    threads: 1
    wildcard_constraints:
        setting=LOCAL_SETTINGS,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench evaluate --run-dir {params.run_dir} --benchmark {wildcards.benchmark} --steps {params.steps}"
        " --data {input.data} --out {output} > {log} 2>&1"
