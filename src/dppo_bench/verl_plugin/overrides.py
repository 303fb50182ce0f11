"""The one place that turns a method recipe into verl 0.9.1 config overrides.

verl's keys are overloaded (``clip_ratio_*`` is a ratio for PPO and a divergence threshold for
DPPO), so recipes never spell them; this module does, and its tests pin the result.
"""

from __future__ import annotations

from dppo_bench.config import MethodRecipe
from dppo_bench.methods import get_mask
from dppo_bench.verl_plugin.losses import NO_CAP

ACTOR = "actor_rollout_ref.actor"
ROLLOUT_CORRECTION = "algorithm.rollout_correction"
UNBOUNDED_IS_THRESHOLD = 1e12  # no truncation: rollout_is_weights = pi_old / mu exactly


def method_overrides(recipe: MethodRecipe, profile: str) -> list[str]:
    """Hydra overrides selecting ``recipe`` with the hyperparameters of ``profile``.

    Rollout anchor: bypass mode, so verl passes mu as ``old_log_prob`` and skips the recompute
    pass. Recompute anchor: decoupled mode with token-level rollout IS at an unbounded
    threshold, from which the loss recovers mu (see :mod:`dppo_bench.verl_plugin.losses`).
    """
    hp = recipe.profile(profile)
    rule = get_mask(recipe.mask)
    low, high = rule.low_high(hp.values())
    cap = NO_CAP if hp.is_cap is None else hp.is_cap
    overrides = [
        f"{ACTOR}.policy_loss.loss_mode={recipe.mask}",
        f"{ACTOR}.clip_ratio_low={low}",
        f"{ACTOR}.clip_ratio_high={high}",
        f"{ACTOR}.clip_ratio_c={float(cap)}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
    ]
    if recipe.anchor == "rollout":
        overrides += [f"{ROLLOUT_CORRECTION}.bypass_mode=True", f"{ROLLOUT_CORRECTION}.rollout_is=null"]
    else:
        overrides += [
            f"{ROLLOUT_CORRECTION}.bypass_mode=False",
            f"{ROLLOUT_CORRECTION}.rollout_is=token",
            f"{ROLLOUT_CORRECTION}.rollout_is_threshold={UNBOUNDED_IS_THRESHOLD}",
            f"{ROLLOUT_CORRECTION}.rollout_is_batch_normalize=False",
        ]
    overrides += [f"{ROLLOUT_CORRECTION}.rollout_rs=null"]
    return overrides
