"""|pi - mu| at equal parameters, logged in both of verl's modes (paper Fig. 3 and the dynamics figures).

The training-inference mismatch is the gap between the inference engine's probability mu of a sampled token and
the trainer's pi(theta') at the *same* parameters theta'. verl 0.9.1's v1 trainer measures it
(``training/rollout_probs_diff_*``) only in decoupled mode, where it recomputes the old log-probs anyway; in bypass
mode (the rollout-anchored methods) it copies mu into ``old_log_probs`` and makes no trainer pass at all, so it
logs nothing. This module patches ``PPOTrainer._compute_old_log_prob``:

* bypass mode, every ``mismatch_every`` steps (``actor_rollout_ref.rollout.custom.dppo_bench_mismatch_every``,
  set from the setting by :mod:`dppo_bench.verl_launch.run_config`; absent or 0 = never): after verl's own code,
  one more call of the actor's log-prob pass on the batch, exactly the call decoupled mode makes, whose result is
  *not* written to ``old_log_probs`` (they stay mu); the entropy it returns is stored as decoupled mode stores it;
* decoupled mode, on the same steps: the statistics from the recomputed ``old_log_probs`` verl already holds
  (no extra pass).

Logged (``dppo_bench/...``; :data:`dppo_bench.canonical.VERL_KEYS` maps them): mean and max of |pi - mu| and the
signed min and max of pi - mu over all response tokens of the batch, and the token-mean entropy of pi(theta').
Sync mode only: in verl's async modes a rollout can span several parameter versions.

Installed with the other patches (:mod:`dppo_bench.verl_plugin.patches`): on ``import verl`` in every process,
applied when the trainer module is imported, once, and only on the pinned verl.
"""

from __future__ import annotations

from dppo_bench.canonical import VERL_PATCH_PREFIX
from dppo_bench.mismatch import entropy_mean, mismatch_stats
from dppo_bench.verl_plugin.contract import MISMATCH_EVERY_KEY
from dppo_bench.verl_plugin.topk.hooks import wrap

TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
TOKENS_KEY = f"{VERL_PATCH_PREFIX}mismatch/tokens"


def logged(stats: dict) -> dict:
    """Our statistics under the prefix of the keys our patch logs (dppo_bench.canonical.VERL_KEYS maps them back)."""
    return {f"{VERL_PATCH_PREFIX}{name}": value for name, value in stats.items()}


def measured(pi_log_probs, mu_log_probs, entropy, response_mask) -> dict:
    return logged(
        {**mismatch_stats(pi_log_probs, mu_log_probs, response_mask), **entropy_mean(entropy, response_mask)}
    ) | {TOKENS_KEY: int(response_mask.bool().sum())}


def mismatch_every(config) -> int:
    """The measuring interval in steps from verl's config (0: never)."""
    custom = config.actor_rollout_ref.rollout.get("custom") or {}
    every = custom.get(MISMATCH_EVERY_KEY, 0)
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(
            f"actor_rollout_ref.rollout.custom.{MISMATCH_EVERY_KEY}: expected a step interval >= 0, got {every!r}"
        )
    return every


def is_bypass(config) -> bool:
    rollout_correction = config.algorithm.get("rollout_correction", None)
    return bool(rollout_correction and rollout_correction.get("bypass_mode", False))


def measure_bypass(trainer, batch) -> dict:
    """The actor's log-prob pass at theta' on ``batch``, compared with mu; ``old_log_probs`` is left as it is."""
    import transfer_queue as tq
    from verl.workers.utils.padding import response_from_nested

    batch.extra_info.update(
        {
            "calculate_entropy": True,
            "compute_loss": False,
            "temperature": trainer.config.actor_rollout_ref.rollout.temperature,
        }
    )
    output = trainer.actor_rollout_wg.compute_log_prob(batch)
    if len(output) != len(batch):
        raise RuntimeError(f"compute_log_prob returned {len(output)} samples for a batch of {len(batch)}")
    data = tq.kv_batch_get(
        keys=batch.keys,
        partition_id=batch.partition_id,
        select_fields=["log_probs", "entropy", "response_mask", "rollout_log_probs"],
    )
    data["pi_log_probs"] = response_from_nested(data.pop("log_probs"), data["response_mask"])
    data["entropy"] = response_from_nested(data.pop("entropy"), data["response_mask"])
    # the batch now holds what decoupled mode leaves after its pass, except that old_log_probs are still mu
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=data.select("entropy"))
    padded = data.to_padded_tensor()
    return measured(padded["pi_log_probs"], padded["rollout_log_probs"], padded["entropy"], padded["response_mask"])


def measure_recomputed(batch) -> dict:
    """Decoupled mode: verl's recomputed ``old_log_probs`` are pi(theta'); compare them with mu."""
    import transfer_queue as tq

    data = tq.kv_batch_get(
        keys=batch.keys,
        partition_id=batch.partition_id,
        select_fields=["old_log_probs", "entropy", "response_mask", "rollout_log_probs"],
    ).to_padded_tensor()
    return measured(data["old_log_probs"], data["rollout_log_probs"], data["entropy"], data["response_mask"])


def _with_mismatch(original):
    def _compute_old_log_prob(self, batch, metrics):
        batch = original(self, batch, metrics)
        every = mismatch_every(self.config)
        if every and self.global_steps % every == 0 and self.config.actor_rollout_ref.rollout.calculate_log_probs:
            metrics.update(measure_bypass(self, batch) if is_bypass(self.config) else measure_recomputed(batch))
        return batch

    return _compute_old_log_prob


def patch_trainer(module) -> None:
    """Wrap ``PPOTrainer._compute_old_log_prob`` of verl 0.9.1's v1 trainer (idempotent)."""
    wrap(module.PPOTrainer, "_compute_old_log_prob", ("self", "batch", "metrics"), _with_mismatch)
