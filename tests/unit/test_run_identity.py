"""A run's identity (recipe and setting sha256) moves with what the run computes, not with labels or scheduling."""

import pytest

from dppo_bench.aggregate.collect import read_run
from dppo_bench.config import find_method, find_setting
from dppo_bench.rundir import RunDir

VERL = find_setting("moe_base")
LOCAL = find_setting("tiny_smoke")
RECIPE = find_method("dppo_binary_tv")


def with_verl(setting, **update):
    return setting.model_copy(update={"verl": setting.verl.model_copy(update=update)})


def with_train(setting, **update):
    return setting.model_copy(update={"train": setting.train.model_copy(update=update)})


def with_profile(recipe, **update):
    profiles = {name: {**given, **update} for name, given in recipe.hyperparameters.items()}
    return type(recipe).model_validate({**recipe.model_dump(), "hyperparameters": profiles})


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(VERL.model_copy(update={"seeds": [*VERL.seeds, 7]}), id="a seed added"),
        pytest.param(VERL.model_copy(update={"display_name": "renamed"}), id="display_name"),
        pytest.param(VERL.model_copy(update={"paper": "another section"}), id="paper"),
        pytest.param(with_verl(VERL, runtime_min=VERL.verl.runtime_min * 2), id="runtime_min"),
    ],
)
def test_labels_seeds_and_time_limits_keep_the_setting_hash(changed):
    assert changed.sha256() == VERL.sha256()


@pytest.mark.parametrize(
    ("base", "changed"),
    [
        pytest.param(VERL, with_train(VERL, lr=VERL.train.lr * 2), id="lr"),
        pytest.param(VERL, with_train(VERL, max_response_length=8192), id="max_response_length"),
        pytest.param(VERL, with_verl(VERL, nodes=VERL.verl.nodes + 1), id="nodes (checkpoint sharding)"),
        pytest.param(VERL, with_verl(VERL, gpus_per_node=VERL.verl.gpus_per_node // 2), id="gpus_per_node"),
        pytest.param(VERL, VERL.model_copy(update={"eval": VERL.eval.model_copy(update={"every": 7})}), id="eval"),
        pytest.param(LOCAL, with_train(LOCAL, lr=LOCAL.train.lr * 2), id="local lr"),
    ],
)
def test_what_a_run_computes_changes_the_setting_hash(base, changed):
    assert changed.sha256() != base.sha256()


def test_a_local_setting_keeps_its_hash_when_a_seed_is_added():
    assert LOCAL.model_copy(update={"seeds": [*LOCAL.seeds, 9]}).sha256() == LOCAL.sha256()


def test_recipe_labels_keep_its_hash_and_thresholds_change_it():
    assert RECIPE.model_copy(update={"display_name": "DPPO (TV)", "paper": "elsewhere"}).sha256() == RECIPE.sha256()
    assert with_profile(RECIPE, delta=0.5).sha256() != RECIPE.sha256()
    grpo = find_method("grpo_clip_higher")
    assert with_profile(grpo, eps_high=0.3).sha256() != grpo.sha256()
    assert with_profile(RECIPE, is_cap=5.0).sha256() != RECIPE.sha256()


def record(root, setting, recipe=RECIPE, status="completed"):
    run = RunDir(root / setting.id / recipe.id / "seed0").create()
    run.write_run({"status": status, "recipe_sha256": recipe.sha256(), "setting_sha256": setting.sha256()})
    return run


def test_a_finished_run_is_not_stale_after_a_seed_is_added(tmp_path):
    record(tmp_path, LOCAL)
    more_seeds = LOCAL.model_copy(update={"seeds": [*LOCAL.seeds, 9], "display_name": "renamed"})
    assert read_run(tmp_path, more_seeds, RECIPE, 0, "x", False).status == "completed"
    assert read_run(tmp_path, with_train(LOCAL, lr=1.0), RECIPE, 0, "x", False).status == "stale"


def test_a_killed_run_resumes_with_a_longer_time_limit_but_not_another_lr(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.start(VERL, RECIPE, 0, {})
    run.start(with_verl(VERL, runtime_min=VERL.verl.runtime_min + 60), RECIPE, 0, {})
    with pytest.raises(ValueError, match="holds a different run"):
        run.start(with_train(VERL, lr=VERL.train.lr * 2), RECIPE, 0, {})
