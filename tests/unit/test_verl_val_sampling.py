"""Online validation: the benchmarks' shared sampling reaches val_kwargs; the length is the response length."""

import dataclasses
from pathlib import Path

import pytest
from verl.workers.config import SamplingConfig

from dppo_bench.config import find_method, find_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.config.specs import load_benchmark
from dppo_bench.verl_launch.compose import compose_ppo_config, validate
from dppo_bench.verl_launch.run_config import RunPaths, run_overrides, val_sampling

PATHS = RunPaths(
    run_dir=Path("/runs/r"),
    train_file=Path("/data/train.parquet"),
    val_files=(Path("/data/aime24.parquet"), Path("/data/aime25.parquet")),
    metrics_log=Path("/runs/r/verl_logs/attempt-001.jsonl"),
)


def test_val_sampling_is_what_val_kwargs_can_hold():
    sampling = val_sampling([load_benchmark("aime24"), load_benchmark("aime25")])
    assert sampling == {"n": 32, "temperature": 0.7, "top_p": 0.95}
    assert set(sampling) <= {f.name for f in dataclasses.fields(SamplingConfig)}  # verl has no validation length


def test_benchmarks_that_sample_differently_are_refused():
    with pytest.raises(ValueError, match="sample differently"):
        val_sampling([load_benchmark("aime24"), load_benchmark("aime24_sanity")])


def test_validation_generates_at_most_the_settings_response_length():
    setting = find_setting("moe_base_8k")  # 7,168 response tokens; the AIME benchmarks allow 16,384 offline
    assert setting.train.max_response_length < load_benchmark("aime24").sampling.max_tokens
    cfg = compose_ppo_config(run_overrides(resolve_run(setting, find_method("dppo_binary_tv"), 0), PATHS))
    rollout = validate(cfg)["rollout"]
    assert rollout.response_length == setting.train.max_response_length
    assert (rollout.val_kwargs.n, rollout.val_kwargs.temperature, rollout.val_kwargs.top_p) == (32, 0.7, 0.95)
