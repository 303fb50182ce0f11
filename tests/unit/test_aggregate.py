"""Aggregation on run directories built here: table numbers equal those computed from the records."""

import csv
import io

import numpy as np
import pytest
from record_fixtures import write_scores

from dppo_bench.aggregate.collect import collect
from dppo_bench.aggregate.figures import plot
from dppo_bench.aggregate.reference import for_experiment, read_references
from dppo_bench.aggregate.series import gaussian_smooth
from dppo_bench.aggregate.tables import table_rows, to_csv, to_latex, to_markdown
from dppo_bench.config import Experiment, find_method, find_setting
from dppo_bench.rundir import RunDir

SETTING = find_setting("tiny_smoke")
METHODS = {m: find_method(m) for m in ("pg_is", "dppo_binary_tv", "grpo_clip_higher")}
EXPERIMENT = Experiment.model_validate(
    {
        "id": "agg_test",
        "title": "t",
        "paper_item": "test",
        "description": "d",
        "runs": [{"setting": "tiny_smoke", "methods": list(METHODS)}],
        "seeds": [0, 1],
        "panels": [
            {"title": "Rewards", "metrics": ["train/reward_mean"], "smooth": 2},
            {"title": "Held-out", "metrics": ["eval/tiny_arith/avg@4"]},
        ],
        "columns": [
            {"title": "reward final", "metric": "train/reward_mean", "stat": "final"},
            {"title": "reward peak", "metric": "train/reward_mean", "stat": "peak"},
            {"title": "held-out peak", "metric": "eval/tiny_arith/avg@4", "stat": "peak"},
            {"title": "cost", "metric": "perf/step_s", "stat": "mean"},
        ],
    }
)


def write_run(root, method, seed, rewards, evals, *, status="completed", recipe_sha=None):
    run = RunDir(root / "tiny_smoke" / method / f"seed{seed}").create()
    run.write_run(
        {
            "status": status,
            "recipe_sha256": recipe_sha or METHODS[method].sha256(),
            "setting_sha256": SETTING.sha256(),
        }
    )
    run.append_metrics([{"step": i + 1, "train/reward_mean": r, "perf/step_s": 0.5 + i} for i, r in enumerate(rewards)])
    for step, value in evals.items():
        write_scores(run.path, "tiny_arith", step, 4, value)


@pytest.fixture
def runs(tmp_path):
    write_run(tmp_path, "pg_is", 0, [0.2, 0.6, 0.4], {0: 0.1, 3: 0.3})
    write_run(tmp_path, "pg_is", 1, [0.4, 0.2, 0.8], {0: 0.2, 3: 0.5})
    write_run(tmp_path, "dppo_binary_tv", 0, [0.5, 0.7, 0.9], {0: 0.1, 3: 0.6})
    write_run(tmp_path, "dppo_binary_tv", 1, [0.1, 0.1, 0.1], {}, recipe_sha="0" * 64)  # an edited recipe: stale
    # grpo_clip_higher seed 0 never ran; seed 1 failed
    write_run(tmp_path, "grpo_clip_higher", 1, [0.3], {}, status="failed")
    return collect(EXPERIMENT, {"tiny_smoke": SETTING}, METHODS, tmp_path)


def test_table_values_are_computed_from_the_records(runs):
    rows = {r["method"]: r for r in table_rows(EXPERIMENT, runs)}
    pg = rows["pg_is"]
    assert pg["seeds"] == "0,1" and pg["status"] == "completed"
    assert pg["reward final"] == pytest.approx((0.4 + 0.8) / 2)
    assert pg["reward peak"] == pytest.approx((0.6 + 0.8) / 2)
    assert pg["held-out peak"] == pytest.approx((0.3 + 0.5) / 2)
    assert pg["cost"] == pytest.approx(1.5)
    tv = rows["dppo_binary_tv"]
    assert tv["seeds"] == "0" and "seed 1: stale" in tv["status"]  # never mixed in
    assert tv["reward final"] == pytest.approx(0.9)
    grpo = rows["grpo_clip_higher"]
    assert grpo["seeds"] == "" and grpo["reward final"] is None
    assert "seed 0: missing" in grpo["status"] and "seed 1: failed" in grpo["status"]


def test_missing_runs_are_shown_in_every_format(runs):
    rows = table_rows(EXPERIMENT, runs)
    md, tex = to_markdown(EXPERIMENT, rows), to_latex(EXPERIMENT, rows)
    grpo_md = next(line for line in md.splitlines() if line.startswith("| GRPO-ClipHigher"))
    assert "missing" in grpo_md and "failed" in grpo_md
    assert r"\toprule" in tex and "GRPO-ClipHigher" in tex and "--" in tex
    parsed = list(csv.DictReader(io.StringIO(to_csv(EXPERIMENT, rows))))
    assert [r["method"] for r in parsed] == ["pg_is", "dppo_binary_tv", "grpo_clip_higher"]
    assert float(parsed[0]["reward final"]) == pytest.approx(0.6) and parsed[2]["reward final"] == ""


def test_paper_values_and_deltas(runs, tmp_path):
    csv_path = tmp_path / "paper.csv"
    csv_path.write_text(
        "setting,method,metric,stat,step,value,precision,paper_item,source\n"
        "tiny_smoke,pg_is,train/reward_mean,final,,0.5,0.01,Fig. X,end\n"
        "tiny_smoke,pg_is,train/reward_mean,at_step,2,0.9,0.01,Fig. X,a value at a step: no column\n"
        "other,pg_is,train/reward_mean,peak,,0.9,0.01,Fig. Y,another setting\n"
    )
    refs = for_experiment(EXPERIMENT, read_references(csv_path))
    rows = {r["method"]: r for r in table_rows(EXPERIMENT, runs, refs)}
    assert rows["pg_is"]["reward final (paper)"] == 0.5
    assert rows["pg_is"]["reward final Δ"] == pytest.approx(0.6 - 0.5)
    assert rows["dppo_binary_tv"]["reward final (paper)"] is None and rows["dppo_binary_tv"]["reward final Δ"] is None
    assert "reward peak (paper)" not in rows["pg_is"]  # no reference for that column in this experiment
    md = to_markdown(EXPERIMENT, list(rows.values()))
    assert "reward final (paper)" in md and "read off the paper's Fig. X by eye" in md and "Fig. Y" not in md
    parsed = list(csv.DictReader(io.StringIO(to_csv(EXPERIMENT, list(rows.values())))))
    assert float(parsed[0]["reward final Δ"]) == pytest.approx(0.1) and "paper_items" not in parsed[0]


def test_figure_files_are_written(runs, tmp_path):
    plot(EXPERIMENT, runs, tmp_path / "fig" / "figure")
    assert (tmp_path / "fig" / "figure.png").stat().st_size > 10_000
    assert (tmp_path / "fig" / "figure.pdf").read_bytes()[:4] == b"%PDF"


def test_gaussian_smoothing():
    x = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    y = gaussian_smooth(x, 1.0)
    assert y.sum() == pytest.approx(1.0, abs=0.05) and y[2] < 1 and y[1] == pytest.approx(y[3])
    assert np.allclose(gaussian_smooth(np.full(7, 3.0), 2.0), 3.0)
    assert gaussian_smooth(x, 0) is x


def test_series_statistics():
    from dppo_bench.aggregate.series import series_stat

    series = {s: float(s) for s in range(1, 21)}  # 1..20
    assert series_stat(series, "start") == pytest.approx(1.5) and series_stat(series, "end") == pytest.approx(19.5)
    assert series_stat(series, "final") == 20 and series_stat(series, "peak") == 20 and series_stat(series, "min") == 1
    assert series_stat({3: 0.5}, "start") == 0.5 and series_stat({}, "mean") is None


def test_a_smoothed_peak_is_the_curves_not_its_noise():
    from dppo_bench.aggregate.series import gaussian_smooth, series_stat

    noisy = {s: 0.5 + (0.4 if s == 7 else 0.0) for s in range(1, 21)}  # one lucky step
    assert series_stat(noisy, "peak") == pytest.approx(0.9)
    smoothed = gaussian_smooth(np.array([noisy[s] for s in range(1, 21)]), 2.0)
    assert series_stat(noisy, "peak", smooth=2.0) == pytest.approx(smoothed.max()) and smoothed.max() < 0.6


def test_a_bar_in_a_column_title_stays_inside_its_markdown_cell():
    from dppo_bench.aggregate.tables import markdown_row

    assert markdown_row(["|π − μ| end", "0.1"]) == "| \\|π − μ\\| end | 0.1 |"
