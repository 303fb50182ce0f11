"""Our mask rules as verl 0.9.1 policy losses, with verl's loss signature.

verl passes the trust-region anchor as ``old_log_prob``. Which anchor that is depends on the
mode the run was configured in (see :mod:`dppo_bench.verl_launch.overrides`):

* bypass mode (rollout anchor): ``old_log_prob`` is mu itself and ``rollout_is_weights`` is
  None;
* decoupled mode (recompute anchor), with token-level rollout IS: ``old_log_prob`` is pi_old
  and verl passes ``rollout_is_weights``, which only tell the mode apart here. mu's own
  log-probs come from the patched ``ppo_loss``: the weights are clamped at exp(+-20) by verl,
  so mu recovered from them would be silently wrong beyond that. The weight is always
  min(pi / mu, C).

Hyperparameters come through our channel (:mod:`dppo_bench.verl_plugin.hyperparameters`), not verl's keys.

What verl's loss signature cannot carry (mu's log-probs in decoupled mode, the per-token top-K
divergence, pi's entropy for the statistics of the masked tokens) the patched ``ppo_loss``
exposes for the duration of the call (:mod:`dppo_bench.verl_plugin.loss_inputs`).
"""

from __future__ import annotations

from typing import Any

import torch

from dppo_bench.methods import MaskRule, surrogate_loss
from dppo_bench.verl_plugin.hyperparameters import current_values
from dppo_bench.verl_plugin.loss_inputs import current
from dppo_bench.verl_plugin.masked_tokens import current_counter
from dppo_bench.verl_plugin.patches import installation_error


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
    mu = _required(
        rule,
        _checked(rule, current().rollout_log_prob, "rollout log-probs", old_log_prob),
        "mu's own log-probs in decoupled mode",
        "from the batch's rollout_log_probs; verl's rollout IS weights are clamped at exp(+-20), so mu is not "
        "recovered from them",
    )
    return torch.where(response_mask, mu, old_log_prob), old_log_prob


def _checked(rule: MaskRule, value: torch.Tensor | None, what: str, like: torch.Tensor) -> torch.Tensor | None:
    """A tensor the patched ``ppo_loss`` exposed, on ``like``'s device, if its shape matches ``like``'s."""
    if value is None:
        return None
    if value.shape != like.shape:
        raise RuntimeError(
            f"loss mode {rule.name!r}: {what} of shape {tuple(value.shape)} for log_prob of shape {tuple(like.shape)}"
        )
    return value.to(like.device)


def _required(rule: MaskRule, value: torch.Tensor | None, what: str, origin: str) -> torch.Tensor:
    """``value``, which the patched ``ppo_loss`` must have exposed for this call."""
    if value is None:
        raise RuntimeError(
            f"loss mode {rule.name!r} needs {what}: only verl's ppo_loss as patched by dppo-bench hands them to a "
            f"policy loss ({origin}), and this call came without"
        )
    return value


def _topk_divergence(rule: MaskRule, log_prob: torch.Tensor) -> torch.Tensor:
    """The per-token top-K divergence the trainer's forward computed for this ``ppo_loss`` call."""
    if installation_error() is not None:
        raise RuntimeError(f"loss mode {rule.name!r}: {installation_error()}")
    return _required(
        rule,
        _checked(rule, current().topk_divergence, "top-K divergence", log_prob),
        "the per-token top-K divergence of mu and pi",
        "the engine's forward computes it from the rollout's top-K",
    )


def _on_masked(advantages: torch.Tensor):
    """Counts the masked tokens' ids while the step collects them (App. D); None otherwise."""
    counter, ids = current_counter(), current().response_ids
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
            raise ValueError(f"loss mode {rule.name!r} needs the actor config (its global_batch_info)")
        topk = _topk_divergence(rule, log_prob) if rule.needs_topk else None
        mu, anchor = _anchors(rule, old_log_prob, rollout_is_weights, response_mask.bool())
        values = current_values(rule)
        loss, stats = surrogate_loss(
            rule,
            values,
            log_prob=log_prob,
            mu_log_prob=mu,
            anchor_log_prob=anchor,
            advantages=advantages,
            response_mask=response_mask.bool(),
            loss_agg_mode=loss_agg_mode,
            topk_divergence=topk,
            batch_info=dict(config.global_batch_info),
            entropy=_checked(rule, current().entropy, "entropy", log_prob),
            on_masked=_on_masked(advantages),
        )
        if topk is not None:
            stats.update(topk_stats(topk, response_mask.bool()))
        return loss, {f"actor/{name}": value for name, value in stats.items()}

    policy_loss.__name__ = policy_loss.__qualname__ = f"dppo_bench_{rule.name}"
    policy_loss.__doc__ = f"dppo-bench policy loss {rule.name!r} (mask rule {rule.fn.__qualname__})."
    return policy_loss
