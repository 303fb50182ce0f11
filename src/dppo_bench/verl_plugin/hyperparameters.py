"""A method's hyperparameters in verl 0.9.1's existing actor keys, and back: one encoding and its inverse.

verl rejects unknown keys, so our values travel in keys that mean something else to verl's own modes:

* ``clip_ratio_low``: the threshold or clip of the negative-advantage side (delta, or eps_low);
* ``clip_ratio_high``: the same for the positive side;
* ``clip_ratio_c``: C of the IS weight min(pi/mu, C); :data:`NO_CAP` means none (a recipe's ``is_cap: null``,
  the paper's C = infinity; recipe validation keeps a real cap below it, so no cap is ever read as none);
* ``policy_loss.dro_beta``: alpha of the efficiency study's rules only (read by verl's ``dro`` mode alone, and None
  by default, so a run that forgot to set it fails instead of relaxing nothing).

:func:`to_verl` writes them (the overrides), :func:`from_verl` reads them back in the loss; a test round-trips every
recipe and profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dppo_bench.config import IS_CAP_LIMIT, Hyperparameters
from dppo_bench.methods import MaskRule

NO_CAP = IS_CAP_LIMIT
ALPHA = "policy_loss.dro_beta"  # under actor_rollout_ref.actor


@dataclass(frozen=True)
class LossValues:
    """What the shared surrogate needs of a method besides its rule."""

    low: float
    high: float
    is_cap: float | None
    alpha: float | None = None

    @classmethod
    def of(cls, rule: MaskRule, hp: Hyperparameters) -> LossValues:
        low, high = rule.low_high(hp.values())
        return cls(low, high, hp.is_cap, rule.alpha(hp.values()))


def to_verl(values: LossValues) -> dict[str, float]:
    """The actor keys (relative to ``actor_rollout_ref.actor``) and their values."""
    keys = {
        "clip_ratio_low": values.low,
        "clip_ratio_high": values.high,
        "clip_ratio_c": NO_CAP if values.is_cap is None else float(values.is_cap),
    }
    return keys | ({ALPHA: values.alpha} if values.alpha is not None else {})


def from_verl(rule: MaskRule, config: Any) -> LossValues:
    """The values from verl's actor config (``ActorConfig`` or its dict form), as the loss receives it."""
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    cap = None if config.clip_ratio_c >= NO_CAP else float(config.clip_ratio_c)
    return LossValues(float(low), float(high), cap, _alpha(rule, config))


def _alpha(rule: MaskRule, config: Any) -> float | None:
    if not rule.reads_alpha:
        return None
    alpha = config.policy_loss.get("dro_beta", None)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 <= alpha <= 1.0:
        raise ValueError(
            f"loss mode {rule.name!r} reads alpha from actor_rollout_ref.actor.{ALPHA}, which must be a probability "
            f"in [0, 1]; got {alpha!r}"
        )
    return float(alpha)
