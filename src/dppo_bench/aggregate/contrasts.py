"""An experiment's contrasts: one curve's statistic minus another's, seed by seed, with a 95% interval.

Seeds pair the runs (seed k of the run against seed k of the control: the same prompts in the same order). The
interval is Student's t over the paired differences, mean +- t(0.975, n - 1) * sd / sqrt(n), so with 3 seeds it is
the mean +- 2.48 standard deviations. The control's range (lowest and highest seed) is its band.
"""

from __future__ import annotations

import math
import statistics

import mpmath  # torch's own dependency (through sympy): Student's t quantile

from dppo_bench.aggregate.collect import Run
from dppo_bench.aggregate.series import series_stat
from dppo_bench.aggregate.tables import markdown_row
from dppo_bench.config.experiments import Contrast, Curve, Experiment

LEVEL = 0.95


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (p > 0.5)."""

    def cdf_gap(t):
        return 1 - 0.5 * mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True) - p

    return float(mpmath.findroot(cdf_gap, (0.0, 1000.0), solver="bisect"))


def per_seed(runs: list[Run], curve: Curve, contrast: Contrast, stat: str) -> dict[int, float]:
    """The statistic ``stat`` of each usable seed of ``curve``."""
    out = {}
    for run in runs:
        if run.usable and (run.setting, run.method) == (curve.setting, curve.method):
            value = series_stat(run.series.get(contrast.metric, {}), stat, contrast.smooth)
            if value is not None:
                out[run.seed] = value
    return out


def interval(values: list[float]) -> tuple[float, float] | None:
    """The 95% t-interval of the mean of ``values`` (None for fewer than two)."""
    n = len(values)
    if n < 2:
        return None
    half = t_quantile(0.5 + LEVEL / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    mean = statistics.fmean(values)
    return mean - half, mean + half


def contrast_rows(experiment: Experiment, runs: list[Run]) -> list[dict]:
    rows = []
    for contrast in experiment.contrasts:
        run = per_seed(runs, contrast.run, contrast, contrast.stat)
        control = per_seed(runs, contrast.control, contrast, contrast.control_stat or contrast.stat)
        seeds = sorted(run.keys() & control.keys())
        diffs = [run[s] - control[s] for s in seeds]
        rows.append(
            {
                "contrast": contrast.title,
                "seeds": seeds,
                "run": [run[s] for s in seeds],
                "control": [control[s] for s in seeds],
                "difference": diffs,
                "mean": statistics.fmean(diffs) if diffs else None,
                "interval": interval(diffs),
                "band": (min(control[s] for s in seeds), max(control[s] for s in seeds)) if seeds else None,
            }
        )
    return rows


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}" if value < 0 else f"{value:.3f}"


def _pair(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"[{_num(pair[0])}, {_num(pair[1])}]"


def _listing(values: list[float]) -> str:
    return ", ".join(_num(v) for v in values) or "-"


def contrast_cells(row: dict) -> list[str]:
    run_mean = statistics.fmean(row["run"]) if row["run"] else None
    return [
        row["contrast"],
        ",".join(map(str, row["seeds"])) or "-",
        f"{_num(run_mean)} ({_listing(row['run'])})",
        f"{_num(statistics.fmean(row['control']) if row['control'] else None)} ({_listing(row['control'])})",
        _pair(row["band"]),
        _num(row["mean"]),
        _pair(row["interval"]),
    ]


HEAD = ["contrast", "seeds", "run (per seed)", "control (per seed)", "control band", "difference", "95% interval"]


def to_markdown(rows: list[dict]) -> str:
    """The contrasts as a markdown section (empty when there are none)."""
    if not rows:
        return ""
    lines = [
        "",
        "## Contrasts (run minus control, paired by seed; t-interval over the seeds; band: the control's seed range)",
        "",
        markdown_row(HEAD),
        "|" + "---|" * len(HEAD),
    ]
    lines += [markdown_row(contrast_cells(row)) for row in rows]
    return "\n".join(lines) + "\n"
