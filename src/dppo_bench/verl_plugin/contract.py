"""What the launcher (:mod:`dppo_bench.verl_launch`) and the plugin inside verl's processes agree on, in one place.

The launcher runs in our process and starts verl; the plugin (the rest of :mod:`dppo_bench.verl_plugin`) runs in
verl's driver and every Ray worker, which the launcher reaches only through verl's config and the environment. Both
import the names below from here, and the launcher imports nothing else of the plugin. Importing this module imports
no verl.

The hyperparameter channel: verl rejects config keys it does not know and its actor config has no free-form field, so
our rules' values do not travel in verl's config at all. The launcher puts one environment variable,
:data:`LOSS_ENV`, into Ray's runtime environment (every worker of the job gets it), holding the recipe's rule, the
values of the profile the run uses (every declared hyperparameter, defaults filled in) and, for a rule loaded from a
config root, the file of its module, which the plugin imports in each worker before it registers the loss modes
(:mod:`dppo_bench.verl_plugin.hyperparameters`). :func:`encode` writes it, :func:`decode` reads it inside the loss
and validates it against the rule's declaration again; a test round-trips every recipe and profile through verl's own
Hydra composition. verl's own loss modes keep their hyperparameters in verl's keys, each with the meaning verl gives
it (:mod:`dppo_bench.methods.verl_losses`).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

from dppo_bench.methods import HyperparameterError, MaskRule, Values

PINNED_VERL = "0.9.1"  # the verl the plugin's patches are written against; the launcher refuses any other

# Where the launcher names plugin code to verl
PLUGIN_MODULE = "dppo_bench.verl_plugin.entry"  # the plugin's entry point (pyproject.toml), for Ray workers
KEEP_WEIGHTS = "dppo_bench.verl_plugin.keep_weights.KeepWeights"  # verl's checkpoint callback (imports verl)

# The environment of every process of a run
RAY_ENV_VARS = "+ray_kwargs.ray_init.runtime_env.env_vars"  # the Hydra key of what Ray gives every process of the job
LOSS_ENV = "DPPO_BENCH_LOSS"  # the hyperparameter channel (below)
CPU_SWITCH = "DPPO_BENCH_VERL_DEVICE"  # =cpu: the plugin makes verl run on the CPU (dppo_bench.verl_plugin.cpu)
MASKED_TOKENS_DIR_ENV = "DPPO_BENCH_MASKED_TOKENS_DIR"  # App. D's counts go here (dppo_bench.verl_plugin.masked_tokens)
PROBE_DIR_ENV = "DPPO_BENCH_PROBE_DIR"  # a probe run's tokens go here (dppo_bench.verl_plugin.probe_dump)
PROBE_FILE_PREFIX = "tokens-"  # each file there: <prefix>...npz with float arrays mu, pi, tv (one per response token)

# Keys of ours in actor_rollout_ref.rollout.custom, verl's free extension dict (unknown keys elsewhere are rejected)
TOPK_K_KEY = "dppo_topk_k"  # K of a Top-K loss mode (dppo_bench.verl_plugin.topk)
MISMATCH_EVERY_KEY = "dppo_bench_mismatch_every"  # steps between |pi - mu| measurements (verl_plugin.mismatch)
VLLM_DEFAULT_MAX_LOGPROBS = 20  # vLLM rejects logprobs > max_logprobs (engine arg, default 20)


def cpu_requested() -> bool:
    """Whether this process runs verl on the CPU (the switch the launcher puts into every process's environment)."""
    return os.environ.get(CPU_SWITCH, "").strip().lower() == "cpu"


class ChannelError(ValueError):
    """The channel is unset, unreadable, for another rule, or holds values the rule's declaration refuses."""


def encode(rule: MaskRule, values: Values) -> str:
    """The channel's content for ``rule`` at one profile's ``values`` (compact JSON, keys sorted)."""
    spec = {"rule": rule.name, "hyperparameters": values.values(), "module": rule.origin or None}
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)


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


def rule_module(text: str) -> str | None:
    """The file of the rule module the channel names (None: a rule of the suite, registered already)."""
    return _parse(text).get("module")
