# Fig. 2's mismatch probe: one rollout batch of a setting's model and one trainer forward at the same parameters,
# no update. Local settings probe their pretrained base model in-process (cheap: part of `make demo`).


rule probe_mismatch_local:
    input:
        setting=ancient(setting_file),  # what of it reaches the probe is params.identity (common.smk)
        base=base_model,
        train=tiny_train_data,
    output:
        "results/probes/{setting}/mismatch.npz",
    log:
        "logs/probe_mismatch/{setting}.log",
    params:
        identity=setting_identity,
    wildcard_constraints:
        setting=LOCAL_SETTINGS,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench probe mismatch --setting {wildcards.setting} --out {output} --base-model {input.base}"
        " --train-data {input.train} > {log} 2>&1"


# Verl settings: a one-step run of verl's trainer on the setting's cluster shape (dppo_bench.verl_launch.probe),
# under the probe's time limit (dppo_bench.plan.PROBE_RUNTIME_MIN, the one `dppo-bench plan` budgets). On the CPU
# (verl.device: cpu) here; on GPUs as probe_mismatch_gpu, to which the cluster profile gives its GPU partition.
rule probe_mismatch_verl:
    input:
        setting=ancient(setting_file),
        train=verl_train_data,
        val=verl_val_data,
        model=verl_model,
    output:
        "results/probes/{setting}/mismatch.npz",
    log:
        "logs/probe_mismatch/{setting}.log",
    params:
        identity=setting_identity,
    wildcard_constraints:
        setting=VERL_CPU_SETTINGS,
    threads: verl_threads
    resources:
        nodes=verl_nodes,
        runtime=PROBE_RUNTIME_MIN,
        mpi=verl_mpi,
        tasks_per_node=verl_tasks_per_node,
    conda:
        "../../environment.yml"
    shell:
        "dppo-bench probe mismatch --setting {wildcards.setting} --out {output} --train-data {input.train}"
        " --val-data {input.val} > {log} 2>&1"


use rule probe_mismatch_verl as probe_mismatch_gpu with:
    wildcard_constraints:
        setting=GPU_SETTINGS,
    threads: 1
    resources:
        nodes=verl_nodes,
        gpu=verl_gpus,
        runtime=PROBE_RUNTIME_MIN,
        mpi=verl_mpi,
        tasks_per_node=verl_tasks_per_node,
