"""Damaged records of a local run are refused with the file named, never trained on or read as data; what a kill
leaves (a torn last row, a missing newest checkpoint) is recovered to exactly the uninterrupted run."""

import json
import shutil

import pytest
from local_fixtures import build_run_inputs, write_setting

from dppo_bench.aggregate.collect import eval_series
from dppo_bench.config import load_setting
from dppo_bench.config.runs import resolve_run, setting_benchmarks
from dppo_bench.io import CorruptFileError, verify_checksums
from dppo_bench.local.trainer import LocalRun, LocalTrainer
from dppo_bench.rundir import RunDir


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of 4 steps (checkpoints 0, 2, 4) and its inputs."""
    tmp = tmp_path_factory.mktemp("corruption")
    setting_path = write_setting(tmp, steps=4, save_every=2)
    base, train = build_run_inputs(tmp, setting_path)
    run = LocalRun(resolve_run(load_setting(setting_path), "dppo_binary_tv", 0), base, train)
    out = RunDir(tmp / "finished").create()
    LocalTrainer(run, out, progress=False).fit()
    return run, out


@pytest.fixture
def copy(finished, tmp_path):
    run, out = finished
    shutil.copytree(out.path, tmp_path / "run")
    return run, RunDir(tmp_path / "run")


def fit(run, run_dir):
    return LocalTrainer(run, run_dir, progress=False).fit()


def flip_byte(path, offset=None):
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def without_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


@pytest.mark.parametrize("name", ["model.safetensors", "trainer_state.pt", "config.json"])
def test_a_flipped_byte_in_the_checkpoint_is_refused_naming_the_file(copy, name):
    run, run_dir = copy
    damaged = run_dir.checkpoint_dir(4) / name
    flip_byte(damaged)
    before = run_dir.metrics.read_bytes()
    with pytest.raises(CorruptFileError, match=f"{damaged}: damaged"):
        fit(run, run_dir)
    assert run_dir.metrics.read_bytes() == before


def test_a_truncated_checkpoint_is_refused_naming_the_file(copy):
    run, run_dir = copy
    weights = run_dir.checkpoint_dir(4) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CorruptFileError, match=f"{weights}: damaged"):
        fit(run, run_dir)
    with pytest.raises(CorruptFileError, match=f"{weights}: damaged"):  # evaluation reads it the same way
        verify_checksums(run_dir.checkpoint_dir(4))


def test_a_missing_file_or_manifest_is_named(copy):
    _, run_dir = copy
    (run_dir.checkpoint_dir(4) / "trainer_state.pt").unlink()
    with pytest.raises(CorruptFileError, match="trainer_state.pt: missing from the checkpoint"):
        verify_checksums(run_dir.checkpoint_dir(4))
    (run_dir.checkpoint_dir(2) / "SHA256SUMS").unlink()
    with pytest.raises(CorruptFileError, match="SHA256SUMS: missing"):
        verify_checksums(run_dir.checkpoint_dir(2))
    with pytest.raises(CorruptFileError, match="step_000009: no such checkpoint directory"):
        verify_checksums(run_dir.checkpoint_dir(9))


def test_a_torn_row_the_checkpoint_covers_is_refused_not_dropped(copy):
    run, run_dir = copy
    text = run_dir.metrics.read_text()
    run_dir.metrics.write_text(text[: len(text) - 40])  # row 4 cut short; checkpoint 4 covers it
    before = run_dir.metrics.read_bytes()
    with pytest.raises(CorruptFileError, match=r"metrics.jsonl: the rows of steps 1..4 .*found steps 1-3\)"):
        fit(run, run_dir)
    assert run_dir.metrics.read_bytes() == before


def test_rows_written_twice_are_refused(copy):
    run, run_dir = copy
    lines = run_dir.metrics.read_text().splitlines(keepends=True)
    run_dir.metrics.write_text("".join(lines[:2] + lines))
    with pytest.raises(CorruptFileError, match=r"found steps 1-2, 1-4"):
        fit(run, run_dir)


def test_a_damaged_row_in_the_middle_is_named(copy):
    run, run_dir = copy
    text = run_dir.metrics.read_text()
    run_dir.metrics.write_text(text.replace('"step": 2', '"step": 2,,', 1))
    with pytest.raises(CorruptFileError, match="metrics.jsonl: line 2 is not valid JSON"):
        fit(run, run_dir)


def test_what_a_kill_leaves_resumes_to_the_uninterrupted_run(finished, copy):
    """The newest checkpoint gone (killed before its rename) and the last row torn: resume from step 2."""
    run, run_dir = copy
    reference = finished[1].read_metrics()
    shutil.rmtree(run_dir.checkpoint_dir(4))
    text = run_dir.metrics.read_text()
    run_dir.metrics.write_text(text[: len(text) - 40])
    assert fit(run, run_dir) == {"status": "completed", "last_step": 4}
    assert without_perf(run_dir.read_metrics()) == without_perf(reference)


def test_garbled_json_records_name_their_file(copy):
    run, run_dir = copy
    run_dir.run_json.write_text('{"status": "comp')
    with pytest.raises(CorruptFileError, match=f"{run_dir.run_json}: not valid JSON"):
        run_dir.read_run()
    scores = run_dir.path / "eval" / "tiny_arith" / "step4" / "scores.json"
    scores.parent.mkdir(parents=True)
    scores.write_bytes(b"\x00\x00")
    with pytest.raises(CorruptFileError, match=f"{scores}: not valid JSON"):
        eval_series(run_dir, run.setting, setting_benchmarks([run.setting]))


def test_a_row_without_an_integer_step_is_named(tmp_path):
    run_dir = RunDir(tmp_path).create()
    run_dir.metrics.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": "2"}) + "\n")
    with pytest.raises(CorruptFileError, match="metrics.jsonl: line 2 is not a row with an integer step"):
        run_dir.read_metrics()


def test_scores_made_with_another_eval_spec_are_refused(tmp_path, capsys):
    from dppo_bench.cli import main

    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1+1=", "answer": "2"}) + "\n")
    record = {"setting": "s", "method": "m", "seed": 0, "backend": "local"}
    config = {"train": {"max_prompt_length": 8, "max_response_length": 32}}
    RunDir(tmp_path / "run").create().write_run({**record, "setting_config": config})
    scores = tmp_path / "run" / "eval" / "tiny_arith" / "step0" / "scores.json"
    scores.parent.mkdir(parents=True)
    sampling = {"n": 8, "temperature": 0.6, "top_p": 0.95, "max_tokens": 32, "seed": 0}  # the spec now has n: 4
    scores.write_text(json.dumps({"sampling": sampling, "n": 8, "avg@8": 0.5}))
    args = ["evaluate", "--run-dir", str(tmp_path / "run"), "--benchmark", "tiny_arith", "--steps", "0"]
    assert main([*args, "--data", str(data), "--out", str(tmp_path / "summary.json")]) == 2
    assert f"{scores}: scored with sampling" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()
