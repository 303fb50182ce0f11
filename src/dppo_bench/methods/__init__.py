"""Every method of the paper as a mask rule on one shared surrogate loss."""

from dppo_bench.methods import rules as _rules  # noqa: F401  (registers the paper's rules)
from dppo_bench.methods.registry import MaskRule, Tokens, get_mask, mask_names, register_mask
from dppo_bench.methods.surrogate import STAT_NAMES, surrogate_loss

__all__ = ["MaskRule", "STAT_NAMES", "Tokens", "get_mask", "mask_names", "register_mask", "surrogate_loss"]
