"""`dppo-bench train --wandb` on the local backend: every metrics row's scalars reach an offline wandb run in the run
directory, and metrics.jsonl (the record) is the one a run without wandb writes."""

import json
import math
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from local_fixtures import build_run_inputs, write_setting
from wandb.proto import wandb_internal_pb2

from dppo_bench import cli
from dppo_bench.commands.train import wandb_run
from dppo_bench.config import find_method, find_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.rundir import RunDir
from dppo_bench.verl_launch.run_config import RunPaths, run_overrides

BLOCK = 32768  # the .wandb file: a 7-byte file header, then LevelDB-style log blocks of chunks of records


def wandb_records(path):
    """The protobuf records of an offline run's .wandb file."""
    data, pos, chunk = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if length == 0 and kind == 0:  # block padding
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            yield record
            chunk = b""


def logged_history(run_dir):
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = []
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wandb")
    setting = write_setting(tmp, steps=3, save_every=2)
    return (setting, *build_run_inputs(tmp, setting))


def train(inputs, out, *flags):
    setting, base, data = inputs
    argv = ["train", "--setting", str(setting), "--method", "dppo_binary_tv", "--seed", "0", "--out", str(out)]
    return cli.main([*argv, "--base-model", str(base), "--train-data", str(data), "--no-progress", *flags])


def without_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def undefined_as_none(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def test_every_metrics_row_goes_to_an_offline_wandb_run(inputs, tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    monkeypatch.delenv("DPPO_BENCH_WANDB", raising=False)
    assert train(inputs, tmp_path / "with", "--wandb") == 0
    assert train(inputs, tmp_path / "without") == 0
    with_wandb, without = RunDir(tmp_path / "with").read_metrics(), RunDir(tmp_path / "without").read_metrics()
    assert without_perf(with_wandb) == without_perf(without)  # wandb leaves the record and the run unchanged
    assert not (tmp_path / "without" / "wandb").exists()
    history = logged_history(tmp_path / "with")
    assert [h["_step"] for h in history] == [r["step"] for r in with_wandb] == [1, 2, 3]
    for logged, row in zip(history, with_wandb, strict=True):
        scalars = {k: v for k, v in row.items() if k != "step" and not isinstance(v, dict)}
        assert {k: undefined_as_none(logged[k]) for k in scalars} == scalars  # NaN: null in the record, NaN in wandb
        assert "tr/masked_token_counts" in row and "tr/masked_token_counts" not in logged  # counts: the record only


def test_the_environment_switch_is_an_alias(monkeypatch):
    monkeypatch.setenv("DPPO_BENCH_WANDB", "1")
    argv = ["train", "--setting", "s", "--method", "m", "--seed", "0", "--out", "o"]
    assert cli.build_parser().parse_args(argv).wandb is True
    monkeypatch.setenv("DPPO_BENCH_WANDB", "")
    assert cli.build_parser().parse_args(argv).wandb is False


def test_a_local_run_is_named_as_verl_names_its_runs(tmp_path, monkeypatch):
    """One name for one run on either backend: the local wandb run's project and name are verl's overrides'."""
    seen = {}
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(init=lambda **kwargs: seen.update(kwargs)))
    run_dir = RunDir(tmp_path / "run").create()
    run_dir.write_run({"hyperparameters": {}})
    setting, recipe = find_setting("sanity_r1d_1p5b"), find_method("dppo_binary_tv")
    wandb_run(run_dir, setting, recipe, 3)
    paths = RunPaths(tmp_path, tmp_path / "t.parquet", (tmp_path / "a.parquet",), tmp_path / "log.jsonl")
    overrides = run_overrides(resolve_run(setting, recipe, 3), paths)
    verl = dict(o.split("=", 1) for o in overrides if o.startswith("trainer."))
    assert (seen["project"], seen["name"]) == (verl["trainer.project_name"], verl["trainer.experiment_name"])
    assert seen["name"] == "sanity_r1d_1p5b__dppo_binary_tv__seed3" and Path(seen["dir"]) == run_dir.path
