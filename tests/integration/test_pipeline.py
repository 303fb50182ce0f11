"""The pipeline end to end on the tiny smoke experiment, and dry runs of the miniature."""

import json

import pytest
from snakemake_fixtures import job_counts, recipe_root, snakemake

from dppo_bench.aggregate.series import series_stat


def test_dry_run_of_the_miniature_lists_every_job(tmp_path):
    proc = snakemake(tmp_path, "-n", "tiny_sanity")
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    assert counts == {
        "tiny_data": 1,
        "tiny_pretrain": 1,
        "train": 10,
        "evaluate": 10,
        "aggregate_table": 1,
        "aggregate_figure": 1,
        "tiny_sanity": 1,
    }


@pytest.mark.slow
def test_tiny_smoke_end_to_end(tmp_path):
    proc = snakemake(tmp_path, "--cores", "2", "tiny_smoke")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "results" / "tiny_smoke"
    assert (out / "figure.png").stat().st_size > 10_000 and (out / "table.tex").exists()
    table = (out / "table.md").read_text()
    for method in ("dppo_binary_tv", "minirl", "dppo_topk_kl"):
        run = tmp_path / "results" / "runs" / "tiny_smoke" / method / "seed0"
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "completed" and info["provenance"]["git"]["sha"]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, 7))
        final = series_stat({r["step"]: r["train/reward_mean"] for r in rows}, "final")
        scores = json.loads((run / "eval" / "tiny_arith" / "step6" / "scores.json").read_text())
        assert scores["n"] == 4 and len(scores["problems"]) == 16
        label = {"dppo_binary_tv": "DPPO-Binary-TV", "minirl": "MiniRL", "dppo_topk_kl": "DPPO-TopK-KL"}[method]
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| {label} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[3]) == pytest.approx(final, rel=1e-3)
        assert float(cells[4]) == pytest.approx(scores["avg@4"], rel=1e-3, abs=1e-9)
    again = snakemake(tmp_path, "--cores", "2", "tiny_smoke")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_a_new_method_recipe_alone_is_planned(tmp_path):
    """Journey 2: one yaml in recipes/methods/ and the pipeline plans its runs; no other file changes."""
    root = recipe_root(tmp_path)
    (root / "recipes" / "methods" / "zz_throwaway_test_method.yaml").write_text(
        "display_name: Throwaway\npaper: test\nmask: dppo_binary_tv\nanchor: rollout\n"
        "hyperparameters:\n  sanity: {delta: 0.3, is_cap: 2}\n"
    )
    target = "results/runs/tiny_smoke/zz_throwaway_test_method/seed0/eval/tiny_arith/summary.json"
    proc = snakemake(tmp_path / "work", "-n", target, root=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    assert counts["train"] == 1 and counts["evaluate"] == 1
    assert "method=zz_throwaway_test_method" in proc.stdout


def test_a_bad_recipe_stops_the_pipeline_at_start_naming_file_and_field(tmp_path):
    root = recipe_root(tmp_path)
    (root / "recipes" / "methods" / "zz_bad_test_method.yaml").write_text(
        "display_name: Bad\npaper: t\nmask: dppo_binary_tv\nanchor: rollout\nhyperparameters:\n"
        "  sanity: {delta: -1, is_cap: null}\n"
    )
    proc = snakemake(tmp_path / "work", "-n", "tiny_smoke", root=root)
    assert proc.returncode != 0
    assert "zz_bad_test_method.yaml: field 'hyperparameters.sanity.delta'" in proc.stdout + proc.stderr


def test_unlock_needs_no_cores(tmp_path):
    proc = snakemake(tmp_path, "--unlock")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_bad_eval_spec_stops_the_pipeline_at_start(tmp_path):
    root = recipe_root(tmp_path)
    spec = (root / "eval" / "tiny_arith.yaml").read_text().replace("n: 4", "n: 0")
    (root / "eval" / "zz_bad_test_benchmark.yaml").write_text(spec)
    proc = snakemake(tmp_path / "work", "-n", "tiny_smoke", root=root)
    assert proc.returncode != 0
    assert "zz_bad_test_benchmark.yaml: field 'n'" in proc.stdout + proc.stderr


def test_a_local_setting_naming_a_real_benchmark_stops_at_start(tmp_path):
    """The tiny model cannot answer MATH-500: planning its evaluation would be a silent wrong result."""
    root = recipe_root(tmp_path)
    setting = root / "recipes" / "settings" / "tiny_smoke.yaml"
    setting.write_text(setting.read_text().replace("eval:\n", "eval:\n  offline: [math500]\n"))
    proc = snakemake(tmp_path / "work", "-n", "tiny_smoke", root=root)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "tiny_smoke.yaml: field 'eval.offline.0'" in out and "'math500' cannot be run by the local backend" in out


def test_a_misspelt_experiment_metric_stops_at_start(tmp_path):
    root = recipe_root(tmp_path)
    experiment = root / "experiments" / "tiny_smoke.yaml"
    experiment.write_text(experiment.read_text().replace("train/reward_mean", "train/reward_maen", 1))
    proc = snakemake(tmp_path / "work", "-n", "tiny_smoke", root=root)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "tiny_smoke.yaml: field 'panels.0.metrics.0'" in out and "did you mean 'train/reward_mean'" in out
