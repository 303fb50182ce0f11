"""A run's identity (recipe and setting sha256) moves with what the run computes, not with labels or scheduling."""

import pytest

from dppo_bench.aggregate.collect import read_run
from dppo_bench.config import ConfigError, canonical_sha256, find_method, find_setting
from dppo_bench.config.runs import resolve_run, setting_benchmarks
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
    assert read_run(tmp_path, more_seeds, RECIPE, 0, "x", False, setting_benchmarks([more_seeds])).status == "completed"
    assert read_run(tmp_path, with_train(LOCAL, lr=1.0), RECIPE, 0, "x", False, {}).status == "stale"


def test_a_killed_run_resumes_with_a_longer_time_limit_but_not_another_lr(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.start(VERL, RECIPE, 0, {})
    run.start(with_verl(VERL, runtime_min=VERL.verl.runtime_min + 60), RECIPE, 0, {})
    with pytest.raises(ValueError, match="holds a different run"):
        run.start(with_train(VERL, lr=VERL.train.lr * 2), RECIPE, 0, {})


# Each recipe's identity as the suite computed it before rules declared their own hyperparameters (commit 59c4d93):
# finished runs of these recipes stay finished, and a killed one still resumes.
IDENTITIES_BEFORE_DECLARED_HYPERPARAMETERS = {
    "dppo_binary_kl": "a166abcee0ed500844a73216e23821f50a4e60a56c26343bdaf94acab4b7bcf9",
    "dppo_binary_kl_delta0p10": "322e554ab08f95e076c689db771b594827cf9929d32292ac3468dfdbed352d8a",
    "dppo_binary_kl_delta0p15": "2b3506f354dca9956affae180512250ae2bb2b40b008807228f4cdfd68152a92",
    "dppo_binary_kl_recompute": "dfb5ff2827ddea66dd511770b6336f0866d6f9eafbe2311a7554dc334472883e",
    "dppo_binary_tv": "364cecd08a10ccb1a67f87a95d563abb81a81c74b0856f4d2d1d490d0423aa62",
    "dppo_binary_tv_delta0p10": "cac3f38add952eb37535721deafc298213b0f2aa9bf886bb2792c548f8de64ac",
    "dppo_binary_tv_delta0p15": "2ba176a26d11e8a56794b2c77e5cd99c9a3f5d8d2e1a64b5c0e84a10ca219285",
    "dppo_binary_tv_recompute": "1a72425d23a6f7ca243796b6238f0bb0e2eb74c510d7829932fd178dfcacd33f",
    "dppo_topk_kl": "3137aa4569906fb648aa55cc287a39b5a1d18a3a6ab92335e640ed122ce58356",
    "dppo_topk_tv": "b86d7ca7d6a58f22d531c23c64bef7ead9b6850a2009511e5c47d737434ff2bd",
    "grpo_clip_higher": "bbd08b232c3e5abb5153892f5080a209eb049c35d1920bf2165c6e1a59c29a20",
    "grpo_eps_high0p20": "f8ec216c6d77c01635eaace7f65da424b5b3577b710e9c81dabb8247376efc36",
    "grpo_eps_high0p28": "3623c8cbb2fffc11436b8ed65dfcf5b8c55c7b7f6ecfea23594f755aba3a08cb",
    "grpo_relax_both_alpha0p0": "3c9f8bb8792ea4f9a9c91eed0a9bb77f46802e2d9efa695d4ee2916dde6dba13",
    "grpo_relax_both_alpha0p1": "e41950831df66ac4208cf9403df7d74219d2a74d48a80235b2f0c89d6ffba780",
    "grpo_relax_both_alpha0p3": "1e6a4376205affbdf8a300d47805b1cbe8ce3cea85afea2bfb6ad40c90f9b05e",
    "grpo_relax_both_alpha0p5": "685571f2af120cc3fa67fd49b4a5d78add3c852a96a28672bfcff150186553b4",
    "grpo_relax_both_alpha0p7": "f745084b68452d9be7cb0c0aa356290ec8187684864d52d6b0bd38a365d5fe18",
    "grpo_relax_high_alpha0p1": "10d0ee7699081f0235800aeb32fcd585afe03a125a18385357698085fbb4254e",
    "grpo_relax_low_alpha0p1": "2028f847cf854b12799f792338bc796db3790f021a8c4a279ed3a5a6d0dcde51",
    "mask_bad_updates": "7361762eb1900ced2f0a187e2bc84372fa248a8fb033242e5b20fb3bbc00971b",
    "mask_bad_updates_0p8": "41e652742e4b2b5a1b4751523a3932529a0a0c1791f98bcf366f73b1b3f3ab3e",
    "mask_bad_updates_recompute": "930d49e0b7e80c37a10212b814738b7d2e12e37a25b918b981985d9bb4b962b4",
    "minirl": "f673cb9b57d7f7fd4cbda2f4bb02c106e49e5b2440d2df7593e084f079dc4283",
    "minirl_tis": "628aae8ded119f9f60bb7ea33d6dc06f0b8dd71365208cbe429e94bb59547a21",
    "pg_is": "9f3b716876af9201ff9524c6d8bc74ec88356b97c2503e1868c9e9de344727ac",
    "pg_tis": "a589312356b63ea3f6951e5dab3e3d4f7d40d2f1c5ce0c07b479d47cbc2a44cf",
}


@pytest.mark.parametrize("method", sorted(IDENTITIES_BEFORE_DECLARED_HYPERPARAMETERS))
def test_a_recipe_keeps_the_identity_its_runs_recorded(method):
    assert find_method(method).sha256() == IDENTITIES_BEFORE_DECLARED_HYPERPARAMETERS[method]


def recorded_under_an_older_rule(root, setting, recipe=RECIPE):
    """A finished run whose record holds the setting it trained with and a setting hash taken under another rule of
    what the identity leaves out (as every record made before evaluation left the identity does)."""
    run = RunDir(root / setting.id / recipe.id / "seed0").create()
    old_rule_hash = canonical_sha256(setting.model_dump(mode="json"))  # nothing left out
    assert old_rule_hash != setting.sha256()
    run.write_run(
        {
            "status": "completed",
            "setting": setting.id,
            "method": recipe.id,
            "seed": 0,
            "backend": setting.backend,
            "setting_sha256": old_rule_hash,
            "recipe_sha256": recipe.sha256(),
            "setting_config": setting.model_dump(mode="json"),
        }
    )
    return run


@pytest.mark.parametrize("setting", [LOCAL, VERL], ids=["local", "verl"])
def test_a_record_made_under_an_older_identity_rule_is_judged_by_the_setting_it_holds(tmp_path, setting):
    run = recorded_under_an_older_rule(tmp_path, setting)
    assert run.is_current(run.read_run(), setting, RECIPE)
    assert read_run(tmp_path, setting, RECIPE, 0, "x", False, setting_benchmarks([setting])).status == "completed"
    assert not run.is_current(run.read_run(), with_train(setting, lr=setting.train.lr * 2), RECIPE)


def test_a_record_made_under_an_older_identity_rule_resumes_and_takes_todays_hash(tmp_path):
    run = recorded_under_an_older_rule(tmp_path, VERL)
    with pytest.raises(ValueError, match="holds a different run"):
        run.start(with_train(VERL, lr=VERL.train.lr * 2), RECIPE, 0, {})
    run.start(VERL, RECIPE, 0, {})
    assert run.read_run()["setting_sha256"] == VERL.sha256()


def test_a_local_records_evaluation_is_not_part_of_what_it_computed(tmp_path):
    run = recorded_under_an_older_rule(tmp_path, LOCAL)
    info = run.read_run()
    info["setting_config"]["eval"] = {"benchmarks": ["tiny_arith"], "every": 150}  # the field as it was before
    run.write_run(info)
    assert run.is_current(run.read_run(), LOCAL, RECIPE)


def test_a_record_without_its_setting_is_judged_by_the_hash_it_stored(tmp_path):
    run = recorded_under_an_older_rule(tmp_path, LOCAL)
    info = run.read_run()
    del info["setting_config"]
    run.write_run(info)
    assert not run.is_current(run.read_run(), LOCAL, RECIPE)


def test_a_setting_built_in_code_is_checked_as_one_from_a_file():
    """resolve_run checks what the setting evaluates whether it was given by id or as an object."""
    aime = LOCAL.model_copy(update={"eval": LOCAL.eval.model_copy(update={"offline": ["aime24"]})})
    with pytest.raises(ConfigError, match=r"tiny_smoke.yaml: field 'eval.offline.0': benchmark 'aime24' cannot be run"):
        resolve_run(aime, RECIPE, 0)
