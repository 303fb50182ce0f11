"""A method's hyperparameters, declared once: name, type, bounds, default and where each value comes from.

A rule (:mod:`dppo_bench.methods.registry`) or one of verl's own loss modes (:mod:`dppo_bench.methods.verl_losses`)
declares a tuple of :class:`Param`; everything else derives from it: recipe validation (:func:`validate_values`, the
errors naming the field), the encoding that carries the values to verl's workers and its decoding inside the loss
(:mod:`dppo_bench.verl_plugin.contract`, which validates again with the same function), and the local
trainer, which reads the same :class:`Values`.

Torch-free: the config layer validates recipes without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, ValidationError, create_model

from dppo_bench.errors import UserError

REQUIRED = "required"  # a Param's default when every profile must give the value
Anchor = Literal["rollout", "recompute"]  # mu from the rollout engine (bypass mode), or pi_old recomputed (decoupled)


@dataclass(frozen=True)
class Param:
    """One hyperparameter of a rule or loss.

    ``kind``: a type, or a tuple of types any of which is accepted (verl's ``"0.5_5.0"``-or-float thresholds).
    ``default``: the value a profile may leave out (:data:`REQUIRED`: none). ``source``: where the default, or the
    usual value, comes from (a paper and section, a repository file at a commit). ``key``: for verl's own loss modes,
    the verl config key the value goes to; None for our rules, whose values travel in our channel.
    """

    name: str
    doc: str
    source: str = ""
    default: Any = REQUIRED
    kind: type | tuple[type, ...] = float
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    nullable: bool = False  # null is a value (is_cap: null = no cap; rollout_is: null = no IS weights)
    choices: tuple[str, ...] | None = None
    key: str | None = None

    @property
    def required(self) -> bool:
        return isinstance(self.default, str) and self.default == REQUIRED

    def annotation(self) -> Any:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        if self.choices is not None:
            kinds = (Literal[self.choices],)
        base = Union[kinds] if len(kinds) > 1 else kinds[0]  # noqa: UP007  (a runtime union of a tuple)
        limits = (("ge", self.ge), ("gt", self.gt), ("le", self.le), ("lt", self.lt))
        bounds = {k: v for k, v in limits if v is not None}
        typed = Annotated[base, Field(**bounds)] if bounds else base
        return typed | None if self.nullable else typed


class HyperparameterError(UserError):
    """A value that does not fit its declaration; ``name`` is the hyperparameter ("" for the whole mapping)."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(f"{name}: {message}" if name else message)
        self.message = message


class Values:
    """One profile's values of a method's hyperparameters, every declared one filled in (defaults included).

    Attribute access by name (``values.delta``); :meth:`values` is the plain dict.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no hyperparameter {name!r}; these are {sorted(self._values)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("hyperparameter values are read-only")

    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Values) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        return f"Values({self._values!r})"


_MODELS: dict[tuple[Param, ...], type] = {}


def _model(params: tuple[Param, ...]) -> type:
    """A strict pydantic model of ``params`` (cached): pydantic's own messages for types and bounds."""
    if params not in _MODELS:
        config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
        fields = {p.name: (p.annotation(), ...) for p in params}
        _MODELS[params] = create_model("Hyperparameters", __config__=config, **fields)
    return _MODELS[params]


def validate_values(owner: str, params: Iterable[Param], given: Mapping[str, Any]) -> Values:
    """``given`` checked against the declaration, with the defaults filled in.

    Raises :class:`HyperparameterError` naming the hyperparameter: unknown, missing (no default), null where a number is
    needed, of the wrong type or out of bounds. ``owner`` names the rule or loss in the messages.
    """
    params = tuple(params)
    names = {p.name for p in params}
    if not isinstance(given, Mapping):
        raise HyperparameterError("", f"expected a mapping of hyperparameter values, got {given!r}")
    for name in sorted(set(given) - names):
        raise HyperparameterError(name, f"not used by {owner} (it reads: {', '.join(sorted(names)) or 'nothing'})")
    for p in params:
        if p.name not in given and p.required:
            raise HyperparameterError(p.name, f"Field required: missing ({owner} needs it)")
        if p.name in given and given[p.name] is None and not p.nullable:
            nullable = [q.name for q in params if q.nullable]
            may = f" (only {', '.join(nullable)} may be null)" if nullable else ""
            raise HyperparameterError(p.name, f"null; {owner} needs a number{may}")
    filled = {p.name: given[p.name] if p.name in given else p.default for p in params}
    try:
        checked = _model(params).model_validate(filled)
    except ValidationError as e:
        err = e.errors()[0]
        raise HyperparameterError(str(err["loc"][0]), err["msg"]) from None
    return Values({p.name: getattr(checked, p.name) for p in params})
