# One training run per (setting, method, seed), by the setting's backend: in-process on the CPU (local) or verl's
# trainer through Ray (verl); inputs, threads and resources come from the backend (common.smk). The marker is
# protected and written last: a crashed run leaves its checkpoints (and verl's records), and the rerun resumes from
# the last one (verl: dppo_bench.verl_launch.launch).


# Runs on the CPU: the local backend, and verl with verl.device: cpu (its nodes, time limit and, across nodes, the
# mpi job that builds Ray on them come from the setting, as for GPUs).
rule train:
    input:
        unpack(train_inputs),
        setting=ancient(setting_file),  # what of them reaches the run is params.identity (common.smk)
        method=ancient(method_file),
    output:
        protected("results/runs/{setting}/{method}/seed{seed}/train.completed"),
    log:
        "logs/train/{setting}/{method}/seed{seed}.log",
    params:
        run_dir=run_dir,
        identity=run_identity,
        backend_options=train_backend_options,
    wildcard_constraints:
        setting=CPU_SETTINGS,
    threads: train_threads
    resources:
        nodes=verl_only(verl_nodes),
        runtime=verl_only(verl_runtime),
        mpi=verl_only(verl_mpi),
        tasks_per_node=verl_only(verl_tasks_per_node),
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench train --setting {wildcards.setting} --method {wildcards.method} --seed {wildcards.seed}"
        " --out {params.run_dir} --train-data {input.train} {params.backend_options} --no-progress > {log} 2>&1"


# verl settings on GPUs: the same job with the setting's GPUs; the cluster profile gives this rule its GPU
# partition, GPU model and CPUs per GPU.
use rule train as train_gpu with:
    wildcard_constraints:
        setting=GPU_SETTINGS,
    threads: 1
    resources:
        nodes=verl_nodes,
        gpu=verl_gpus,
        runtime=verl_runtime,
        mpi=verl_mpi,
        tasks_per_node=verl_tasks_per_node,
