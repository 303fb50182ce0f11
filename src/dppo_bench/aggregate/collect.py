"""Read the run directories of an experiment into per-run metric series.

A run is used only if its run.json matches the current recipe and setting (same hashes): results
of an edited recipe are reported as stale, never mixed in. A used run's records are verified first
(:mod:`dppo_bench.verify`): aggregation refuses damage instead of reading it. Absent or failed runs stay in the list
with their status, so figures and tables show them as missing instead of dropping them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dppo_bench.config import Experiment, MethodRecipe, Setting
from dppo_bench.io import read_json
from dppo_bench.rundir import RunDir
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

    @property
    def usable(self) -> bool:
        return self.status in USABLE


def eval_series(run_dir: Path) -> dict[str, dict[int, float]]:
    """``eval/<benchmark>/avg@<n>`` per step from the scores.json files of the run."""
    out: dict[str, dict[int, float]] = {}
    for scores in sorted(run_dir.glob("eval/*/step*/scores.json")):
        data = read_json(scores)
        step = int(scores.parent.name[len("step") :])
        n = data["n"]
        out.setdefault(f"eval/{data['benchmark']}/avg@{n}", {})[step] = data[f"avg@{n}"]
    return out


def train_series(rows: list[dict]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float):
                out.setdefault(key, {})[row["step"]] = float(value)
    return out


def read_run(root: Path, setting: Setting, recipe: MethodRecipe, seed: int, label: str, dashed: bool) -> Run:
    run_dir = RunDir(root / setting.id / recipe.id / f"seed{seed}")
    run = Run(setting.id, recipe.id, seed, label, dashed, "missing")
    info = run_dir.read_run()
    if not info:
        return run
    if info.get("recipe_sha256") != recipe.sha256() or info.get("setting_sha256") != setting.sha256():
        run.status = "stale"
        return run
    run.status = info.get("status", "missing")
    if run.usable:
        run.damage = verify_run(run_dir, deep=False)  # every record read here, before it is read
    if run.usable and not run.damage:
        # online evaluation in metrics.jsonl (verl) is overridden by offline scores of the same metric
        run.series = {**train_series(run_dir.read_metrics()), **eval_series(run_dir.path)}
    return run


def collect(
    experiment: Experiment, settings: dict[str, Setting], methods: dict[str, MethodRecipe], root: Path
) -> list[Run]:
    runs, curves = [], {}
    for group in experiment.runs:
        setting = settings[group.setting]
        seeds = experiment.seeds if experiment.seeds is not None else setting.seeds
        for method in group.methods:
            recipe = methods[method]
            label = group.label.format(display_name=recipe.display_name, method=method, setting=setting.id)
            other = curves.setdefault(label, (setting.id, method))
            if other != (setting.id, method):  # a table row and a curve are one label: two runs would merge
                raise ValueError(
                    f"experiment {experiment.id}: {other[1]} on {other[0]} and {method} on {setting.id} are both "
                    f"labelled {label!r}; give one of the groups its own label"
                )
            for seed in seeds:
                runs.append(read_run(root, setting, recipe, seed, label, group.dashed))
    return runs
