"""``experiments/<id>.yaml``: one paper item (figure or table) as data, checked against the settings it names."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from dppo_bench.canonical import EVAL_METRIC, STEP_METRICS
from dppo_bench.config.loader import entry_paths, load_model, locate, require
from dppo_bench.config.roots import EXPERIMENTS_DIR, METHODS_DIR, SETTINGS_DIR
from dppo_bench.config.settings import PositiveInt, Seed, Setting, find_setting
from dppo_bench.config.yaml_io import ConfigError, FieldError, Id, Strict

# final/peak/min/mean over the run's logged steps; start/end: the mean of the first/last tenth of them
TableStat = Literal["final", "peak", "min", "mean", "start", "end"]
TABLE_STATS = frozenset(get_args(TableStat))


class RunGroup(Strict):
    """Runs of several methods in one setting; ``label`` formats each curve's name."""

    setting: str
    methods: list[str] = Field(min_length=1)
    label: str = "{display_name}"  # fields: display_name, method, setting
    dashed: bool = False


class Panel(Strict):
    title: str
    metrics: list[str] = []  # one curve per run and metric (e.g. max and min of pi - mu)
    # or a panel of the mismatch probes (Fig. 2): pi/mu, |pi - mu| or the TV of every probed token against mu
    probe: Literal["ratio", "abs_diff", "tv"] | None = None
    yscale: Literal["linear", "log"] = "linear"
    smooth: Annotated[float, Field(ge=0.0)] = 0.0  # Gaussian sigma in logged points; the paper: 2, AIME: 0
    ylabel: str | None = None
    setting: str | None = None  # only the runs (or the probe) of this setting (side-by-side panels per setting)

    @model_validator(mode="after")
    def _check(self) -> Panel:
        if bool(self.metrics) == (self.probe is not None):
            raise FieldError("metrics", "a panel draws either metrics (curves over steps) or a probe, not both")
        return self


class Column(Strict):
    """A table column: one statistic of one metric over a run's steps."""

    title: str
    metric: str
    stat: TableStat
    smooth: Annotated[float, Field(ge=0)] = 0.0  # Gaussian sigma before the statistic (a figure panel's smoothing)


class Curve(Strict):
    """One curve of an experiment: a method in a setting (its seeds are the experiment's)."""

    setting: str
    method: str


class Contrast(Strict):
    """A difference between two curves' statistic, seed by seed (run minus control, paired by seed), with the 95%
    t-interval of its mean over the seeds: how a calibration's criterion is read (recipes/settings/tiny_tail.yaml).
    ``control_stat`` compares two statistics instead (a curve's end minus its own start: the same curve twice)."""

    title: str
    metric: str
    stat: TableStat
    run: Curve
    control: Curve
    control_stat: TableStat | None = None  # default: stat
    smooth: Annotated[float, Field(ge=0)] = 0.0


class MaskedTokenTable(Strict):
    """App. D: each run's most frequently masked tokens among A > 0 and A < 0 tokens, decoded."""

    top: PositiveInt = 50
    steps: list[Annotated[int, Field(ge=1)]] | None = None  # the steps whose counts are summed (null: all)


class Experiment(Strict):
    """``experiments/<id>.yaml``: one paper item (figure or table) as data."""

    id: Id
    title: str
    paper_item: str  # e.g. "Fig. 3", or "ours" for items the paper does not have
    description: str
    runs: list[RunGroup] = []
    probes: list[str] = []  # settings whose mismatch at equal parameters is probed (Fig. 2), without training
    seeds: list[Seed] | None = Field(None, min_length=1)  # default: each setting's seeds
    panels: list[Panel] = []
    columns: list[Column] = []
    contrasts: list[Contrast] = []  # differences between curves, with their intervals, below the table
    masked_tokens: MaskedTokenTable | None = None  # the table is the runs' masked tokens (App. D)
    panel_columns: PositiveInt = 4  # figure layout: panels per row

    @model_validator(mode="after")
    def _check(self) -> Experiment:
        if bool(self.runs) == bool(self.probes):
            raise FieldError("runs", "an experiment has training runs or mismatch probes (probes), one of the two")
        if not self.panels and not self.columns and self.masked_tokens is None and not self.probes:
            raise FieldError("panels", "an experiment needs panels (a figure) or columns (a table)")
        if self.seeds is not None and len(set(self.seeds)) < len(self.seeds):
            raise FieldError("seeds", f"a seed is listed twice: {self.seeds}")
        listed: dict[tuple[str, str], str] = {}
        for i, group in enumerate(self.runs):
            for j, method in enumerate(group.methods):
                where = f"runs.{i}.methods.{j}"
                if (group.setting, method) in listed:
                    first = listed[group.setting, method]
                    raise FieldError(where, f"method {method!r} of setting {group.setting!r} is listed at {first} too")
                listed[group.setting, method] = where
        for i, panel in enumerate(self.panels):
            if (panel.probe is not None) != bool(self.probes):
                raise FieldError(f"panels.{i}", "probe panels belong to probe experiments, metric panels to runs")
        if self.masked_tokens is not None and self.columns:
            raise FieldError("columns", "the table of a masked_tokens experiment is the token table")
        for i, contrast in enumerate(self.contrasts):
            for side in ("run", "control"):
                curve = getattr(contrast, side)
                if (curve.setting, curve.method) not in listed:
                    raise FieldError(
                        f"contrasts.{i}.{side}", f"method {curve.method!r} of setting {curve.setting!r} is not in runs"
                    )
        return self

    def run_keys(self, seeds_of: Callable[[str], list[int]]) -> list[tuple[str, str, int]]:
        """(setting, method, seed) of every run, in the order the yaml lists them."""
        keys = []
        for group in self.runs:
            for method in group.methods:
                for seed in self.seeds if self.seeds is not None else seeds_of(group.setting):
                    keys.append((group.setting, method, seed))
        return keys


def load_experiment(path: Path, settings: Mapping[str, Setting] | None = None) -> Experiment:
    """``path``'s experiment, checked against the recipes it names; ``settings`` are the settings already loaded
    (:func:`dppo_bench.start_checks.load_suite`), otherwise each one named is read."""
    experiment = load_model(Experiment, path)
    for i, setting in enumerate(experiment.probes):
        require("setting", setting, SETTINGS_DIR, path, f"probes.{i}")
    for i, group in enumerate(experiment.runs):
        require("setting", group.setting, SETTINGS_DIR, path, f"runs.{i}.setting")
        for j, method in enumerate(group.methods):
            require("method", method, METHODS_DIR, path, f"runs.{i}.methods.{j}")
    named = dict.fromkeys(g.setting for g in experiment.runs)
    check_metrics(experiment, path, {s: settings[s] if settings else find_setting(s) for s in named})
    return experiment


def metric_fields(experiment: Experiment) -> list[tuple[str, str, str | None]]:
    """(field, metric, the setting a panel is limited to) of every metric a panel draws or a column reports."""
    fields = [
        (f"panels.{i}.metrics.{j}", metric, panel.setting)
        for i, panel in enumerate(experiment.panels)
        for j, metric in enumerate(panel.metrics)
    ]
    fields += [(f"columns.{i}.metric", column.metric, None) for i, column in enumerate(experiment.columns)]
    return fields + [(f"contrasts.{i}.metric", c.metric, c.run.setting) for i, c in enumerate(experiment.contrasts)]


def check_metrics(experiment: Experiment, path: Path, settings: dict[str, Setting]) -> None:
    """Every metric a panel draws or a column reports is one the runs write: a canonical name, or the score of a
    benchmark its settings evaluate. Otherwise the curve or column would come out empty, silently."""
    for i, panel in enumerate(experiment.panels):
        if experiment.probes and panel.setting is not None and panel.setting not in experiment.probes:
            probed = ", ".join(experiment.probes)
            message = f"setting {panel.setting!r} is not probed in this experiment; it probes {probed}"
            raise ConfigError(path, f"panels.{i}.setting", message)
        if not experiment.probes and panel.setting is not None and panel.setting not in settings:
            message = f"setting {panel.setting!r} has no runs in this experiment; it runs {', '.join(settings)}"
            raise ConfigError(path, f"panels.{i}.setting", message)
    for field, metric, only in metric_fields(experiment):
        _check_metric(metric, {only: settings[only]} if only is not None else settings, path, field)


def _check_metric(metric: str, settings: dict[str, Setting], path: Path, field: str) -> None:
    scored = EVAL_METRIC.fullmatch(metric)
    if scored is None:
        if metric not in STEP_METRICS:
            close = difflib.get_close_matches(metric, sorted(STEP_METRICS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else " (dppo_bench.canonical lists the names)"
            raise ConfigError(path, field, f"{metric!r} is not a metric the runs write{hint}")
        return
    benchmark = scored["benchmark"]
    if not any(benchmark in s.eval.benchmarks for s in settings.values()):
        evaluated = "; ".join(f"{s_id}: {', '.join(s.eval.benchmarks)}" for s_id, s in settings.items())
        raise ConfigError(path, field, f"no setting of it evaluates {benchmark!r} (eval.online/offline of {evaluated})")


def experiment_paths(experiments_dir: Path = EXPERIMENTS_DIR) -> list[Path]:
    return entry_paths(experiments_dir)


def find_experiment(experiment_id: str, experiments_dir: Path = EXPERIMENTS_DIR) -> Experiment:
    return load_experiment(locate("experiment", experiment_id, experiments_dir))


def load_experiments(experiments_dir: Path = EXPERIMENTS_DIR) -> dict[str, Experiment]:
    return {p.stem: load_experiment(p) for p in experiment_paths(experiments_dir)}
