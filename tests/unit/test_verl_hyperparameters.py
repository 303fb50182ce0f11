"""The one encoding of a method's hyperparameters into verl's keys, and its inverse in the loss."""

import pytest
from omegaconf import OmegaConf

from dppo_bench.config import ConfigError, find_method, load_method, load_methods
from dppo_bench.methods import get_mask
from dppo_bench.verl_plugin.hyperparameters import ALPHA, NO_CAP, LossValues, from_verl, to_verl
from dppo_bench.verl_plugin.overrides import ACTOR, method_overrides

CASES = [(m, p) for m, recipe in sorted(load_methods().items()) for p in sorted(recipe.hyperparameters)]


def actor_config(keys: dict) -> object:
    """verl's actor section as the loss receives it, from the keys the overrides set."""
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0, "policy_loss": {}}
    )
    for key, value in keys.items():
        OmegaConf.update(config, key, value, force_add=True)
    return config


@pytest.mark.parametrize(("method", "profile"), CASES)
def test_every_recipe_and_profile_round_trips_through_verls_keys(method, profile):
    recipe = find_method(method)
    rule = get_mask(recipe.mask)
    values = LossValues.of(rule, recipe.profile(profile))
    assert from_verl(rule, actor_config(to_verl(values))) == values
    overrides = method_overrides(recipe, profile)
    written = {o.split("=", 1)[0].removeprefix(f"{ACTOR}."): float(o.split("=", 1)[1]) for o in overrides
               if o.startswith(f"{ACTOR}.clip_ratio") or o.startswith(f"{ACTOR}.{ALPHA}")}  # fmt: skip
    assert written == to_verl(values)  # the overrides are the encoding, nothing else


def test_no_cap_is_the_papers_c_infinity_and_a_real_cap_stays_below_it(tmp_path):
    rule = get_mask("pg_is")
    assert to_verl(LossValues(0.0, 0.0, None))["clip_ratio_c"] == NO_CAP
    assert from_verl(rule, actor_config({"clip_ratio_c": NO_CAP})).is_cap is None
    assert from_verl(rule, actor_config({"clip_ratio_c": 5.0})).is_cap == 5.0
    recipe = tmp_path / "capped.yaml"
    recipe.write_text(
        "display_name: X\npaper: x\nmask: pg_is\nanchor: rollout\nhyperparameters:\n  sanity: {is_cap: 20000}\n"
    )
    with pytest.raises(ConfigError, match="is_cap"):  # a cap of 2e4 would be no cap on verl
        load_method(recipe)


def test_alpha_of_a_relax_rule_must_reach_the_loss():
    rule = get_mask("grpo_relax_both")
    with pytest.raises(ValueError, match="reads alpha from actor_rollout_ref.actor.policy_loss.dro_beta"):
        from_verl(rule, actor_config({}))
