"""Every method as a rule on one shared surrogate loss, or as one of verl's own loss modes.

The rules, their hyperparameter declarations and the registry import without torch (the config layer validates
recipes against them); the surrogate, which needs torch, is loaded on first use.
"""

from dppo_bench.methods import comparisons as _comparisons  # noqa: F401  (registers the comparison methods' rules)
from dppo_bench.methods import rules as _rules  # noqa: F401  (registers the paper's rules)
from dppo_bench.methods.params import REQUIRED, HyperparameterError, Param, Values, validate_values
from dppo_bench.methods.registry import (
    IS_CAP,
    MaskRule,
    Tokens,
    get_mask,
    load_rule_file,
    load_rule_files,
    mask_names,
    register_mask,
)

__all__ = [
    "IS_CAP",
    "REQUIRED",
    "STAT_NAMES",
    "HyperparameterError",
    "MaskRule",
    "Param",
    "Tokens",
    "Values",
    "get_mask",
    "load_rule_file",
    "load_rule_files",
    "mask_names",
    "register_mask",
    "surrogate_loss",
    "validate_values",
]


def __getattr__(name: str):
    if name in ("surrogate_loss", "STAT_NAMES"):
        from dppo_bench.methods import surrogate  # heavy: torch, which the rule files and the CLI do not need

        return getattr(surrogate, name)
    raise AttributeError(f"module 'dppo_bench.methods' has no attribute {name!r}")
