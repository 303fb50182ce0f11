"""The one channel that carries our rules' hyperparameters to verl's workers, and verl's own keys for verl's modes:
every recipe and profile, written as overrides, parsed as Hydra parses them, and read back as the loss reads them."""

import json

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from dppo_bench.config import load_methods
from dppo_bench.methods import get_mask
from dppo_bench.methods.verl_losses import actor_config
from dppo_bench.verl_launch.compose import compose_ppo_config, to_dataclasses
from dppo_bench.verl_launch.overrides import hydra_value, method_overrides
from dppo_bench.verl_plugin.contract import LOSS_ENV, ChannelError, decode, encode
from dppo_bench.verl_plugin.hyperparameters import current_values

RECIPES = load_methods()
CASES = [(m, p) for m, recipe in sorted(RECIPES.items()) for p in sorted(recipe.hyperparameters)]
ENV_KEY = f"ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}"
# verl's keys of the loss: none of them may carry a value of one of our rules
VERL_LOSS_KEYS = tuple(f"actor_rollout_ref.actor.{k}" for k in ("clip_ratio", "policy_loss.", "tau_"))


def parsed(overrides: list[str]) -> dict:
    """key -> value, as Hydra parses the override strings (quotes, null, numbers)."""
    return {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(overrides)}


@pytest.mark.parametrize(("method", "profile"), CASES)
def test_every_recipe_and_profile_round_trips(method, profile):
    recipe = RECIPES[method]
    values = recipe.profile(profile)
    written = parsed(method_overrides(recipe, profile))
    assert written["actor_rollout_ref.actor.policy_loss.loss_mode"] == recipe.loss_mode
    if recipe.rule is not None:  # our channel, and nothing in verl's loss keys
        assert decode(recipe.rule, written[ENV_KEY]) == values
        assert not [k for k in written if k.startswith(VERL_LOSS_KEYS) and not k.endswith("loss_mode")]
    else:  # verl's own keys, exactly the declared ones, and the local backend builds verl's config from them
        declared = recipe.verl.keys(recipe.anchor, values)
        assert {k: written[k] for k in declared} == declared
        assert ENV_KEY not in written
        local = actor_config(recipe.verl, recipe.anchor, values, "token-mean", {})
        for key, value in declared.items():
            if key.startswith("actor_rollout_ref.actor."):
                assert _field(local, key.removeprefix("actor_rollout_ref.actor.")) == value, key


def _field(config, dotted: str):
    for part in dotted.split("."):
        config = config[part] if isinstance(config, dict) else getattr(config, part)
    return config


MINIMAL = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]


@pytest.mark.parametrize(
    "method", ["dppo_binary_tv", "minirl_tis", "icepop", "verl_bypass_icepop", "verl_decoupled_geo_rs", "verl_sapo"]
)
def test_verls_own_composition_carries_the_same_values(method):
    """One recipe of each kind through verl's Hydra config and dataclasses, as its driver and workers build them."""
    recipe = RECIPES[method]
    cfg = compose_ppo_config(method_overrides(recipe, "sanity") + MINIMAL)
    typed = to_dataclasses(cfg)
    actor, rc = typed["actor"], typed["rollout_correction"]
    values = recipe.profile("sanity")
    assert actor.policy_loss.loss_mode == recipe.loss_mode
    assert rc.bypass_mode is (recipe.anchor == "rollout")
    if recipe.rule is not None:
        assert decode(recipe.rule, cfg.ray_kwargs.ray_init.runtime_env.env_vars[LOSS_ENV]) == values
        return
    local = actor_config(recipe.verl, recipe.anchor, values, "token-mean", {})
    for key, value in recipe.verl.keys(recipe.anchor, values).items():
        section = key.removeprefix("actor_rollout_ref.actor.") if key.startswith("actor_rollout_ref.") else None
        if section is None:  # the driver's correction
            assert getattr(rc, key.removeprefix("algorithm.rollout_correction.")) == value, key
        else:
            assert _field(actor, section) == value == _field(local, section), key


def test_a_value_survives_hydras_quoting():
    rule = get_mask("icepop")
    values = rule.values(ratio_min=0.25, is_cap=None)
    assert decode(rule, parsed([f"x={hydra_value(encode(rule, values))}"])["x"]) == values
    for text in ["it's", "a\\b", "a\\'b", "end\\", "0.5_5.0", "with space", "/tmp/my rules/x.py"]:
        assert parsed([f"x={hydra_value(text)}"])["x"] == text
    assert parsed([f"x={hydra_value(None)}", f"y={hydra_value(False)}", f"z={hydra_value(1e-4)}"]) == {
        "x": None, "y": False, "z": 1e-4}  # fmt: skip


def test_the_loss_refuses_a_missing_foreign_or_bad_channel(monkeypatch):
    rule = get_mask("icepop")
    monkeypatch.delenv(LOSS_ENV, raising=False)
    with pytest.raises(ChannelError, match=f"{LOSS_ENV}, which is unset"):
        current_values(rule)
    other = get_mask("dppo_binary_tv")
    monkeypatch.setenv(LOSS_ENV, encode(other, other.values(delta=0.1, is_cap=None)))
    with pytest.raises(ChannelError, match="rule 'dppo_binary_tv', not 'icepop'"):
        current_values(rule)
    bad = {"rule": "icepop", "hyperparameters": {"ratio_min": -1.0, "is_cap": None}, "module": None}
    monkeypatch.setenv(LOSS_ENV, json.dumps(bad))
    with pytest.raises(ChannelError, match="ratio_min: Input should be greater than 0"):
        current_values(rule)
    monkeypatch.setenv(LOSS_ENV, "{not json")
    with pytest.raises(ChannelError, match="not valid JSON"):
        current_values(rule)
    monkeypatch.setenv(LOSS_ENV, encode(rule, rule.values(ratio_max=4.0, is_cap=2.0)))
    assert current_values(rule).values() == {"ratio_min": 0.5, "ratio_max": 4.0, "is_cap": 2.0}
