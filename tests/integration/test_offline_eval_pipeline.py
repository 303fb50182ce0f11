"""A finished local run scores a benchmark it was not trained with, through the pipeline, without retraining: adding
it to the setting plans one evaluation and no training, and evaluating less often re-evaluates from the saved
scores. The run's records are untouched throughout."""

import json

import pytest
from snakemake_fixtures import job_counts, recipe_root, snakemake

pytestmark = pytest.mark.slow

RUN = "results/runs/tiny_smoke/dppo_binary_tv/seed0"


def summary(benchmark):
    return f"{RUN}/eval/{benchmark}/summary.json"


def test_a_benchmark_added_to_a_finished_local_run_is_scored_without_retraining(tmp_path):
    root = recipe_root(tmp_path / "recipes")
    first = snakemake(tmp_path, "--cores", "2", summary("tiny_arith"), root=root)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / RUN
    records = {p: p.read_bytes() for p in (run / "run.json", run / "metrics.jsonl", run / "train.completed")}
    records |= {p: p.read_bytes() for p in (run / "checkpoints").rglob("*") if p.is_file()}

    setting = root / "recipes" / "settings" / "tiny_smoke.yaml"
    setting.write_text(setting.read_text().replace("eval:\n", "eval:\n  offline: [tiny_arith, tiny_arith_greedy]\n"))
    targets = [summary("tiny_arith"), summary("tiny_arith_greedy")]
    plan = snakemake(tmp_path, "-n", *targets, root=root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert job_counts(plan.stdout) == {"evaluate": 1}  # the new benchmark's; the run and tiny_arith's are current
    added = snakemake(tmp_path, "--cores", "2", *targets, root=root)
    assert added.returncode == 0, added.stderr[-3000:]
    greedy = json.loads((tmp_path / summary("tiny_arith_greedy")).read_text())
    assert greedy["source"] == "saved weights" and set(greedy["steps"]) == {"0", "3", "6"} and greedy["n"] == 1
    scores = json.loads((run / "eval/tiny_arith_greedy/step6/scores.json").read_text())
    assert scores["sampling"]["temperature"] == 0.0 and len(scores["problems"]) == 16

    tiny = run / "eval/tiny_arith"
    scored = {s: (tiny / f"step{s}/scores.json").read_bytes() for s in (0, 6)}
    setting.write_text(setting.read_text().replace("  every: 3\n", "  every: 6\n"))
    plan = snakemake(tmp_path, "-n", *targets, root=root)
    assert job_counts(plan.stdout) == {"evaluate": 2}  # the evaluated steps changed: evaluations only
    again = snakemake(tmp_path, "--cores", "2", *targets, root=root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert set(json.loads((tmp_path / summary("tiny_arith")).read_text())["steps"]) == {"0", "6"}
    assert {s: (tiny / f"step{s}/scores.json").read_bytes() for s in (0, 6)} == scored  # reused, not made again
    assert {p: p.read_bytes() for p in records} == records  # training never ran again
