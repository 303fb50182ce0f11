"""The environment vLLM's CPU build needs in every process that serves a model: verl's rollout workers (through
:func:`dppo_bench.verl_launch.run_config.device_env`) and the engine probe's in-process engine
(:mod:`dppo_bench.probe.engines`). One mapping, so that the two never drift apart."""

VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the CPU build sizes its KV cache from this, not from a utilization
    # Pinned ("auto"), the CPU build puts its model worker on one core of its own choosing, where every other process
    # then preempts it on each decode step: one step's rollout of verl_cpu_smollm took 278 s pinned, 16-20 s not
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
