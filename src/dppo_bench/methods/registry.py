"""Registry of mask rules: a method of the paper is a mask on the shared surrogate.

A rule decides, per token, whether the update is dropped (True = masked). It reads the
current policy pi, the trust-region anchor (mu from the rollout engine, or pi_old recomputed
by the trainer), the advantage, and for Top-K rules the per-token top-K divergence.
Thresholds arrive as ``low`` (the negative-advantage side) and ``high`` (the positive side); the
efficiency study's rules (Sec. 6) also read ``alpha``, the rollout probability below which they relax the clip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

Anchor = Literal["rollout", "recompute"]
ThresholdKind = Literal["delta", "eps", "eps_alpha", "none"]

# Which recipe hyperparameters each threshold kind reads, in (low, high) order.
THRESHOLD_PARAMS: dict[ThresholdKind, tuple[str, ...]] = {
    "delta": ("delta",),
    "eps": ("eps_low", "eps_high"),
    "eps_alpha": ("eps_low", "eps_high", "alpha"),
    "none": (),
}


@dataclass(frozen=True)
class Tokens:
    """What a mask rule may read, one entry per token; detached float32 tensors.

    Derived quantities are cached, so rules and the step statistics share one computation.
    """

    log_pi: torch.Tensor
    log_anchor: torch.Tensor
    advantages: torch.Tensor
    topk_divergence: torch.Tensor | None = None

    @cached_property
    def pi(self) -> torch.Tensor:
        return self.log_pi.exp()

    @cached_property
    def anchor(self) -> torch.Tensor:
        return self.log_anchor.exp()

    @cached_property
    def up(self) -> torch.Tensor:
        """A > 0: the update raises the token's probability."""
        return self.advantages > 0

    @cached_property
    def down(self) -> torch.Tensor:
        """A < 0: the update lowers it."""
        return self.advantages < 0


MaskFn = Callable[..., "torch.Tensor"]  # (tokens, low, high), and alpha for the "eps_alpha" rules


@dataclass(frozen=True)
class MaskRule:
    name: str
    fn: MaskFn
    anchors: tuple[Anchor, ...]  # anchors the rule is defined for
    thresholds: ThresholdKind
    topk_kind: Literal["tv", "kl"] | None = None  # the top-K divergence the rule reads, if any

    @property
    def needs_topk(self) -> bool:
        return self.topk_kind is not None

    @property
    def params(self) -> tuple[str, ...]:
        return THRESHOLD_PARAMS[self.thresholds]

    def low_high(self, hp: dict[str, float]) -> tuple[float, float]:
        """(low, high) thresholds from a recipe's hyperparameters."""
        if self.thresholds == "delta":
            return hp["delta"], hp["delta"]
        if self.thresholds in ("eps", "eps_alpha"):
            return hp["eps_low"], hp["eps_high"]
        return 0.0, 0.0

    @property
    def reads_alpha(self) -> bool:
        return self.thresholds == "eps_alpha"

    def alpha(self, hp: dict[str, float]) -> float | None:
        """The rollout-probability cutoff from a recipe's hyperparameters; None for rules without one."""
        return hp["alpha"] if self.reads_alpha else None

    def __call__(self, tokens: Tokens, low: float, high: float, alpha: float | None = None) -> torch.Tensor:
        if not self.reads_alpha:
            return self.fn(tokens, low, high)
        if alpha is None:
            raise ValueError(f"mask rule {self.name!r} needs alpha (the rollout probability below which it relaxes)")
        return self.fn(tokens, low, high, alpha)


_RULES: dict[str, MaskRule] = {}


def register_mask(
    name: str, *, anchors: tuple[Anchor, ...], thresholds: ThresholdKind, topk_kind: Literal["tv", "kl"] | None = None
) -> Callable[[MaskFn], MaskFn]:
    """Register ``fn`` as mask rule ``name``; stack the decorator to give a rule several names."""

    def deco(fn: MaskFn) -> MaskFn:
        if name in _RULES:
            raise ValueError(f"mask rule {name!r} is already registered (by {_RULES[name].fn.__qualname__})")
        _RULES[name] = MaskRule(name, fn, anchors, thresholds, topk_kind)
        return fn

    return deco


def get_mask(name: str) -> MaskRule:
    try:
        return _RULES[name]
    except KeyError:
        raise KeyError(f"unknown mask rule {name!r}; registered: {', '.join(sorted(_RULES))}") from None


def mask_names() -> list[str]:
    return sorted(_RULES)
