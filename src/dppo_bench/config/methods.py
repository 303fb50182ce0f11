"""``recipes/methods/<id>.yaml``: a mask rule, its anchor and its hyperparameter profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dppo_bench.config.identity import identity_sha256
from dppo_bench.config.loader import entry_paths, load_model, locate
from dppo_bench.config.roots import METHODS_DIR
from dppo_bench.config.yaml_io import FieldError, Id, Strict
from dppo_bench.methods import get_mask, mask_names

Threshold = Annotated[float, Field(ge=0.0)]

IS_CAP_LIMIT = 1e4  # clip_ratio_c at or above it means no cap in our verl losses

# Fields that do not change what a run computes, left out of the recipe's part of a run's identity: renaming or
# citing must not mark finished runs stale or stop a killed one from resuming.
RECIPE_NOT_IDENTITY = ("display_name", "paper")


class Hyperparameters(Strict):
    """One profile of a method's hyperparameters (the paper's values for one regime)."""

    delta: Threshold | None = None  # divergence threshold (TV or KL)
    eps_low: Threshold | None = None  # ratio clip, negative-advantage side: r < 1 - eps_low
    eps_high: Threshold | None = None  # ratio clip, positive-advantage side: r > 1 + eps_high
    alpha: Annotated[float, Field(ge=0.0, le=1.0)] | None = None  # Sec. 6: no clip where mu < alpha
    # C in min(pi/mu, C); null = no cap, the paper's C = infinity (required). Below IS_CAP_LIMIT, verl's encoding of
    # "no cap" (dppo_bench.verl_plugin.hyperparameters): a larger C would be a cap locally and none on verl
    is_cap: Annotated[float, Field(ge=1.0, lt=IS_CAP_LIMIT)] | None

    def values(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in type(self).model_fields if k in self.model_fields_set}


class MethodRecipe(Strict):
    """A mask rule registered in dppo_bench.methods, its anchor and its hyperparameter profiles."""

    id: Id
    display_name: str
    paper: str  # where the method and its values come from
    mask: str  # a rule registered in dppo_bench.methods
    anchor: Literal["rollout", "recompute"]
    hyperparameters: dict[str, Hyperparameters] = Field(min_length=1)  # profile name -> values

    @model_validator(mode="after")
    def _check_rule(self) -> MethodRecipe:
        if self.mask not in mask_names():
            raise FieldError("mask", f"unknown mask rule {self.mask!r}; registered: {', '.join(mask_names())}")
        rule = get_mask(self.mask)
        if self.anchor not in rule.anchors:
            raise FieldError("anchor", f"mask {self.mask!r} is defined for anchor(s) {list(rule.anchors)}")
        expected = set(rule.params) | {"is_cap"}
        for profile, hp in self.hyperparameters.items():
            given = hp.model_fields_set
            for name in sorted(expected - given):
                raise FieldError(f"hyperparameters.{profile}.{name}", f"missing (mask {self.mask!r} needs it)")
            for name in sorted(given - expected):
                raise FieldError(f"hyperparameters.{profile}.{name}", f"not used by mask {self.mask!r}")
            for name in rule.params:  # a null threshold would reach verl as clip_ratio_*=None
                if getattr(hp, name) is None:
                    message = f"null; mask {self.mask!r} needs a number (only is_cap may be null)"
                    raise FieldError(f"hyperparameters.{profile}.{name}", message)
        return self

    def profile(self, name: str) -> Hyperparameters:
        try:
            return self.hyperparameters[name]
        except KeyError:
            have = sorted(self.hyperparameters)
            raise KeyError(f"method {self.id!r} has no hyperparameter profile {name!r}; it has {have}") from None

    def sha256(self) -> str:
        """The recipe's part of a run's identity. Every profile is in it, not only the one a setting uses: the
        hash is taken without the setting (run.json, aggregation and resumption compare it as it is)."""
        return identity_sha256(self, RECIPE_NOT_IDENTITY)


def load_method(path: Path) -> MethodRecipe:
    return load_model(MethodRecipe, path)


def find_method(method_id: str, methods_dir: Path = METHODS_DIR) -> MethodRecipe:
    return load_method(locate("method", method_id, methods_dir))


def load_methods(methods_dir: Path = METHODS_DIR) -> dict[str, MethodRecipe]:
    return {p.stem: load_method(p) for p in entry_paths(methods_dir)}
