"""Method recipes: paper values, validation errors, and their translation to verl overrides."""

import pytest

from dppo_bench.config import ConfigError, load_method, load_methods
from dppo_bench.verl_launch.compose import compose_ppo_config, to_dataclasses
from dppo_bench.verl_launch.overrides import method_overrides
from dppo_bench.verl_plugin.contract import LOSS_ENV, decode

RECIPES = load_methods()

# The paper's values: App. C.1 (sanity test), App. E and Table 1 (scaling runs).
PAPER_VALUES = {
    ("dppo_binary_tv", "sanity"): {"delta": 0.15, "is_cap": None},
    ("dppo_binary_kl", "sanity"): {"delta": 0.05, "is_cap": None},
    ("pg_is", "sanity"): {"is_cap": None},
    ("pg_tis", "sanity"): {"is_cap": 3},
    ("grpo_clip_higher", "sanity"): {"eps_low": 0.2, "eps_high": 0.28, "is_cap": None},
    ("minirl", "sanity"): {"eps_low": 0.2, "eps_high": 0.28, "is_cap": None},
    ("minirl_tis", "sanity"): {"eps_low": 0.2, "eps_high": 0.28, "is_cap": 3},
    ("dppo_binary_tv_recompute", "sanity"): {"delta": 0.15, "is_cap": None},
    ("dppo_binary_kl_recompute", "sanity"): {"delta": 0.05, "is_cap": None},
    ("mask_bad_updates", "sanity"): {"delta": 0.5, "is_cap": None},
    ("dppo_binary_tv", "scaling"): {"delta": 0.2, "is_cap": 5},
    ("dppo_binary_tv", "lora"): {"delta": 0.15, "is_cap": 5},
    ("dppo_binary_kl", "scaling"): {"delta": 0.05, "is_cap": 5},
    ("dppo_topk_tv", "scaling"): {"delta": 0.2, "is_cap": 5},
    ("dppo_topk_kl", "scaling"): {"delta": 0.05, "is_cap": 5},
    ("pg_tis", "scaling"): {"is_cap": 5},
    ("grpo_clip_higher", "scaling"): {"eps_low": 0.2, "eps_high": 0.27, "is_cap": 5},
}


@pytest.mark.parametrize("key", sorted(PAPER_VALUES))
def test_recipes_hold_the_paper_values(key):
    name, profile = key
    assert RECIPES[name].profile(profile).values() == PAPER_VALUES[key]


def test_anchors_and_display_names():
    recompute = {n for n, r in RECIPES.items() if r.anchor == "recompute" and r.rule is not None}  # ours, not verl's
    assert recompute == {
        "minirl",
        "minirl_tis",
        "dppo_binary_tv_recompute",
        "dppo_binary_kl_recompute",
        "mask_bad_updates_recompute",
    }
    assert RECIPES["dppo_binary_tv"].display_name == "DPPO-Binary-TV"


GOOD = """display_name: X
paper: test
mask: dppo_binary_tv
anchor: rollout
hyperparameters:
  sanity: {delta: 0.15, is_cap: null}
"""
EPS = GOOD.replace("dppo_binary_tv", "grpo_clip_higher").replace("delta: 0.15", "eps_low: 0.2, eps_high: 0.28")


@pytest.mark.parametrize(
    "text, field, message",
    [
        (GOOD.replace("paper: test\n", "paper: test\ncolour: red\n"), "colour", "unknown key"),
        (GOOD.replace("delta: 0.15", "delta: -0.1"), "hyperparameters.sanity.delta", "greater than or equal"),
        (GOOD.replace("delta: 0.15, ", ""), "hyperparameters.sanity.delta", "missing"),
        (GOOD.replace(", is_cap: null", ""), "hyperparameters.sanity.is_cap", "Field required"),
        (
            GOOD.replace("delta: 0.15", "delta: 0.15, eps_low: 0.2"),
            "hyperparameters.sanity.eps_low",
            "not used",
        ),
        (GOOD.replace("display_name: X\n", ""), "display_name", "Field required"),
        (GOOD.replace("mask: dppo_binary_tv", "mask: dppo_magic"), "mask", "unknown mask rule"),
        (GOOD.replace("anchor: rollout", "anchor: recompute"), "anchor", "defined for anchor"),
        (GOOD.replace("anchor: rollout", "anchor: somewhere"), "anchor", "rollout"),
        (
            GOOD.replace("is_cap: null", "is_cap: 0.5"),
            "hyperparameters.sanity.is_cap",
            "greater than or equal to 1",
        ),
        (GOOD.replace("delta: 0.15", "delta: lots"), "hyperparameters.sanity.delta", "valid number"),
        (GOOD + "id: other\n", "id", "file name"),
        (GOOD.replace("delta: 0.15", "delta: null"), "hyperparameters.sanity.delta", "needs a number"),
        (EPS.replace("eps_low: 0.2", "eps_low: null"), "hyperparameters.sanity.eps_low", "needs a number"),
        (EPS.replace("eps_high: 0.28", "eps_high: null"), "hyperparameters.sanity.eps_high", "needs a number"),
    ],
)
def test_bad_recipes_name_the_file_and_the_field(tmp_path, text, field, message):
    path = tmp_path / "bad_method.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_method(path)
    assert err.value.field == field
    assert str(path) in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("text", [GOOD, EPS])
def test_a_null_cap_means_no_cap(tmp_path, text):
    path = tmp_path / "good_method.yaml"
    path.write_text(text)
    assert load_method(path).profile("sanity").is_cap is None
    assert channel(load_method(path), "sanity").is_cap is None  # what the loss reads in verl's workers


def channel(recipe, profile):
    """The values our channel carries to verl's workers for ``recipe`` at ``profile``, decoded as the loss does."""
    prefix = f"+ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}="
    (text,) = [o.removeprefix(prefix) for o in method_overrides(recipe, profile) if o.startswith(prefix)]
    return decode(recipe.rule, text.strip("'"))


def test_unreadable_recipes(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_method(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_method(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("a: [1\n")
    with pytest.raises(ConfigError, match="not valid yaml"):
        load_method(tmp_path / "broken.yaml")


def test_missing_profile_is_named():
    with pytest.raises(KeyError, match="no hyperparameter profile 'scaling'"):
        RECIPES["minirl"].profile("scaling")


def test_overrides_bypass_for_rollout_anchor():
    ov = method_overrides(RECIPES["dppo_binary_tv"], "scaling")
    assert ov == [
        "actor_rollout_ref.actor.policy_loss.loss_mode=dppo_binary_tv",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}="
        """'{"hyperparameters":{"delta":0.2,"is_cap":5.0},"module":null,"rule":"dppo_binary_tv"}'""",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "algorithm.rollout_correction.bypass_mode=True",
        "algorithm.rollout_correction.rollout_is=null",
        "algorithm.rollout_correction.rollout_rs=null",
    ]


def test_overrides_decoupled_for_recompute_anchor():
    ov = method_overrides(RECIPES["minirl_tis"], "sanity")
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=minirl_tis" in ov
    assert channel(RECIPES["minirl_tis"], "sanity").values() == {"eps_low": 0.2, "eps_high": 0.28, "is_cap": 3.0}
    assert "algorithm.rollout_correction.bypass_mode=False" in ov
    assert "algorithm.rollout_correction.rollout_is=token" in ov
    assert "algorithm.rollout_correction.rollout_is_threshold=1000000000000.0" in ov


MINIMAL = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]


def composition_cases():
    """Every recipe and profile; the first profile of each recipe of ours by default, the rest marked slow (one of
    each kind of verl's modes composes by default in test_verl_hyperparameters)."""
    for name, recipe in sorted(RECIPES.items()):
        for i, profile in enumerate(sorted(recipe.hyperparameters)):
            fast = i == 0 and recipe.rule is not None
            yield pytest.param(name, profile, marks=() if fast else pytest.mark.slow, id=f"{name}-{profile}")


@pytest.mark.parametrize(("name", "profile"), composition_cases())
def test_every_recipe_composes_into_verls_config(name, profile):
    recipe = RECIPES[name]
    hp = recipe.profile(profile)
    cfg = compose_ppo_config(method_overrides(recipe, profile) + MINIMAL)
    typed = to_dataclasses(cfg)
    actor, rc = typed["actor"], typed["rollout_correction"]
    assert actor.policy_loss.loss_mode == recipe.loss_mode
    if recipe.rule is not None:
        assert decode(recipe.rule, cfg.ray_kwargs.ray_init.runtime_env.env_vars[LOSS_ENV]).is_cap == hp.is_cap
        assert rc.rollout_is == (None if recipe.anchor == "rollout" else "token")
    assert rc.bypass_mode is (recipe.anchor == "rollout")
    assert typed["rollout"].calculate_log_probs is True
