"""Every method of the paper as a mask rule on one shared surrogate loss.

The rules and their registry import without torch (the config layer validates recipes against
them); the surrogate, which needs torch, is loaded on first use.
"""

from dppo_bench.methods import rules as _rules  # noqa: F401  (registers the paper's rules)
from dppo_bench.methods.registry import MaskRule, Tokens, get_mask, mask_names, register_mask

__all__ = ["MaskRule", "STAT_NAMES", "Tokens", "get_mask", "mask_names", "register_mask", "surrogate_loss"]


def __getattr__(name: str):
    if name in ("surrogate_loss", "STAT_NAMES"):
        from dppo_bench.methods import surrogate

        return getattr(surrogate, name)
    raise AttributeError(f"module 'dppo_bench.methods' has no attribute {name!r}")
