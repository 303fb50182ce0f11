"""Every experiment and setting loads; experiments/README.md is the one the yaml files generate."""

import pytest

from dppo_bench.commands.experiments import render_index
from dppo_bench.config import EXPERIMENTS_DIR, ConfigError, find_method, find_setting, load_experiment, setting_paths


def test_experiments_readme_is_current():
    assert (EXPERIMENTS_DIR / "README.md").read_text() == render_index(), "run: dppo-bench experiments readme"


@pytest.mark.parametrize("path", sorted(EXPERIMENTS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_run_of_every_experiment_has_its_hyperparameters(path):
    experiment = load_experiment(path)
    for setting, method, _ in experiment.run_keys(lambda s: find_setting(s).seeds):
        find_method(method).profile(find_setting(setting).hyperparameter_profile)
    titles = [p.title for p in experiment.panels]
    assert len(titles) == len(set(titles))


def test_the_paper_items_are_all_here():
    items = {load_experiment(p).paper_item for p in EXPERIMENTS_DIR.glob("*.yaml")}
    for item in [
        "Fig. 1 (right)",
        "Fig. 3",
        "Fig. 4",
        "Fig. 5",
        "Fig. 8",
        "Fig. 9",
        "Fig. 11",
        "Fig. 13",
        "Fig. 14",
        "Fig. 15",
        "Fig. 16",
        "Fig. 17",
        "Fig. 19",
        "Fig. 2",
        "Fig. 6",
        "Fig. 7",
        "Fig. 18",
        "App. D",
    ]:
        assert item in items


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            "runs: [{setting: tiny_sanity, methods: [pg_is]}]\nprobes: [tiny_sanity]\npanels: [{title: a, probe: tv}]",
            "runs",
        ),
        ("probes: [tiny_sanity]\npanels: [{title: a, probe: tv, metrics: [x]}]", "metrics"),
        ("probes: [tiny_sanity]\npanels: [{title: a, metrics: [train/reward_mean]}]", "panels.0"),
        ("probes: [no_such_setting]\npanels: [{title: a, probe: ratio}]", "probes.0"),
        ("runs: [{setting: tiny_sanity, methods: [pg_is]}]\npanels: [{title: a, probe: ratio}]", "panels.0"),
    ],
)
def test_probe_experiments_are_validated(tmp_path, body, field):
    path = tmp_path / "bad.yaml"
    path.write_text(f"title: t\npaper_item: x\ndescription: d\n{body}\n")
    with pytest.raises(ConfigError) as err:
        load_experiment(path)
    assert err.value.field == field, err.value


def test_settings_hold_table_1(tmp_path):
    s = {p.stem: find_setting(p.stem) for p in setting_paths()}
    for sid in ("moe_base", "moe_base_r3", "moe_thinking"):
        t = s[sid].train
        assert (t.prompts_per_step, t.prompts_per_step // t.mini_batches, t.responses_per_prompt) == (256, 32, 16)
        assert (t.max_prompt_length, t.max_response_length, t.lr, s[sid].eval.every) == (1024, 16384, 1e-6, 5)
    d, lora = s["dense_base"].train, s["moe_base_lora"].train
    assert (
        d.prompts_per_step,
        d.prompts_per_step // d.mini_batches,
        d.responses_per_prompt,
        d.max_response_length,
    ) == (128, 32, 8, 8000)
    assert (lora.prompts_per_step, lora.prompts_per_step // lora.mini_batches, lora.lr) == (128, 16, 1e-5)
    assert (s["moe_base_lora"].verl.lora.rank, s["moe_base_lora"].verl.lora.alpha) == (32, 64)
    assert s["moe_base_lora"].hyperparameter_profile == "lora" and s["moe_base_r3"].verl.router_replay == "R3"
    sanity = s["sanity_r1d_1p5b"].train
    assert (sanity.prompts_per_step, sanity.responses_per_prompt, sanity.mini_batches) == (64, 8, 4)
    assert s["moe_thinking"].verl.model.path == "Qwen/Qwen3-30B-A3B"


def test_a_setting_extending_an_unknown_one_is_an_error(tmp_path):
    (tmp_path / "child.yaml").write_text("extends: nobody\n")
    with pytest.raises(ConfigError, match="extends"):
        find_setting(str(tmp_path / "child.yaml"))
