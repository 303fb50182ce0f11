"""Names and config of the Top-K plumbing, shared by the rollout, the agent loop and the trainer.

K travels through verl's own extension point ``actor_rollout_ref.rollout.custom`` (a free dict
of ``RolloutConfig``, "Extension point for custom configurations"), under the key the launcher
sets (:data:`dppo_bench.verl_plugin.contract.TOPK_K_KEY`): verl rejects unknown keys
everywhere else. Every process that needs K reads it from the rollout config it already has:
the vLLM server (``self.config``) and the agent loop (``self.rollout_config``). The trainer
never needs K: it reads the width of the tensors it receives.
"""

from __future__ import annotations

from collections.abc import Mapping

from dppo_bench.verl_plugin.contract import TOPK_K_KEY

# Per response token, mu's kept set (top-K of mu with the sampled token forced in), aligned
# like verl's ``rollout_log_probs``: row j belongs to response token j.
TOPK_IDS = "rollout_topk_ids"  # int32 (response_len, K)
TOPK_LOGPROBS = "rollout_topk_logprobs"  # float32 (response_len, K)
RAW_KEY = "dppo_topk_raw"  # TokenOutput.extra_fields: per generated token, before alignment

# Per-token divergences the trainer's forward adds to the engine's model_output; a loss mode
# reads the one of its mask rule's ``topk_kind``.
DIVERGENCE_KEYS = {"tv": "dppo_topk_tv", "kl": "dppo_topk_kl"}


def rollout_topk_k(rollout_config: Mapping) -> int | None:
    """K from a rollout config (verl's dataclass, a DictConfig or a dict), or None when Top-K is off."""
    custom = rollout_config.get("custom")
    if not custom:
        return None
    k = custom.get(TOPK_K_KEY)
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"actor_rollout_ref.rollout.custom.{TOPK_K_KEY} must be a positive integer, got {k!r}")
    return k
