# Evaluation of every saved step of a run on one benchmark (scores.json per step, summary.json last). The run's
# backend decides where the samples come from (local: generated from its checkpoints; verl: its online validation
# dumps); the scoring is the same (dppo_bench.eval.run_eval).


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
    threads: eval_threads
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench evaluate --run-dir {params.run_dir} --benchmark {wildcards.benchmark} --steps {params.steps}"
        " --data {input.data} --threads {threads} --out {output} > {log} 2>&1"
