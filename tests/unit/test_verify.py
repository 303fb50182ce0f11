"""`dppo-bench verify` names every damaged record of a finished run (JSON, rows, numbers, checksums, samples against
scores, records changed after their marker vouched for them), and aggregation refuses damage instead of reading it:
it removes the marker of what the pipeline makes again, and the same evaluation rerun makes the record whole."""

import gzip
import json
import shutil

import pytest
from local_fixtures import build_run_inputs

from dppo_bench.cli import main
from dppo_bench.config import SETTINGS_DIR, find_setting
from dppo_bench.local.pretrain import task_config
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.rundir import RunDir
from dppo_bench.verify import changed_records, verify_run

SETTING, METHOD = "tiny_smoke", "dppo_binary_tv"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny smoke run, evaluated at steps 0, 3, 6, and the held-out split it was evaluated on."""
    tmp = tmp_path_factory.mktemp("verify")
    base, train = build_run_inputs(tmp, SETTINGS_DIR / f"{SETTING}.yaml")
    local = find_setting(SETTING).local
    _, heldout = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
    write_jsonl(heldout, tmp / "heldout.jsonl")
    run = tmp / "runs" / SETTING / METHOD / "seed0"
    train_args = ["--seed", "0", "--out", str(run), "--base-model", str(base), "--train-data", str(train)]
    assert main(["train", "--setting", SETTING, "--method", METHOD, *train_args, "--no-progress"]) == 0
    assert main(evaluate_args(run, tmp / "heldout.jsonl")) == 0
    shutil.copytree(tmp / "runs", tmp / "pristine")
    return run, tmp / "heldout.jsonl"


def evaluate_args(run, data):
    summary = run / "eval/tiny_arith/summary.json"
    return [
        "evaluate", "--run-dir", str(run), "--benchmark", "tiny_arith", "--steps", "0,3,6", "--data", str(data),
        "--out", str(summary),
    ]  # fmt: skip


@pytest.fixture
def copy(finished):
    """The finished run as it was written, at its own path (its samples record where their model was)."""
    run, data = finished
    root = run.parent.parent.parent
    shutil.rmtree(root)
    shutil.copytree(root.with_name("pristine"), root)
    return RunDir(run), data


def messages(run, deep=True):
    return [d.message for d in verify_run(run, deep=deep)]


def test_a_finished_run_verifies(copy, capsys):
    run, _ = copy
    assert verify_run(run) == [] and changed_records(run.path) == []
    assert main(["verify", str(run.path)]) == 0
    assert capsys.readouterr().out == f"{run.path}: ok\n"
    assert main(["verify", SETTING, "--runs", str(run.path.parent.parent.parent)]) == 0
    out = capsys.readouterr().out
    assert f"{run.path}: ok" in out and "minirl/seed0: not run yet" in out


def test_a_garbled_scores_json_is_named_and_aggregation_makes_it_again(copy, tmp_path, capsys):
    run, data = copy
    scores, summary = run.eval_step_dir("tiny_arith", 3) / "scores.json", run.eval_dir("tiny_arith") / "summary.json"
    before = json.loads(scores.read_text())
    scores.write_text(scores.read_text()[:100])
    assert messages(run)[0].startswith(f"{scores}: not valid JSON")
    assert changed_records(run.path) == [str(scores)]  # what the pipeline adds to aggregation's inputs
    assert main(["verify", str(run.path)]) == 1
    assert f"{scores}: not valid JSON" in capsys.readouterr().out

    root = run.path.parent.parent.parent
    assert main(["aggregate", SETTING, "--runs", str(root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{scores}: not valid JSON" in err and f"removed {summary}: rerun the same command" in err, err
    assert not summary.exists() and not (tmp_path / "out" / "table.md").exists()
    assert main(evaluate_args(run.path, data)) == 0  # what the pipeline reruns: the step is scored again
    after = json.loads(scores.read_text())
    assert {k: v for k, v in after.items() if k != "scored_at"} == {k: v for k, v in before.items() if k != "scored_at"}
    assert verify_run(run) == []
    assert main(["aggregate", SETTING, "--runs", str(root), "--out", str(tmp_path / "out")]) == 0


def test_numbers_that_do_not_follow_from_the_counts_are_named(copy):
    run, _ = copy
    scores = run.eval_step_dir("tiny_arith", 6) / "scores.json"
    edited = json.loads(scores.read_text())
    edited["avg@4"], edited["pass@k"]["2"] = 0.75, 0.5
    scores.write_text(json.dumps(edited))
    found = messages(run)
    summary = run.eval_dir("tiny_arith") / "summary.json"
    assert any(m.startswith(f"{scores}: field 'avg@4' is 0.75, but its counts give") for m in found), found
    assert any(m.startswith(f"{scores}: field 'pass@k.2' is 0.5") for m in found), found
    assert any(m.startswith(f"{summary}: field 'steps.6'") for m in found), found
    assert any(m.startswith(f"{scores}: changed after its evaluation finished") for m in found), found
    assert all(d.redo == summary for d in verify_run(run))


def test_damaged_samples_are_named_against_their_scores_and_made_again(copy):
    run, data = copy
    samples = run.eval_step_dir("tiny_arith", 0) / "samples.jsonl.gz"
    rows = gzip.decompress(samples.read_bytes()).splitlines()
    samples.write_bytes(gzip.compress(b"\n".join(rows[:-1]) + b"\n"))  # one completion lost, still valid gzip
    found = messages(run)
    assert any(m.startswith(f"{samples}: changed after it was scored") for m in found), found
    assert any(m.startswith(f"{samples}: its rows per problem differ from") for m in found), found
    assert messages(run, deep=False) == []  # aggregation does not read samples

    assert main(["verify", str(run.path), "--redo"]) == 1  # what the pipeline then redoes: the evaluation
    assert not (run.eval_dir("tiny_arith") / "summary.json").exists()
    assert main(evaluate_args(run.path, data)) == 0
    assert gzip.decompress(samples.read_bytes()).splitlines()[1:] == rows[1:]  # generated again, the same
    assert verify_run(run) == []


def test_training_records_are_refused_and_never_removed(copy, tmp_path, capsys):
    run, _ = copy
    lines = run.metrics.read_text().splitlines(keepends=True)
    run.metrics.write_text("".join(lines[:2] + lines[3:]))  # step 3's row gone: every line still valid JSON
    found = verify_run(run)
    assert [d.message for d in found] == [
        f"{run.metrics}: steps [3] missing: the run completed at step 6",
        f"{run.metrics}: changed after the run finished (its sha256 differs from the one {run.done} recorded)",
    ]
    assert all(d.redo is None for d in found)
    root = run.path.parent.parent.parent
    assert main(["aggregate", SETTING, "--runs", str(root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{run.metrics}: cannot be made again from the run; restore from a copy" in err and "removed" not in err
    assert run.done.exists() and (run.eval_dir("tiny_arith") / "summary.json").exists()


def test_a_checkpoint_and_the_run_record_are_checked(copy):
    run, _ = copy
    weights = run.checkpoint_dir(3) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    sums = run.checkpoint_dir(3) / "SHA256SUMS"
    assert messages(run) == [
        f"{weights}: damaged (its sha256 differs from the one {sums} recorded when the checkpoint was written)"
    ]
    assert messages(run, deep=False) == []
    info = json.loads(run.run_json.read_text())
    run.run_json.write_text(json.dumps({**info, "method": "minirl"}))
    assert f"{run.run_json}: field 'method' is 'minirl', not this directory's" in messages(run, deep=False)


def test_a_damaged_marker_is_redone(copy):
    run, _ = copy
    run.done.chmod(0o644)
    run.done.write_text("{")
    (found,) = verify_run(run, deep=False)
    assert found.message.startswith(f"{run.done}: not valid JSON") and found.redo == run.done
