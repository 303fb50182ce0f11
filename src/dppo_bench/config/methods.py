"""``recipes/methods/<id>.yaml``: a rule of ours (``mask``) or one of verl's loss modes (``verl_loss``), its anchor
and its hyperparameter profiles, checked against the rule's or mode's own declaration of its hyperparameters.

Rules of the suite are registered by :mod:`dppo_bench.methods`; a user's rules are the modules in
``<config root>/recipes/rules/``, imported before any recipe is validated. A recipe may ``extends: <id>`` another
and give only what it changes (a sweep's value), as a setting does; its identity is that of the resolved recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from dppo_bench.config.identity import canonical_sha256
from dppo_bench.config.loader import entry_paths, extended_data, load_model, locate
from dppo_bench.config.roots import METHODS_DIR, RULES_DIR
from dppo_bench.config.yaml_io import FieldError, Id, Strict
from dppo_bench.errors import UnknownNameError
from dppo_bench.methods import HyperparameterError, MaskRule, Values, get_mask, load_rule_files, mask_names
from dppo_bench.methods.verl_losses import VERL_LOSSES, VerlLoss

# The hyperparameter names of the first recipe format, one fixed set for every rule. A recipe's identity keeps them
# (null where its rule does not read one), so every recipe of that format keeps the identity its runs recorded.
FIRST_FORMAT_KEYS = ("delta", "eps_low", "eps_high", "alpha", "is_cap")


def load_user_rules() -> None:
    """The rule modules of the config root (``recipes/rules/*.py``), once per process; an error names the file."""
    try:
        load_rule_files(RULES_DIR)
    except Exception as e:
        raise FieldError("mask", f"a rule module in {RULES_DIR} failed to load: {type(e).__name__}: {e}") from e


class MethodRecipe(Strict):
    """Our rule on the shared surrogate (``mask``) or verl's own loss (``verl_loss``), and its profiles."""

    id: Id
    display_name: str
    paper: str  # where the method and its values come from
    mask: str | None = None  # a rule registered in dppo_bench.methods (or a config root's recipes/rules/)
    verl_loss: str | None = None  # one of verl 0.9.1's own policy-loss modes
    anchor: Literal["rollout", "recompute"]
    hyperparameters: dict[str, dict[str, Any]] = Field(min_length=1)  # profile name -> values
    _profiles: dict[str, Values] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_rule(self) -> MethodRecipe:
        load_user_rules()
        if (self.mask is None) == (self.verl_loss is None):
            raise FieldError("mask", "give exactly one of mask (a rule of ours) and verl_loss (one of verl's modes)")
        owner = self._rule_or_loss()
        if self.anchor not in owner.anchors:
            field = "mask" if self.mask else "verl_loss"
            raise FieldError("anchor", f"{field} {self.loss_mode!r} is defined for anchor(s) {list(owner.anchors)}")
        for profile, given in self.hyperparameters.items():
            try:
                self._profiles[profile] = self._values(given)
            except HyperparameterError as e:
                raise FieldError(f"hyperparameters.{profile}.{e.name}".rstrip("."), e.message) from None
        return self

    def _rule_or_loss(self) -> MaskRule | VerlLoss:
        if self.mask is not None:
            if self.mask not in mask_names():
                raise FieldError("mask", f"unknown mask rule {self.mask!r}; registered: {', '.join(mask_names())}")
            return get_mask(self.mask)
        if self.verl_loss not in VERL_LOSSES:
            raise FieldError("verl_loss", f"unknown verl loss mode {self.verl_loss!r}; verl 0.9.1 has: "
                             f"{', '.join(VERL_LOSSES)}")  # fmt: skip
        return VERL_LOSSES[self.verl_loss]

    def _values(self, given: dict[str, Any]) -> Values:
        if self.mask is not None:
            return get_mask(self.mask).values(**given)
        return VERL_LOSSES[self.verl_loss].values(self.anchor, **given)

    @property
    def loss_mode(self) -> str:
        """The name verl's ``policy_loss.loss_mode`` takes: our rule's, or verl's mode."""
        return self.mask or self.verl_loss

    @property
    def rule(self) -> MaskRule | None:
        """Our rule; None for a recipe of verl's own loss."""
        return get_mask(self.mask) if self.mask is not None else None

    @property
    def verl(self) -> VerlLoss | None:
        """verl's own loss mode; None for a recipe of our rule."""
        return VERL_LOSSES[self.verl_loss] if self.verl_loss is not None else None

    def profile(self, name: str) -> Values:
        """The values of one profile, every declared hyperparameter filled in."""
        try:
            return self._profiles[name]
        except KeyError:
            have = sorted(self.hyperparameters)
            raise UnknownNameError(
                f"method {self.id!r} has no hyperparameter profile {name!r}; it has {have}"
            ) from None

    def sha256(self) -> str:
        """The recipe's part of a run's identity: what it computes (its rule or mode, anchor and every profile's
        values, defaults included), not its display name or citation. Every profile is in it, not only the one a
        setting uses: the hash is taken without the setting (run.json, aggregation and resumption compare it)."""
        if self.mask is not None:
            profiles = {p: {**dict.fromkeys(FIRST_FORMAT_KEYS), **v.values()} for p, v in self._profiles.items()}
            identity = {"id": self.id, "mask": self.mask, "anchor": self.anchor, "hyperparameters": profiles}
            return canonical_sha256(identity)
        profiles = {p: v.values() for p, v in self._profiles.items()}
        return canonical_sha256({"id": self.id, "verl_loss": self.verl_loss, "anchor": self.anchor,
                                 "hyperparameters": profiles})  # fmt: skip


def method_data(path: Path) -> dict:
    """A recipe's yaml with ``extends: <parent id>`` resolved (a sweep's recipe: its base with the values it
    changes), as a setting's is."""
    return extended_data("method", path)


def load_method(path: Path) -> MethodRecipe:
    return load_model(MethodRecipe, path, method_data(path))


def find_method(method_id: str, methods_dir: Path = METHODS_DIR) -> MethodRecipe:
    return load_method(locate("method", method_id, methods_dir))


def load_methods(methods_dir: Path = METHODS_DIR) -> dict[str, MethodRecipe]:
    return {p.stem: load_method(p) for p in entry_paths(methods_dir)}
