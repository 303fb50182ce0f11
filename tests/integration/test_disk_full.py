"""A full disk during training, evaluation or aggregation: the command stops with an error naming the file and what
to do, leaves no part of any file behind, and the same command rerun once space is freed finishes with exactly the
records of an uninterrupted run. The disk is a small tmpfs mounted for the test (root only) and filled to leave a
chosen number of bytes, swept so that the failure lands in every kind of file the command writes."""

import gzip
import json
import shutil
from contextlib import nullcontext
from unittest.mock import patch

import pytest
from local_fixtures import build_run_inputs
from mounts import free_bytes, full_disk, small_fs

from dppo_bench.cli import main
from dppo_bench.config import SETTINGS_DIR, find_setting
from dppo_bench.local.pretrain import task_config
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.rundir import RunDir
from dppo_bench.verify import verify_run

PAGE = 4096
SETTING, METHOD, STEPS = "tiny_smoke", "dppo_binary_tv", "0,3,6"


def train_args(out, inputs):
    base, train, _ = inputs
    return [
        "train", "--setting", SETTING, "--method", METHOD, "--seed", "0", "--out", str(out),
        "--base-model", str(base), "--train-data", str(train), "--no-progress",
    ]  # fmt: skip


def evaluate_args(run, inputs):
    summary = run / "eval/tiny_arith/summary.json"
    return [
        "evaluate", "--run-dir", str(run), "--benchmark", "tiny_arith", "--steps", STEPS,
        "--data", str(inputs[2]), "--out", str(summary),
    ]  # fmt: skip


def aggregate_args(runs, out):
    return ["aggregate", SETTING, "--runs", str(runs), "--out", str(out)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """(base model, train split, held-out split) of the tiny smoke setting."""
    tmp = tmp_path_factory.mktemp("inputs")
    base, train = build_run_inputs(tmp, SETTINGS_DIR / f"{SETTING}.yaml")
    local = find_setting(SETTING).local
    _, heldout = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
    write_jsonl(heldout, tmp / "heldout.jsonl")
    return base, train, tmp / "heldout.jsonl"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, inputs):
    """The uninterrupted run, its evaluation and the experiment's tables, on an ordinary disk."""
    root = tmp_path_factory.mktemp("baseline")
    run = root / "runs" / SETTING / METHOD / "seed0"
    assert main(train_args(run, inputs)) == 0
    assert main(evaluate_args(run, inputs)) == 0
    assert main(aggregate_args(root / "runs", root / "out")) == 0
    return root


def attempt(capsys, mount, args, leave: int) -> str | None:
    """Run ``args`` with only ``leave`` bytes free; None if it succeeds, else the file its error names. A failure
    must be the disk-full message naming a file on the small disk, and leave no temporary part of a file."""
    with full_disk(mount, leave):
        code = main(args)
    err = capsys.readouterr().err
    if code == 0:
        return None
    assert code == 2 and "No space left on device" in err and "rerun the same command" in err, err
    assert "Traceback" not in err, err
    path = err.split("error: ", 1)[1].split(": cannot be written")[0]
    assert path.startswith(str(mount)), err
    assert not list(mount.rglob("*.tmp")), err  # a partial samples file may stay: it is resumed
    return path


def pages(directory) -> int:
    return sum(-(-p.stat().st_size // PAGE) for p in directory.iterdir())


def without_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


@pytest.mark.slow
def test_training_on_a_full_disk_resumes_to_the_uninterrupted_run(tmp_path, capsys, inputs, baseline):
    whole = RunDir(baseline / "runs" / SETTING / METHOD / "seed0")
    # at each checkpoint boundary: nothing free, one page, two; then room for about one more checkpoint
    fine, progress = [0, PAGE, 2 * PAGE], (pages(whole.checkpoint_dir(6)) + 4) * PAGE
    with small_fs(tmp_path / "fs") as mount:
        run = RunDir(mount / "run")
        named = [attempt(capsys, mount, train_args(run.path, inputs), leave) for leave in (fine + [progress]) * 3]
        assert main(train_args(run.path, inputs)) == 0, capsys.readouterr().err
        failed = [p for p in named if p is not None]
        assert {"train.lock", "run.json"} <= {p.rsplit("/", 1)[1] for p in failed}, failed
        assert {0, 3, 6} <= {int(p.rsplit("_", 1)[1]) for p in failed if "/checkpoints/step_" in p}, failed
        assert_same_run(run, whole)


@pytest.mark.slow
def test_a_disk_filled_during_a_metrics_append_resumes_without_a_torn_row(tmp_path, capsys, inputs, baseline):
    """The disk fills while the rows of steps 4-6 are appended: they cross into a new page, so the write stops
    inside a row, as it would when another process takes the last space."""
    whole = RunDir(baseline / "runs" / SETTING / METHOD / "seed0")
    append = RunDir.append_metrics

    def append_on_a_full_disk(self, rows):
        with full_disk(self.path.parent, 0, ".during") if rows and rows[-1]["step"] == 6 else nullcontext():
            append(self, rows)

    with small_fs(tmp_path / "fs") as mount:
        run = RunDir(mount / "run")
        with patch.object(RunDir, "append_metrics", append_on_a_full_disk):
            assert attempt(capsys, mount, train_args(run.path, inputs), free_bytes(mount)) == str(run.metrics)
        torn = run.metrics.read_bytes()
        assert not torn.endswith(b"\n") and len(torn) > len(whole.metrics.read_bytes()) // 2
        assert main(train_args(run.path, inputs)) == 0, capsys.readouterr().err
        assert_same_run(run, whole)


def assert_same_run(run: RunDir, whole: RunDir) -> None:
    assert without_perf(run.read_metrics()) == without_perf(whole.read_metrics())
    assert [r["step"] for r in run.read_metrics()] == list(range(1, 7))
    assert run.saved_steps() == whole.saved_steps() == [0, 3, 6]
    for step in whole.saved_steps():
        ours, theirs = run.checkpoint_dir(step), whole.checkpoint_dir(step)
        assert (ours / "model.safetensors").read_bytes() == (theirs / "model.safetensors").read_bytes(), step
    assert json.loads(run.run_json.read_text())["status"] == "completed"


def scores_without_times(path):
    """scores.json without what names the run's place or the time (the samples' header holds both)."""
    scores = json.loads(path.read_text())
    kept = {k: v for k, v in scores.items() if k not in ("scored_at", "samples", "model")}
    return kept | {"model": scores["model"]["fingerprint"]}


@pytest.mark.slow
def test_evaluation_on_a_full_disk_resumes_to_the_same_scores(tmp_path, capsys, inputs, baseline):
    whole = RunDir(baseline / "runs" / SETTING / METHOD / "seed0")
    # a few pages a step: each budget, from a fresh start, puts the failure in another file of the evaluation
    budgets = [i * PAGE for i in range(pages(whole.eval_step_dir("tiny_arith", 0)) * 3 + 3)]
    with small_fs(tmp_path / "fs") as mount:
        shutil.copytree(whole.path, mount / "run", ignore=shutil.ignore_patterns("eval"))
        run = RunDir(mount / "run")
        named = []
        for leave in budgets:
            shutil.rmtree(run.path / "eval", ignore_errors=True)
            named.append(attempt(capsys, mount, evaluate_args(run.path, inputs), leave))
            assert main(evaluate_args(run.path, inputs)) == 0, capsys.readouterr().err
            assert_same_evaluation(run, whole)
        kinds = {"evaluate.lock", "samples.partial.jsonl.gz", "scores.verdicts.jsonl.gz", "scores.json", "summary.json"}
        assert kinds <= {p.rsplit("/", 1)[1] for p in named if p is not None}, named


def assert_same_evaluation(run: RunDir, whole: RunDir) -> None:
    summaries = [json.loads((r.path / "eval/tiny_arith/summary.json").read_text()) for r in (run, whole)]
    without_records = [{k: v for k, v in s.items() if k != "records"} for s in summaries]  # their sha256 differ
    assert without_records[0] == without_records[1] and verify_run(run) == []  # and vouch for this run's files
    for step in (0, 3, 6):
        ours, theirs = run.eval_step_dir("tiny_arith", step), whole.eval_step_dir("tiny_arith", step)
        assert scores_without_times(ours / "scores.json") == scores_without_times(theirs / "scores.json")
        rows = [gzip.decompress((d / "samples.jsonl.gz").read_bytes()).splitlines()[1:] for d in (ours, theirs)]
        assert rows[0] == rows[1], step
        assert sorted(p.name for p in ours.iterdir()) == ["samples.jsonl.gz", "scores.json", "scores.verdicts.jsonl.gz"]


@pytest.mark.slow
def test_aggregation_on_a_full_disk_writes_whole_tables_on_the_rerun(tmp_path, capsys, baseline):
    with small_fs(tmp_path / "fs") as mount:
        shutil.copytree(baseline / "runs", mount / "runs")
        out = mount / "out"
        named = []
        for leave in [i * PAGE for i in range(pages(baseline / "out") + 1)]:
            shutil.rmtree(out, ignore_errors=True)
            named.append(attempt(capsys, mount, aggregate_args(mount / "runs", out), leave))
            assert main(aggregate_args(mount / "runs", out)) == 0, capsys.readouterr().err
            for name in ("table.md", "table.csv", "table.tex", "figure.png"):
                assert (out / name).read_bytes() == (baseline / "out" / name).read_bytes(), name
            assert (out / "figure.pdf").read_bytes().startswith(b"%PDF")
            assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (baseline / "out").iterdir())
        kinds = {"table.md", "table.csv", "table.tex", "figure.png", "figure.pdf"}
        assert kinds <= {p.rsplit("/", 1)[1] for p in named if p is not None}, named
