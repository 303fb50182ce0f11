"""The one place that turns a method recipe into verl 0.9.1 config overrides.

A rule of ours sends its hyperparameters through our channel (:mod:`dppo_bench.verl_plugin.contract`) and
sets no verl key of the loss but its name: verl's keys are overloaded (``clip_ratio_*`` is a ratio for PPO and a
divergence threshold for DPPO), so they carry nothing of ours. A recipe of verl's own loss mode sets exactly the
keys its declaration names (:mod:`dppo_bench.methods.verl_losses`), with verl's meaning. Tests pin the result.
"""

from __future__ import annotations

import re
from typing import Any

from dppo_bench.config import MethodRecipe
from dppo_bench.errors import UserError
from dppo_bench.methods.params import Anchor, Values
from dppo_bench.methods.registry import MaskRule
from dppo_bench.methods.verl_losses import IN_LOSS, VerlLoss
from dppo_bench.verl_plugin.contract import LOSS_ENV, RAY_ENV_VARS, TOPK_K_KEY, VLLM_DEFAULT_MAX_LOGPROBS, encode

ACTOR = "actor_rollout_ref.actor"
ROLLOUT_CORRECTION = "algorithm.rollout_correction"
UNBOUNDED_IS_THRESHOLD = 1e12  # no truncation: verl's weights stay pi_old / mu (within its exp(+-20) clamp)
PAPER_TOPK = 20  # Sec. 4.3: K = 20, vLLM's default cap on returned log-probs


def method_overrides(recipe: MethodRecipe, profile: str, *, topk: int = PAPER_TOPK) -> list[str]:
    """Hydra overrides selecting ``recipe`` with the hyperparameters of ``profile``.

    Our rules. Rollout anchor: bypass mode, so verl passes mu as ``old_log_prob`` and skips the recompute
    pass. Recompute anchor: decoupled mode with token-level rollout IS at an unbounded
    threshold; the weights tell the loss the mode, and mu's log-probs reach it beside them
    (see :mod:`dppo_bench.verl_plugin.losses`). verl's own modes: :func:`verl_loss_overrides`.
    """
    values = recipe.profile(profile)
    overrides = [f"{ACTOR}.policy_loss.loss_mode={recipe.loss_mode}"]
    if recipe.verl is not None:
        return overrides + verl_loss_overrides(recipe.verl, recipe.anchor, values)
    rule = recipe.rule
    overrides += [channel_override(rule, values), "actor_rollout_ref.rollout.calculate_log_probs=True"]
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
    if rule.needs_topk:
        overrides += topk_overrides(topk)
    return overrides


def verl_loss_overrides(loss: VerlLoss, anchor: Anchor, values: Values) -> list[str]:
    """verl's own mode: every declared key with its value (the bypass_mode loss's correction is not in verl's yaml,
    hence added), and the mode of the anchor; the recompute anchor's correction is among the declared keys."""
    overrides = ["actor_rollout_ref.rollout.calculate_log_probs=True"]
    overrides += [
        f"{'+' if key.startswith(f'{IN_LOSS}.') else ''}{key}={hydra_value(value)}"
        for key, value in loss.keys(anchor, values).items()
    ]
    if anchor == "rollout":
        overrides += [
            f"{ROLLOUT_CORRECTION}.bypass_mode=True",
            f"{ROLLOUT_CORRECTION}.rollout_is=null",
            f"{ROLLOUT_CORRECTION}.rollout_rs=null",
        ]
    else:
        overrides += [f"{ROLLOUT_CORRECTION}.bypass_mode=False"]
    return overrides


def topk_overrides(k: int) -> list[str]:
    """What a Top-K loss mode needs from verl besides the loss (see :mod:`dppo_bench.verl_plugin.topk`).

    K rides in ``rollout.custom``, verl's free extension dict (unknown keys elsewhere are
    rejected); vLLM's ``max_logprobs`` is raised when K exceeds its default of 20. Fused kernels
    never materialise the logits the divergence is computed from, and only the v1 trainer
    carries the kept set from the agent loop to the actor.
    """
    if k < 1:
        raise UserError(f"top-K needs K >= 1, got {k}")
    overrides = [
        f"++actor_rollout_ref.rollout.custom.{TOPK_K_KEY}={k}",
        "actor_rollout_ref.model.use_fused_kernels=False",
        "trainer.use_v1=True",
    ]
    if k > VLLM_DEFAULT_MAX_LOGPROBS:
        overrides.append(f"++actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs={k}")
    return overrides


def channel_override(rule: MaskRule, values: Values) -> str:
    """The Hydra override that puts the hyperparameter channel into Ray's runtime environment."""
    return f"{RAY_ENV_VARS}.{LOSS_ENV}={hydra_value(encode(rule, values))}"


def hydra_value(value: Any) -> str:
    """A value as a Hydra override writes it: null, true/false, a number, or a quoted string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):  # Hydra unescapes backslashes only before a quote and at the end of a quoted string
        quoted = re.sub(r"(\\*)'", lambda m: m[1] * 2 + "\\'", value)
        return "'" + re.sub(r"(\\+)$", lambda m: m[1] * 2, quoted) + "'"
    return repr(value)
