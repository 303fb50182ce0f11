"""Top-K divergence end to end in an unmodified verl 0.9.1 (paper Sec. 4.3, Eqs. 15-16).

One module per job:

* :mod:`.fields`: names of the tensors, and K read from the rollout config (its key is in
  :mod:`dppo_bench.verl_plugin.contract`);
* :mod:`.rollout`: the vLLM server returns mu's kept set (top-K, sampled token forced in);
* :mod:`.agent_loop`: the kept set is aligned like ``rollout_log_probs`` and put in the batch;
* :mod:`.layout`: response rows -> the packed sequence layout of the logits, Ulysses slicing;
* :mod:`dppo_bench.topk`: pi's log-probs at those ids from (vocabulary-sharded) logits, the divergences;
* :mod:`.fsdp`, :mod:`.megatron`: the engines add the per-token divergences to their outputs;
* :mod:`.loss`: ``ppo_loss`` passes the divergence to the registered Top-K loss modes;
* :mod:`.hooks`: patches applied on import (:mod:`dppo_bench.verl_plugin.patches`: for the pinned verl only).
"""
