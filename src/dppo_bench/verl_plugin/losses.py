"""Our mask rules as verl 0.9.1 policy losses, with verl's loss signature.

verl passes the trust-region anchor as ``old_log_prob``. Which anchor that is depends on the
mode the run was configured in (see :mod:`dppo_bench.verl_plugin.overrides`):

* bypass mode (rollout anchor): ``old_log_prob`` is mu itself and ``rollout_is_weights`` is
  None;
* decoupled mode (recompute anchor) with token-level rollout IS and an unbounded threshold:
  ``old_log_prob`` is pi_old and ``rollout_is_weights = pi_old / mu`` exactly, so
  ``log mu = old_log_prob - log(rollout_is_weights)``. The weights are used only to recover
  mu, never multiplied in again: the weight is always min(pi / mu, C).

Hyperparameters come through verl's existing keys: ``clip_ratio_low`` (negative-advantage
side), ``clip_ratio_high`` (positive side) and ``clip_ratio_c`` (C; >= ``NO_CAP`` = no cap).
"""

from __future__ import annotations

from typing import Any

import torch

from dppo_bench.methods import MaskRule, surrogate_loss

NO_CAP = 1e4


def is_cap_from_verl(clip_ratio_c: float) -> float | None:
    return None if clip_ratio_c >= NO_CAP else float(clip_ratio_c)


def _thresholds(config: Any) -> tuple[float, float]:
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    return float(low), float(high)


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
        if rule.needs_topk:
            raise NotImplementedError(
                f"loss mode {rule.name!r} needs mu's top-K log-probs from the rollout and pi's log-probs on "
                "those ids, which verl 0.9.1's policy-loss signature does not carry; the Top-K plumbing "
                "(rollout top-K, trainer-side divergence) is not installed in this process"
            )
        mu, anchor = _anchors(rule, old_log_prob, rollout_is_weights, response_mask.bool())
        low, high = _thresholds(config)
        loss, stats = surrogate_loss(
            rule,
            log_prob=log_prob,
            mu_log_prob=mu,
            anchor_log_prob=anchor,
            advantages=advantages,
            response_mask=response_mask.bool(),
            low=low,
            high=high,
            is_cap=is_cap_from_verl(config.clip_ratio_c),
            loss_agg_mode=loss_agg_mode,
            batch_info=dict(config.global_batch_info),
        )
        return loss, {f"actor/{name}": value for name, value in stats.items()}

    policy_loss.__name__ = policy_loss.__qualname__ = f"dppo_bench_{rule.name}"
    policy_loss.__doc__ = f"dppo-bench policy loss {rule.name!r} (mask rule {rule.fn.__qualname__})."
    return policy_loss
