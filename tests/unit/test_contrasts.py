"""Contrasts between curves (a calibration's criterion): paired differences and their t-intervals, from records."""

import math
import statistics
from pathlib import Path

import pytest
from test_aggregate import METHODS, SETTING, write_run

from dppo_bench.aggregate.collect import collect
from dppo_bench.aggregate.contrasts import contrast_rows, t_quantile, to_markdown
from dppo_bench.config import Experiment
from dppo_bench.config.yaml_io import ConfigError, validate

BASE = {
    "id": "contrast_test",
    "title": "t",
    "paper_item": "test",
    "description": "d",
    "runs": [{"setting": "tiny_smoke", "methods": ["pg_is", "dppo_binary_tv"]}],
    "seeds": [0, 1, 2],
    "columns": [{"title": "reward final", "metric": "train/reward_mean", "stat": "final"}],
}
CONTRAST = {
    "title": "DPPO - PG-IS",
    "metric": "train/reward_mean",
    "stat": "final",
    "run": {"setting": "tiny_smoke", "method": "dppo_binary_tv"},
    "control": {"setting": "tiny_smoke", "method": "pg_is"},
}


def test_student_t_quantiles():
    # closed forms: df 1 is Cauchy (tan), df 2 is t / sqrt(2 + t^2) = 2p - 1
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)
    assert t_quantile(0.975, 2) == pytest.approx(0.95 * math.sqrt(2 / (1 - 0.95**2)), rel=1e-9)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-4)  # any table of Student's t
    assert t_quantile(0.975, 1000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), rel=2e-3)


def test_paired_differences_and_their_interval(tmp_path):
    experiment = Experiment.model_validate({**BASE, "contrasts": [CONTRAST]})
    finals = {"pg_is": [0.5, 0.6, 0.7], "dppo_binary_tv": [0.7, 0.7, 0.95]}
    for method, values in finals.items():
        for seed, value in enumerate(values):
            write_run(tmp_path, method, seed, [0.1, value], {})
    runs = collect(experiment, {"tiny_smoke": SETTING}, METHODS, tmp_path)
    (row,) = contrast_rows(experiment, runs)
    diffs = [0.2, 0.1, 0.25]
    assert row["seeds"] == [0, 1, 2] and row["difference"] == pytest.approx(diffs)
    half = t_quantile(0.975, 2) * statistics.stdev(diffs) / math.sqrt(3)
    assert row["mean"] == pytest.approx(statistics.fmean(diffs))
    assert row["interval"] == pytest.approx((statistics.fmean(diffs) - half, statistics.fmean(diffs) + half))
    assert row["band"] == pytest.approx((0.5, 0.7))
    md = to_markdown([row])
    assert "| DPPO - PG-IS | 0,1,2 | 0.783 (0.700, 0.700, 0.950) | 0.600 (0.500, 0.600, 0.700) | [0.500, 0.700]" in md
    bar = to_markdown([{**row, "contrast": "|π − μ| end − start"}])
    assert "| \\|π − μ\\| end − start | 0,1,2 |" in bar  # a bar in a title stays inside its cell


def test_an_unpaired_seed_is_left_out_and_one_seed_has_no_interval(tmp_path):
    experiment = Experiment.model_validate({**BASE, "contrasts": [CONTRAST]})
    write_run(tmp_path, "pg_is", 0, [0.5], {})
    write_run(tmp_path, "pg_is", 1, [0.5], {})
    write_run(tmp_path, "dppo_binary_tv", 1, [0.9], {})
    (row,) = contrast_rows(experiment, collect(experiment, {"tiny_smoke": SETTING}, METHODS, tmp_path))
    assert row["seeds"] == [1] and row["mean"] == pytest.approx(0.4) and row["interval"] is None


def test_a_contrast_names_curves_of_the_runs():
    bad = {**CONTRAST, "control": {"setting": "tiny_smoke", "method": "minirl"}}
    with pytest.raises(ConfigError, match=r"x.yaml: field 'contrasts.0.control': method 'minirl' .* not in runs"):
        validate(Experiment, {**BASE, "contrasts": [bad]}, Path("x.yaml"))


def test_a_curve_against_itself_at_another_statistic(tmp_path):
    growth = {**CONTRAST, "title": "end - start", "run": CONTRAST["control"], "control_stat": "start"}
    experiment = Experiment.model_validate({**BASE, "contrasts": [growth]})
    for seed, rewards in enumerate([[0.1] * 10 + [0.3] * 10, [0.2] * 10 + [0.2] * 10]):
        write_run(tmp_path, "pg_is", seed, rewards, {})
    (row,) = contrast_rows(experiment, collect(experiment, {"tiny_smoke": SETTING}, METHODS, tmp_path))
    assert row["seeds"] == [0, 1] and row["difference"] == pytest.approx([0.2, 0.0])  # first / last tenth: 2 steps


def test_two_curves_with_one_label_are_refused(tmp_path):
    # the same method in two settings under the default label would merge into one table row
    groups = [{"setting": "tiny_smoke", "methods": ["pg_is"]}, {"setting": "tiny_smoke2", "methods": ["pg_is"]}]
    experiment = Experiment.model_validate({**BASE, "runs": groups})
    settings = {"tiny_smoke": SETTING, "tiny_smoke2": SETTING.model_copy(update={"id": "tiny_smoke2"})}
    with pytest.raises(ValueError, match=r"pg_is on tiny_smoke and pg_is on tiny_smoke2 are both labelled 'PG-IS'"):
        collect(experiment, settings, METHODS, tmp_path)
