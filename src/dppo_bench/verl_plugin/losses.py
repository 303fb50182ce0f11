"""Our mask rules as verl 0.9.1 policy losses, with verl's loss signature.

verl passes the trust-region anchor as ``old_log_prob``. Which anchor that is depends on the
mode the run was configured in (see :mod:`dppo_bench.verl_plugin.overrides`):

* bypass mode (rollout anchor): ``old_log_prob`` is mu itself and ``rollout_is_weights`` is
  None;
* decoupled mode (recompute anchor) with token-level rollout IS and an unbounded threshold:
  ``old_log_prob`` is pi_old and ``rollout_is_weights = pi_old / mu`` exactly, so
  ``log mu = old_log_prob - log(rollout_is_weights)``. The weights are used only to recover
  mu, never multiplied in again: the weight is always min(pi / mu, C).

Hyperparameters come through verl's existing keys (:mod:`dppo_bench.verl_plugin.hyperparameters`).

Top-K modes also need the per-token top-K divergence, which verl's loss signature cannot carry:
the trainer's forward computes it and the patched ``ppo_loss`` exposes it for the duration of the
call (:mod:`dppo_bench.verl_plugin.topk`); pi's per-token entropy (for the statistics of the
masked tokens) arrives the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from dppo_bench.methods import MaskRule, surrogate_loss
from dppo_bench.verl_plugin.hyperparameters import from_verl


def _anchors(
    rule: MaskRule,
    old_log_prob: torch.Tensor,
    rollout_is_weights: torch.Tensor | None,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log mu, log anchor) from what verl passed, checking the mode matches the rule."""
    if rollout_is_weights is None:
        if "rollout" not in rule.anchors:
            raise ValueError(
                f"loss mode {rule.name!r} anchors its trust region to the recomputed pi_old and needs "
                "decoupled mode with token-level rollout IS weights (algorithm.rollout_correction."
                "bypass_mode=False, rollout_is=token, an unbounded rollout_is_threshold); verl passed none"
            )
        return old_log_prob, old_log_prob
    if "recompute" not in rule.anchors:
        raise ValueError(
            f"loss mode {rule.name!r} anchors its trust region to the rollout policy mu and must run in "
            "bypass mode (algorithm.rollout_correction.bypass_mode=True, rollout_is=null); verl passed "
            "rollout IS weights, so old_log_prob is a recomputed pi_old"
        )
    log_w = rollout_is_weights.float().clamp(min=torch.finfo(torch.float32).tiny).log()
    return torch.where(response_mask, old_log_prob - log_w, old_log_prob), old_log_prob


def _topk_divergence(rule: MaskRule, log_prob: torch.Tensor) -> torch.Tensor:
    """The per-token top-K divergence the trainer's forward computed for this ``ppo_loss`` call."""
    from dppo_bench.verl_plugin.patches import installation_error
    from dppo_bench.verl_plugin.topk.loss import current_topk_divergence

    if installation_error() is not None:
        raise RuntimeError(f"loss mode {rule.name!r}: {installation_error()}")
    topk = current_topk_divergence()
    if topk is None:
        raise RuntimeError(
            f"loss mode {rule.name!r} needs the per-token top-K divergence of mu and pi, which reaches a policy "
            "loss only through verl's ppo_loss as patched by dppo-bench (the engine's forward computes it from "
            "the rollout's top-K); this call came without one"
        )
    if topk.shape != log_prob.shape:
        raise RuntimeError(f"top-K divergence {tuple(topk.shape)} does not match log_prob {tuple(log_prob.shape)}")
    return topk.to(log_prob.device)


def _entropy(log_prob: torch.Tensor) -> torch.Tensor | None:
    """pi's per-token entropy of this ``ppo_loss`` call, when the engine computed it (calculate_entropy)."""
    from dppo_bench.verl_plugin.topk.loss import current_entropy

    entropy = current_entropy()
    if entropy is not None and entropy.shape != log_prob.shape:
        raise RuntimeError(f"entropy {tuple(entropy.shape)} does not match log_prob {tuple(log_prob.shape)}")
    return entropy


def _on_masked(advantages: torch.Tensor):
    """Counts the masked tokens' ids while the step collects them (App. D); None otherwise."""
    from dppo_bench.verl_plugin.masked_tokens import current_counter
    from dppo_bench.verl_plugin.topk.loss import current_response_ids

    counter, ids = current_counter(), current_response_ids()
    if counter is None or ids is None:
        return None
    return lambda masked: counter.add(ids.to(masked.device), masked, advantages)


@torch.no_grad()
def topk_stats(topk: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """Mean and max of the top-K divergence over the response tokens (one host sync)."""
    valid = topk.float() * response_mask
    mean, peak = torch.stack([valid.sum() / response_mask.sum().clamp(min=1), valid.max()]).tolist()
    return {"topk_divergence_mean": mean, "topk_divergence_max": peak}


def make_verl_loss(rule: MaskRule):
    """A function with verl's ``PolicyLossFn`` signature computing ``rule`` on the surrogate."""

    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if config is None:
            raise ValueError(f"loss mode {rule.name!r} needs the actor config (clip_ratio_low/high/c)")
        topk = _topk_divergence(rule, log_prob) if rule.needs_topk else None
        mu, anchor = _anchors(rule, old_log_prob, rollout_is_weights, response_mask.bool())
        values = from_verl(rule, config)
        loss, stats = surrogate_loss(
            rule,
            log_prob=log_prob,
            mu_log_prob=mu,
            anchor_log_prob=anchor,
            advantages=advantages,
            response_mask=response_mask.bool(),
            low=values.low,
            high=values.high,
            alpha=values.alpha,
            is_cap=values.is_cap,
            loss_agg_mode=loss_agg_mode,
            topk_divergence=topk,
            batch_info=dict(config.global_batch_info),
            entropy=_entropy(log_prob),
            on_masked=_on_masked(advantages),
        )
        if topk is not None:
            stats.update(topk_stats(topk, response_mask.bool()))
        return loss, {f"actor/{name}": value for name, value in stats.items()}

    policy_loss.__name__ = policy_loss.__qualname__ = f"dppo_bench_{rule.name}"
    policy_loss.__doc__ = f"dppo-bench policy loss {rule.name!r} (mask rule {rule.fn.__qualname__})."
    return policy_loss
