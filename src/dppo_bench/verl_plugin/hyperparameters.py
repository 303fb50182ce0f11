"""The one channel that carries a rule's hyperparameters to verl's workers, and back out inside the loss.

verl rejects config keys it does not know and its actor config has no free-form field, so our rules' values do not
travel in verl's config at all: the launcher puts one environment variable, :data:`LOSS_ENV`, into Ray's runtime
environment (every worker of the job gets it), holding the recipe's rule, the values of the profile the run uses
(every declared hyperparameter, defaults filled in) and, for a rule loaded from a config root, the file of its module,
which the plugin imports in each worker before it registers the loss modes (:mod:`dppo_bench.verl_plugin.entry`).

:func:`encode` writes it, :func:`decode` reads it inside the loss and validates it against the rule's declaration
again; a test round-trips every recipe and profile through verl's own Hydra composition. verl's own loss modes keep
their hyperparameters in verl's keys, each with the meaning verl gives it
(:mod:`dppo_bench.methods.verl_losses`).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

from dppo_bench.methods import HyperparameterError, MaskRule, Values, load_rule_file

LOSS_ENV = "DPPO_BENCH_LOSS"
RAY_ENV_VARS = "+ray_kwargs.ray_init.runtime_env.env_vars"  # what Ray gives every process of the job


class ChannelError(ValueError):
    """The channel is unset, unreadable, for another rule, or holds values the rule's declaration refuses."""


def encode(rule: MaskRule, values: Values) -> str:
    """The channel's content for ``rule`` at one profile's ``values`` (compact JSON, keys sorted)."""
    spec = {"rule": rule.name, "hyperparameters": values.values(), "module": rule.origin or None}
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)


def channel_override(rule: MaskRule, values: Values) -> str:
    """The Hydra override that puts the channel into Ray's runtime environment."""
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


@lru_cache(maxsize=16)
def _parse(text: str) -> dict:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChannelError(f"${LOSS_ENV} is not valid JSON ({e}): {text[:200]!r}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("hyperparameters"), dict):
        raise ChannelError(f"${LOSS_ENV} must be an object with a 'hyperparameters' object: {text[:200]!r}")
    return spec


def decode(rule: MaskRule, text: str | None) -> Values:
    """The values the channel holds for ``rule``, validated against its declaration."""
    if not text:
        raise ChannelError(
            f"loss mode {rule.name!r} reads its hyperparameters from ${LOSS_ENV}, which is unset in this process: "
            f"dppo-bench's launcher puts it into Ray's runtime environment ({RAY_ENV_VARS}.{LOSS_ENV})"
        )
    spec = _parse(text)
    if spec.get("rule") != rule.name:
        raise ChannelError(f"${LOSS_ENV} holds the hyperparameters of rule {spec.get('rule')!r}, not {rule.name!r}")
    try:
        return rule.values(**spec["hyperparameters"])
    except HyperparameterError as e:
        raise ChannelError(f"${LOSS_ENV}, rule {rule.name!r}: {e}") from None


def current_values(rule: MaskRule) -> Values:
    """The values of this process's channel for ``rule`` (what a loss reads in verl's workers)."""
    return decode(rule, os.environ.get(LOSS_ENV))


def load_channel_module() -> None:
    """Import the rule module the channel names, if any (a user's rule, registered before verl needs it)."""
    text = os.environ.get(LOSS_ENV)
    module = _parse(text).get("module") if text else None
    if module:
        load_rule_file(module)
