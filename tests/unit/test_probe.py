"""Fig. 2's mismatch probe on the local backend, and its record."""

import numpy as np
import pytest
import yaml
from local_fixtures import build_run_inputs, write_setting

from dppo_bench.cli import main
from dppo_bench.config import load_setting
from dppo_bench.probe.local import probe_mismatch
from dppo_bench.probe.tokens import read_tokens, write_tokens


def setting_with(tmp_path, name, **rollout):
    path = write_setting(tmp_path, name=name)
    data = yaml.safe_load(path.read_text())
    data["local"]["rollout"] = rollout
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    return build_run_inputs(tmp, write_setting(tmp))


def test_identical_numerics_give_ratio_one_and_no_tv(tmp_path, model):
    setting = load_setting(setting_with(tmp_path, "same", weights="fp32"))
    record = probe_mismatch(setting, *model, seed=0)
    assert len(record["mu"]) > setting.train.prompts_per_step * setting.train.responses_per_prompt
    np.testing.assert_allclose(record["pi"] / record["mu"], 1.0, rtol=1e-4)
    assert record["tv"].max() < 1e-5


def test_a_mismatched_engine_gives_a_tv_that_bounds_the_sampled_token_gap(tmp_path, model):
    setting = load_setting(setting_with(tmp_path, "noisy", weights="bf16", head=True, logit_noise=0.3))
    record = probe_mismatch(setting, *model, seed=0)
    gap = np.abs(record["pi"] - record["mu"])
    assert gap.max() > 1e-3  # the engine's noise shows
    assert (record["tv"] >= gap - 1e-6).all() and (record["tv"] <= 1 + 1e-6).all()  # |mu - pi| <= TV <= 1
    again = probe_mismatch(setting, *model, seed=0)
    np.testing.assert_array_equal(again["mu"], record["mu"])  # one seed, one batch


def test_command_writes_a_record_that_reads_back(tmp_path, model):
    setting_path = setting_with(tmp_path, "cmd", weights="bf16", head=True)
    base, train = model
    out = tmp_path / "probe" / "mismatch.npz"
    argv = ["probe", "mismatch", "--setting", str(setting_path), "--out", str(out)]
    assert main([*argv, "--base-model", str(base), "--train-data", str(train)]) == 0
    tokens = read_tokens(out)
    assert tokens.meta["setting"] == "cmd" and tokens.meta["backend"] == "local"
    assert len(tokens.mu) == len(tokens.pi) == len(tokens.tv) > 0
    assert main(argv) == 2  # no base model given: a clear error, not a crash


def test_records_are_checked(tmp_path):
    with pytest.raises(ValueError, match="differ in length"):
        write_tokens(tmp_path / "x.npz", [0.5], [0.5, 0.4], [0.0], {})
    with pytest.raises(FileNotFoundError, match="no mismatch probe"):
        read_tokens(tmp_path / "absent.npz")


def test_the_mismatch_orders_as_the_formats_precision(tmp_path, model):
    """Mean |pi - mu| at equal parameters grows as the engine's format narrows: bf16 < int8 < fp8 < fp8 with fp8
    activations < fp8 with the head < int4 < int4 with the head (fp32 has none)."""
    formats = [
        {"weights": "fp32"},
        {"weights": "bf16", "head": True},
        {"weights": "int8_channel"},
        {"weights": "fp8_e4m3_tensor"},
        {"weights": "fp8_e4m3_tensor", "activations": "fp8_e4m3"},
        {"weights": "fp8_e4m3_tensor", "head": True},
        {"weights": "int4_channel"},
        {"weights": "int4_channel", "head": True},
    ]
    gaps = []
    for i, rollout in enumerate(formats):
        record = probe_mismatch(load_setting(setting_with(tmp_path, f"f{i}", **rollout)), *model, seed=0)
        gaps.append(float(np.abs(record["pi"] - record["mu"]).mean()))
    assert gaps[0] < 1e-7
    assert gaps == sorted(gaps), gaps
    assert gaps[-1] > 20 * gaps[1]  # int4 with the head is an order of magnitude beyond bf16
