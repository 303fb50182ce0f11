"""Registry of mask rules: a method is a rule on the shared surrogate (:mod:`dppo_bench.methods.surrogate`).

A rule decides, per token, how much of the update passes: a hard mask (True = dropped) or, for ``gate="soft"``, a
non-negative weight. It reads the current policy pi, the trust-region anchor (mu from the rollout engine, or pi_old
recomputed by the trainer), the advantage, the response mask (for sequence-level quantities) and, for Top-K rules,
the per-token top-K divergence. Besides its gate a rule names the level of its importance ratio (``token`` or
``sequence``) and may add a per-token penalty to the loss: the named parts of the one surrogate.

A rule declares its hyperparameters once, as :class:`~dppo_bench.methods.params.Param`; the surrogate adds C
(``is_cap``) to every rule. The rule function receives the values as positional arguments, by default in the
declared order (``arguments`` maps them otherwise). Rules of the suite live in this package; a user's rules live in
``<config root>/recipes/rules/*.py`` (:func:`load_rule_files`), each module registering its rules on import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dppo_bench.errors import UnknownNameError, UserError
from dppo_bench.methods.params import Anchor, Param, Values, validate_values
from dppo_bench.methods.verl_losses import VERL_LOSSES

if TYPE_CHECKING:
    import torch

Gate = Literal["mask", "soft"]
Level = Literal["token", "sequence"]

IS_CAP = Param(
    "is_cap",
    "C in the weight min(pi/mu, C) of the surrogate; null = no cap (the paper's C = infinity)",
    source="Qi et al. 2026 (arXiv 2602.04879), Eq. 23",
    ge=1.0,
    nullable=True,
)


def log_ratio(log_pi: torch.Tensor, log_mu: torch.Tensor) -> torch.Tensor:
    """log(pi / mu) per token; 0 where both policies give the token probability 0 (log pi = log mu = -inf, as a padded
    or impossible token can give): -inf - -inf would be NaN, and the NaN would reach the loss through its weight even
    though the token gets no gradient. Equal (zero) probabilities are a ratio of 1, as for any unmoved token."""
    both_impossible = log_pi.isneginf() & log_mu.isneginf()
    return (log_pi - log_mu).masked_fill_(both_impossible, 0.0)


@dataclass(frozen=True)
class Tokens:
    """What a rule may read, one entry per token; detached float32 tensors of shape (batch, response_len).

    ``response_mask`` (None: every token is a response token) bounds the sequence-level quantities; ``log_mu`` is
    the rollout policy's log-prob when the anchor is not mu (None: the anchor is mu). Derived quantities are
    cached, so rules and the step statistics share one computation.
    """

    log_pi: torch.Tensor
    log_anchor: torch.Tensor
    advantages: torch.Tensor
    topk_divergence: torch.Tensor | None = None
    response_mask: torch.Tensor | None = None
    log_mu: torch.Tensor | None = None

    @cached_property
    def pi(self) -> torch.Tensor:
        return self.log_pi.exp()

    @cached_property
    def anchor(self) -> torch.Tensor:
        return self.log_anchor.exp()

    @cached_property
    def log_ratio(self) -> torch.Tensor:
        """log(pi / anchor), 0 for a token both give probability 0 (:func:`log_ratio`)."""
        return log_ratio(self.log_pi, self.log_anchor)

    @cached_property
    def log_rollout(self) -> torch.Tensor:
        """log mu, the rollout policy (the anchor itself for rules anchored to it)."""
        return self.log_anchor if self.log_mu is None else self.log_mu

    @cached_property
    def up(self) -> torch.Tensor:
        """A > 0: the update raises the token's probability."""
        return self.advantages > 0

    @cached_property
    def down(self) -> torch.Tensor:
        """A < 0: the update lowers it."""
        return self.advantages < 0

    @cached_property
    def valid(self) -> torch.Tensor:
        return self.up.new_ones(self.up.shape) if self.response_mask is None else self.response_mask.bool()

    def sequence_mean(self, values: torch.Tensor) -> torch.Tensor:
        """Each sequence's mean of ``values`` over its response tokens, broadcast to its tokens (0 for a sequence
        without response tokens)."""
        valid = self.valid.to(values.dtype)
        total = values.where(self.valid, 0.0).sum(-1, keepdim=True)
        return (total / valid.sum(-1, keepdim=True).clamp(min=1)).expand_as(values)


RuleFn = Callable[..., "torch.Tensor"]  # (tokens, *arguments) -> bool mask (True = dropped) or a soft weight
PenaltyFn = Callable[..., "torch.Tensor"]  # (log pi/mu with gradient, tokens, values) -> per-token penalty


@dataclass(frozen=True)
class MaskRule:
    name: str
    fn: RuleFn
    anchors: tuple[Anchor, ...]  # anchors the rule is defined for
    params: tuple[Param, ...] = ()  # the rule's own hyperparameters (the surrogate adds is_cap)
    arguments: Callable[[Values], tuple] | None = None  # values -> fn's arguments; None: the declared order
    gate: Gate = "mask"
    ratio: Level = "token"  # the level of the importance ratio in the weight min(ratio, C)
    penalty: PenaltyFn | None = None  # a per-token function of log pi/mu added to the loss, with its own gradient
    topk_kind: Literal["tv", "kl"] | None = None  # the top-K divergence the rule reads, if any
    origin: str = field(default="", compare=False)  # the file of a rule loaded from a config root ("" otherwise)

    @property
    def needs_topk(self) -> bool:
        return self.topk_kind is not None

    @property
    def all_params(self) -> tuple[Param, ...]:
        """Every hyperparameter a recipe of this rule gives: the rule's own, then the surrogate's C."""
        return (*self.params, IS_CAP)

    @property
    def is_token_mask(self) -> bool:
        """The paper's form: a hard mask on a token-level ratio, no penalty (loss -A sg(min(r, C)) M log pi)."""
        return self.gate == "mask" and self.ratio == "token" and self.penalty is None

    @property
    def extra_stats(self) -> tuple[str, ...]:
        """Statistics this rule's parts add to the surrogate's (:data:`~dppo_bench.methods.surrogate.STAT_NAMES`)."""
        return (("gate_mean",) if self.gate == "soft" else ()) + (("penalty_mean",) if self.penalty else ())

    def values(self, **given) -> Values:
        """``given`` checked against the declaration (defaults filled in); raises HyperparameterError."""
        return validate_values(f"mask {self.name!r}", self.all_params, given)

    def args(self, values: Values) -> tuple:
        """The rule function's arguments for one profile's values."""
        if self.arguments is not None:
            return tuple(self.arguments(values))
        return tuple(getattr(values, p.name) for p in self.params)

    @cached_property
    def _required_args(self) -> list[str]:
        signature = list(inspect.signature(self.fn).parameters.values())[1:]  # after the tokens
        return [p.name for p in signature if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]

    def __call__(self, tokens: Tokens, *args) -> torch.Tensor:
        missing = self._required_args[len(args) :]
        if missing:
            raise ValueError(f"mask rule {self.name!r} needs {', '.join(missing)}")
        return self.fn(tokens, *args)


_RULES: dict[str, MaskRule] = {}


def register_mask(
    name: str,
    *,
    anchors: tuple[Anchor, ...],
    params: tuple[Param, ...] = (),
    arguments: Callable[[Values], tuple] | None = None,
    gate: Gate = "mask",
    ratio: Level = "token",
    penalty: PenaltyFn | None = None,
    topk_kind: Literal["tv", "kl"] | None = None,
) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as rule ``name``; stack the decorator to give a rule several names."""

    def deco(fn: RuleFn) -> RuleFn:
        if name in _RULES:
            raise UserError(f"mask rule {name!r} is already registered (by {_RULES[name].fn.__qualname__})")
        if name in VERL_LOSSES:  # verl's registry would silently replace verl's own function with ours
            raise UserError(f"mask rule {name!r} has the name of one of verl's own loss modes; choose another")
        if IS_CAP.name in {p.name for p in params}:
            raise UserError(f"mask rule {name!r}: is_cap is the surrogate's own hyperparameter; do not declare it")
        origin = getattr(sys.modules.get(fn.__module__), "__file__", "") if fn.__module__ in _LOADED_NAMES else ""
        rule = MaskRule(name, fn, anchors, tuple(params), arguments, gate, ratio, penalty, topk_kind, origin or "")
        if arguments is None:
            _check_signature(rule)
        _RULES[name] = rule
        return fn

    return deco


def _check_signature(rule: MaskRule) -> None:
    """Without ``arguments`` the function takes the declared values in order: its parameters must be named so."""
    names = [p.name for p in list(inspect.signature(rule.fn).parameters.values())[1:]]
    declared = [p.name for p in rule.params]
    if names[: len(declared)] != declared:
        raise UserError(
            f"mask rule {rule.name!r}: {rule.fn.__qualname__} takes ({', '.join(names)}) after the tokens, but the "
            f"rule declares ({', '.join(declared)}); name the parameters alike or pass arguments="
        )


def get_mask(name: str) -> MaskRule:
    try:
        return _RULES[name]
    except KeyError:
        raise UnknownNameError(f"unknown mask rule {name!r}; registered: {', '.join(sorted(_RULES))}") from None


def mask_names() -> list[str]:
    return sorted(_RULES)


# -- rules from files (a config root's recipes/rules/*.py) ---------------------------------------------------------
_LOADED: dict[Path, str] = {}  # resolved file -> its module name
_LOADED_NAMES: set[str] = set()


def load_rule_file(path: Path | str) -> None:
    """Import the module at ``path`` once per process; its decorators register its rules."""
    path = Path(path).resolve()
    if path in _LOADED:
        return
    if not path.is_file():
        raise FileNotFoundError(f"rule module {path} does not exist")
    name = f"dppo_bench_rules_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    _LOADED[path], sys.modules[name] = name, module
    _LOADED_NAMES.add(name)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del _LOADED[path], sys.modules[name]
        raise


def load_rule_files(directory: Path) -> None:
    """Every ``*.py`` of ``directory`` (none when it does not exist), in name order."""
    for path in sorted(directory.glob("*.py")) if directory.is_dir() else ():
        load_rule_file(path)
