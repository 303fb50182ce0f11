"""Typed, validated models of the suite's yaml files, and their loaders.

Every loader reports bad input as one :class:`ConfigError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dppo_bench.methods import get_mask, mask_names

REPO_ROOT = Path(__file__).resolve().parents[2]
METHODS_DIR = REPO_ROOT / "recipes" / "methods"
ID_PATTERN = re.compile(r"^[a-z0-9_]+$")


class ConfigError(ValueError):
    """Bad input in a config file: the message names the file and the field."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path, self.field = str(path), field
        where = f"{path}: field '{field}'" if field else str(path)
        super().__init__(f"{where}: {message}")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Threshold = Annotated[float, Field(ge=0.0)]


class Hyperparameters(Strict):
    """One profile of a method's hyperparameters (the paper's values for one regime)."""

    delta: Threshold | None = None  # divergence threshold (TV or KL)
    eps_low: Threshold | None = None  # ratio clip, negative-advantage side: r < 1 - eps_low
    eps_high: Threshold | None = None  # ratio clip, positive-advantage side: r > 1 + eps_high
    is_cap: Annotated[float, Field(ge=1.0)] | None  # C in min(pi/mu, C); null = no cap (required)

    def values(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in type(self).model_fields if k in self.model_fields_set}


class MethodRecipe(Strict):
    """``recipes/methods/<id>.yaml``: a mask rule, its anchor and its hyperparameter profiles."""

    id: str
    display_name: str
    paper: str  # where the method and its values come from
    mask: str  # a rule registered in dppo_bench.methods
    anchor: Literal["rollout", "recompute"]
    hyperparameters: dict[str, Hyperparameters] = Field(min_length=1)  # profile name -> values

    @model_validator(mode="after")
    def _check_rule(self) -> MethodRecipe:
        if not ID_PATTERN.match(self.id):
            raise ValueError(f"id {self.id!r} must match [a-z0-9_]+")
        if self.mask not in mask_names():
            raise _FieldError("mask", f"unknown mask rule {self.mask!r}; registered: {', '.join(mask_names())}")
        rule = get_mask(self.mask)
        if self.anchor not in rule.anchors:
            raise _FieldError("anchor", f"mask {self.mask!r} is defined for anchor(s) {list(rule.anchors)}")
        expected = set(rule.params) | {"is_cap"}
        for profile, hp in self.hyperparameters.items():
            given = hp.model_fields_set
            for name in sorted(expected - given):
                raise _FieldError(f"hyperparameters.{profile}.{name}", f"missing (mask {self.mask!r} needs it)")
            for name in sorted(given - expected):
                raise _FieldError(f"hyperparameters.{profile}.{name}", f"not used by mask {self.mask!r}")
        return self

    def profile(self, name: str) -> Hyperparameters:
        try:
            return self.hyperparameters[name]
        except KeyError:
            have = sorted(self.hyperparameters)
            raise KeyError(f"method {self.id!r} has no hyperparameter profile {name!r}; it has {have}") from None

    def sha256(self) -> str:
        return canonical_sha256(self.model_dump(mode="json"))


class _FieldError(ValueError):
    """Raised inside validators to point at a nested field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


M = TypeVar("M", bound=BaseModel)


def canonical_sha256(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(path, "", f"not valid yaml: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping at the top level")
    return data


def validate(model: type[M], data: dict, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _FieldError):
            raise ConfigError(path, cause.field, str(cause)) from None
        field = ".".join(str(part) for part in err["loc"])
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(path, field, message) from None


def load_method(path: Path) -> MethodRecipe:
    data = read_yaml(path)
    if "id" in data:
        raise ConfigError(path, "id", "the id is the file name; do not set it")
    return validate(MethodRecipe, {"id": path.stem, **data}, path)


def find_method(method_id: str, methods_dir: Path = METHODS_DIR) -> MethodRecipe:
    path = methods_dir / f"{method_id}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in methods_dir.glob("*.yaml")))
        raise ConfigError(path, "", f"unknown method {method_id!r}; known: {known}")
    return load_method(path)


def load_methods(methods_dir: Path = METHODS_DIR) -> dict[str, MethodRecipe]:
    return {p.stem: load_method(p) for p in sorted(methods_dir.glob("*.yaml"))}
