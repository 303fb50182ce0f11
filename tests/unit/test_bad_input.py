"""Bad input of every kind the suite reads stops at start, naming the file and the field (issue 16)."""

import pytest
import yaml

from dppo_bench.config import (
    EVAL_DIR,
    SETTINGS_DIR,
    ConfigError,
    load_experiment,
    load_method,
    load_setting,
    setting_data,
)
from dppo_bench.config.specs import load_benchmark

METHOD = """display_name: X
paper: test
mask: dppo_binary_tv
anchor: rollout
hyperparameters:
  sanity: {delta: 0.15, is_cap: null}
"""


def refused(load, path, field, message):
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.field == field, str(err.value)
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "text, field, message",
    [
        pytest.param(METHOD.replace("delta: 0.15", "delta: 0.15, delta: 0.5"), "delta", "given twice", id="dup key"),
        pytest.param(
            METHOD + "hyperparameters:\n  sanity: {delta: 0.5, is_cap: null}\n",
            "hyperparameters",
            "given twice (again on line 7)",
            id="dup profile section",
        ),
        pytest.param(
            METHOD.replace("is_cap: null}", "is_cap: null}\n  sanity: {delta: 0.5, is_cap: null}"),
            "sanity",
            "given twice",
            id="dup profile",
        ),
        pytest.param(
            METHOD.replace("delta: 0.15", "delta: true"), "hyperparameters.sanity.delta", "valid number", id="bool"
        ),
        pytest.param(
            METHOD.replace("delta: 0.15", 'delta: "0.15"'), "hyperparameters.sanity.delta", "valid number", id="string"
        ),
        pytest.param(METHOD.replace("delta: 0.15", "delta: .inf"), "hyperparameters.sanity.delta", "finite", id="inf"),
        pytest.param(
            METHOD.replace("is_cap: null", "is_cap: .inf"), "hyperparameters.sanity.is_cap", "finite", id="inf cap"
        ),
        pytest.param(METHOD.replace("delta: 0.15", "delta: .nan"), "hyperparameters.sanity.delta", "finite", id="nan"),
    ],
)
def test_bad_method_values(tmp_path, text, field, message):
    path = tmp_path / "bad_method.yaml"
    path.write_text(text)
    refused(load_method, path, field, message)


def setting_file(tmp_path, **changes):
    data = setting_data(SETTINGS_DIR / "tiny_smoke.yaml")
    for dotted, value in changes.items():
        *parents, name = dotted.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[name] = value
    path = tmp_path / "bad_setting.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "changes, field, message",
    [
        pytest.param(
            {"eval.offline": ["tiny_arith", "aime99"]},
            "eval.offline.1",
            "unknown benchmark 'aime99'",
            id="unknown benchmark",
        ),
        pytest.param({"seeds": [-1]}, "seeds.0", "greater than or equal to 0", id="negative seed"),
        pytest.param({"seeds": [0, 0]}, "seeds", "listed twice", id="seed twice"),
        pytest.param({"train.lr": True}, "train.lr", "valid number", id="bool lr"),
        pytest.param({"train.steps": 6.0}, "train.steps", "valid integer", id="float steps"),
        pytest.param({"train.lr": "3e-4"}, "train.lr", "valid number", id="string lr"),
    ],
)
def test_bad_settings(tmp_path, changes, field, message):
    refused(load_setting, setting_file(tmp_path, **changes), field, message)


def test_a_setting_given_a_key_twice(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("extends: tiny_smoke\ntrain:\n  lr: 0.001\ntrain:\n  lr: 0.5\n")
    refused(load_setting, path, "train", "given twice")


EXPERIMENT = """title: t
paper_item: none
description: d
runs:
  - setting: tiny_smoke
    methods: [dppo_binary_tv, minirl]
columns:
  - {title: reward, metric: train/reward_mean, stat: final}
"""


@pytest.mark.parametrize(
    "text, field, message",
    [
        pytest.param(
            EXPERIMENT.replace("minirl]", "minirl, dppo_binary_tv]"),
            "runs.0.methods.2",
            "listed at runs.0.methods.0 too",
            id="method twice",
        ),
        pytest.param(
            EXPERIMENT.replace("columns:", "  - setting: tiny_smoke\n    methods: [minirl]\ncolumns:"),
            "runs.1.methods.0",
            "listed at runs.0.methods.1 too",
            id="method twice in two groups",
        ),
        pytest.param(EXPERIMENT + "seeds: [-1]\n", "seeds.0", "greater than or equal to 0", id="negative seed"),
        pytest.param(EXPERIMENT + "seeds: [1, 1]\n", "seeds", "listed twice", id="seed twice"),
        pytest.param(EXPERIMENT + "seeds: []\n", "seeds", "at least 1", id="no seeds"),
    ],
)
def test_bad_experiments(tmp_path, text, field, message):
    path = tmp_path / "bad_experiment.yaml"
    path.write_text(text)
    refused(load_experiment, path, field, message)


@pytest.mark.parametrize(
    "change, field, message",
    [
        pytest.param(("n: 4", "n: 0"), "n", "greater than or equal to 1", id="n 0"),
        pytest.param(("n: 4", "n: 4\ncolour: red"), "colour", "unknown key", id="unknown key"),
        pytest.param(("n: 4", "n: true"), "n", "valid integer", id="bool n"),
        pytest.param(("temperature: 0.6", "temperature: .inf"), "sampling.temperature", "finite", id="inf"),
        pytest.param(("n: 4", "n: 4\nn: 8"), "n", "given twice", id="n twice"),
    ],
)
def test_bad_eval_specs(tmp_path, change, field, message):
    path = tmp_path / "tiny_arith.yaml"
    path.write_text((EVAL_DIR / "tiny_arith.yaml").read_text().replace(*change))
    refused(lambda p: load_benchmark(p.stem, p.parent), path, field, message)
