"""Read the run directories of an experiment into per-run metric series.

A run is used only if its run.json holds the training identity of the current recipe and setting
(:meth:`dppo_bench.rundir.RunDir.is_current`): results of an edited recipe are reported as stale, never mixed in.
Its evaluations are read separately: a benchmark's scores are those of the steps the setting evaluates it at, from
an evaluation made with the protocol its spec and setting give today (:mod:`dppo_bench.eval.protocol`); one whose
summary.json records another protocol is out of date (evaluated again by the pipeline, never retrained) and is not
shown meanwhile. A used run's records are verified first (:mod:`dppo_bench.verify`): aggregation refuses damage
instead of reading it. Absent or failed runs stay in the list with their status, so figures and tables show them as
missing instead of dropping them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.config import Experiment, MethodRecipe, Setting
from dppo_bench.config.runs import setting_benchmarks
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.errors import UserError
from dppo_bench.eval.protocol import setting_protocol_sha256
from dppo_bench.io import read_json
from dppo_bench.rundir import SCORES, SUMMARY, RunDir
from dppo_bench.verify import Damage, verify_run

USABLE = ("completed", "diverged")


@dataclass
class Run:
    setting: str
    method: str
    seed: int
    label: str
    dashed: bool
    status: str  # completed | diverged | running | failed | interrupted | missing | stale
    series: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> {step: value}
    damage: list[Damage] = field(default_factory=list)  # what verify finds in a usable run's records
    outdated_evaluations: list[str] = field(default_factory=list)  # benchmarks evaluated with another protocol

    @property
    def usable(self) -> bool:
        return self.status in USABLE


def eval_series(
    run: RunDir, setting: Setting, benchmarks: Mapping[str, BenchmarkSpec]
) -> tuple[dict[str, dict[int, float]], list[str]]:
    """``eval/<benchmark>/avg@<n>`` per step from the scores.json files of the steps the setting evaluates each
    benchmark at; and the benchmarks left out because their summary.json records another protocol."""
    out: dict[str, dict[int, float]] = {}
    outdated = []
    for benchmark in setting.eval.benchmarks:
        protocol = setting_protocol_sha256(setting, benchmarks[benchmark])
        if (run.eval_dir(benchmark) / SUMMARY).exists() and not run.evaluation_current(benchmark, protocol):
            outdated.append(benchmark)
            continue
        for step in setting.eval_steps(benchmark):
            scores = run.eval_step_dir(benchmark, step) / SCORES
            if scores.is_file():
                data = read_json(scores)
                out.setdefault(canonical.eval_metric(benchmark, data["n"]), {})[step] = data[f"avg@{data['n']}"]
    return out, outdated


def train_series(rows: list[dict]) -> dict[str, dict[int, float]]:
    """Every numeric metric of metrics.jsonl but the evaluations (verl's online numbers), which the scored
    evaluations give."""
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float) and not canonical.EVAL_METRIC.fullmatch(key):
                out.setdefault(key, {})[row["step"]] = float(value)
    return out


def read_run(
    root: Path,
    setting: Setting,
    recipe: MethodRecipe,
    seed: int,
    label: str,
    dashed: bool,
    benchmarks: Mapping[str, BenchmarkSpec],
) -> Run:
    run_dir = RunDir.of(setting.id, recipe.id, seed, root)
    run = Run(setting.id, recipe.id, seed, label, dashed, "missing")
    info = run_dir.read_run()
    if not info:
        return run
    if not run_dir.is_current(info, setting, recipe):
        run.status = "stale"
        return run
    run.status = info.get("status", "missing")
    if run.usable:
        run.damage = verify_run(run_dir, deep=False)  # every record read here, before it is read
    if run.usable and not run.damage:
        evaluations, run.outdated_evaluations = eval_series(run_dir, setting, benchmarks)
        run.series = {**train_series(run_dir.read_metrics()), **evaluations}
    return run


def collect(
    experiment: Experiment, settings: dict[str, Setting], methods: dict[str, MethodRecipe], root: Path
) -> list[Run]:
    runs, curves = [], {}
    benchmarks = setting_benchmarks(settings[group.setting] for group in experiment.runs)
    for group in experiment.runs:
        setting = settings[group.setting]
        seeds = experiment.seeds if experiment.seeds is not None else setting.seeds
        for method in group.methods:
            recipe = methods[method]
            label = group.label.format(display_name=recipe.display_name, method=method, setting=setting.id)
            other = curves.setdefault(label, (setting.id, method))
            if other != (setting.id, method):  # a table row and a curve are one label: two runs would merge
                raise UserError(
                    f"experiment {experiment.id}: {other[1]} on {other[0]} and {method} on {setting.id} are both "
                    f"labelled {label!r}; give one of the groups its own label"
                )
            for seed in seeds:
                runs.append(read_run(root, setting, recipe, seed, label, group.dashed, benchmarks))
    return runs
