"""The mask rules of the paper (Sec. 3-5, App. C and E; Stable-RL's per-mode masks).

Each returns True where the token's update is dropped. Zero-advantage tokens are never
masked: their gradient is zero, and counting them would blur the masked fractions.
The recipes give the values (the paper's, per profile), so no hyperparameter here has a default.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dppo_bench import divergence
from dppo_bench.methods.params import Param, Values
from dppo_bench.methods.registry import Tokens, register_mask

if TYPE_CHECKING:  # tensor methods only at run time: importing the rules needs no torch
    import torch


PAPER = "Qi et al. 2026 (arXiv 2602.04879)"
DELTA = Param(
    "delta",
    "divergence threshold (TV or KL, by the rule) on both sides; not a ratio",
    source=f"{PAPER}, App. C.1 (sanity: TV 0.15, KL 0.05), App. E (scaling: TV 0.2, KL 0.05)",
    ge=0.0,
)
EPS_LOW = Param(
    "eps_low",
    "ratio clip of the negative-advantage side: masked where r < 1 - eps_low",
    source=f"{PAPER}, App. C.1 (0.2)",
    ge=0.0,
)
EPS_HIGH = Param(
    "eps_high",
    "ratio clip of the positive-advantage side: masked where r > 1 + eps_high",
    source=f"{PAPER}, App. C.1 (0.28, Clip-Higher), App. E (0.27)",
    ge=0.0,
)
ALPHA = Param(
    "alpha",
    "rollout probability below which the efficiency study's rules lift the clip",
    source=f"{PAPER}, Sec. 6 / Figs. 6-7 (0 to 0.7)",
    ge=0.0,
    le=1.0,
)


def both_sides(values: Values) -> tuple[float, float]:
    """A single delta as the (low, high) thresholds of the DPPO rules."""
    return values.delta, values.delta


def _moving_away(t: Tokens, div: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """DPPO's trust region (Eq. 12): block only updates that push pi further from the anchor.

    A > 0 and pi above the anchor (r > 1) with divergence > high, or A < 0 and pi below it
    (r < 1) with divergence > low; both comparisons are strict, as in the paper and Stable-RL.
    Updates that pull pi back toward the anchor always pass, and so does an unmoved sampled
    token (pi = anchor) even when the top-K divergence exceeds the threshold.
    """
    over_high = div > high
    over_low = over_high if low == high else div > low
    return (t.up & (t.pi > t.anchor) & over_high) | (t.down & (t.pi < t.anchor) & over_low)


@register_mask("dppo_binary_tv", anchors=("rollout",), params=(DELTA,), arguments=both_sides)
@register_mask("dppo_binary_tv_recompute", anchors=("recompute",), params=(DELTA,), arguments=both_sides)
def binary_tv(t: Tokens, low: float, high: float) -> torch.Tensor:
    diff = t.pi - t.anchor  # |diff| > delta on the side the advantage pushes
    return (t.up & (diff > high)) | (t.down & (diff < -low))


@register_mask("dppo_binary_kl", anchors=("rollout",), params=(DELTA,), arguments=both_sides)
@register_mask("dppo_binary_kl_recompute", anchors=("recompute",), params=(DELTA,), arguments=both_sides)
def binary_kl(t: Tokens, low: float, high: float) -> torch.Tensor:
    kl = divergence.binary_kl(t.log_anchor, t.log_pi, p=t.anchor)
    return _moving_away(t, kl, low, high)


@register_mask("dppo_topk_tv", anchors=("rollout",), params=(DELTA,), arguments=both_sides, topk_kind="tv")
@register_mask("dppo_topk_kl", anchors=("rollout",), params=(DELTA,), arguments=both_sides, topk_kind="kl")
def topk(t: Tokens, low: float, high: float) -> torch.Tensor:
    """The top-K divergence of the rule's ``topk_kind``, computed by the caller, with DPPO's rule."""
    if t.topk_divergence is None:
        raise ValueError("a Top-K mask needs the per-token top-K divergence of mu and pi; none was given")
    return _moving_away(t, t.topk_divergence, low, high)


@register_mask("pg_is", anchors=("rollout",))
@register_mask("pg_tis", anchors=("rollout",))
def no_mask(t: Tokens) -> torch.Tensor:
    """PG-IS and PG-TIS (CISPO): no trust region; they differ only in the cap C."""
    return t.up.new_zeros(t.up.shape)


@register_mask("grpo_clip_higher", anchors=("rollout",), params=(EPS_LOW, EPS_HIGH))
@register_mask("minirl", anchors=("recompute",), params=(EPS_LOW, EPS_HIGH))
@register_mask("minirl_tis", anchors=("recompute",), params=(EPS_LOW, EPS_HIGH))
def ratio_clip(t: Tokens, eps_low: float, eps_high: float) -> torch.Tensor:
    """PPO's clip as a mask on r = pi / anchor: GRPO on mu, MiniRL on the recomputed pi_old."""
    log_ratio = t.log_pi - t.log_anchor
    up = t.up & (log_ratio > math.log1p(eps_high))
    down = t.down & (log_ratio < (math.log1p(-eps_low) if eps_low < 1 else -math.inf))
    return up | down


def _relaxed_clip(t: Tokens, low: float, high: float, alpha: float, *, up: bool, down: bool) -> torch.Tensor:
    """GRPO's clip, lifted on the chosen sides for tokens the rollout found rare (mu < alpha; Sec. 6)."""
    sides = t.up.new_zeros(t.up.shape)
    if up:
        sides = sides | t.up
    if down:
        sides = sides | t.down
    return ratio_clip(t, low, high) & ~(sides & (t.anchor < alpha))


# Figs. 6-7 (Stable-RL's ppo_ablation_both / _positive / _negative). alpha = 0 lifts nothing: GRPO-ClipHigher.
RELAX = (EPS_LOW, EPS_HIGH, ALPHA)


@register_mask("grpo_relax_both", anchors=("rollout",), params=RELAX)
def relax_both(t: Tokens, eps_low: float, eps_high: float, alpha: float) -> torch.Tensor:
    """Relax-both: no clip at all on tokens with mu < alpha."""
    return _relaxed_clip(t, eps_low, eps_high, alpha, up=True, down=True)


@register_mask("grpo_relax_high", anchors=("rollout",), params=RELAX)
def relax_high(t: Tokens, eps_low: float, eps_high: float, alpha: float) -> torch.Tensor:
    """Relax-high: the upper clip (A > 0, r > 1 + eps_high) lifted on tokens with mu < alpha."""
    return _relaxed_clip(t, eps_low, eps_high, alpha, up=True, down=False)


@register_mask("grpo_relax_low", anchors=("rollout",), params=RELAX)
def relax_low(t: Tokens, eps_low: float, eps_high: float, alpha: float) -> torch.Tensor:
    """Relax-low: the lower clip (A < 0, r < 1 - eps_low) lifted on tokens with mu < alpha."""
    return _relaxed_clip(t, eps_low, eps_high, alpha, up=False, down=True)


@register_mask("mask_bad_updates", anchors=("rollout", "recompute"), params=(DELTA,), arguments=both_sides)
def bad_updates(t: Tokens, low: float, high: float) -> torch.Tensor:
    """The minimal mask of Fig. 5: A < 0 and the sampled token's probability fell by >= delta."""
    return t.down & (t.anchor - t.pi >= low)
