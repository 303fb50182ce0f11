"""What an experiment costs before it runs, and what of it already exists on disk.

A verl run's budget is its setting's SLURM allocation: nodes x GPUs per node x the run-time limit, the most the
run can hold (a run that finishes early costs less; one that hits the limit resumes in a new job). A local run's
cost is measured, not declared: the mean ``perf/step_s`` of the setting's runs on disk x steps x torch threads.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.config import Experiment, MethodRecipe, Setting
from dppo_bench.rundir import RunDir

FINISHED = ("completed", "diverged")


def gpu_hours(setting: Setting) -> float:
    """The GPU-hours one verl run of ``setting`` may hold: nodes x GPUs per node x run-time limit."""
    v = setting.verl
    return v.nodes * v.gpus_per_node * v.runtime_min / 60


@dataclass(frozen=True)
class RunState:
    status: str  # finished | partial | stale | missing
    last_step: int | None = None  # the last recorded step of a partial or finished run
    step_s: float | None = None  # its mean measured step time (local runs)


def run_state(run_dir: RunDir, setting: Setting, recipe: MethodRecipe) -> RunState:
    """What is on disk for one run: stale if its recipe or setting changed since it ran (as aggregation judges)."""
    info = run_dir.read_run()
    if not info:
        return RunState("missing")
    if info.get("recipe_sha256") != recipe.sha256() or info.get("setting_sha256") != setting.sha256():
        return RunState("stale")
    rows = run_dir.read_metrics()
    last = max((r["step"] for r in rows), default=None)
    times = [r[canonical.STEP_SECONDS] for r in rows if isinstance(r.get(canonical.STEP_SECONDS), int | float)]
    step_s = statistics.fmean(times) if times else None
    finished = info.get("status") in FINISHED and run_dir.done.exists()
    return RunState("finished" if finished else "partial", last, step_s)


@dataclass(frozen=True)
class PlannedRun:
    setting: Setting
    method: str
    seed: int
    state: RunState
    cpu_minutes: float | None = None  # local runs: measured step cost x steps x threads, when any run was measured

    @property
    def gpu_hours(self) -> float:
        return gpu_hours(self.setting) if self.setting.backend == "verl" else 0.0

    @property
    def shape(self) -> str:
        if self.setting.backend == "local":
            return f"local, {self.setting.local.threads} thread(s)"
        v = self.setting.verl
        return f"{v.nodes} x {v.gpus_per_node} GPUs x {v.runtime_min / 60:g} h"


def plan(
    experiment: Experiment, settings: dict[str, Setting], methods: dict[str, MethodRecipe], root: Path
) -> list[PlannedRun]:
    """Every run of ``experiment`` with its cost and what exists of it under ``root`` (results/runs)."""
    keys = experiment.run_keys(lambda s: settings[s].seeds)
    states = {
        key: run_state(RunDir(root / key[0] / key[1] / f"seed{key[2]}"), settings[key[0]], methods[key[1]])
        for key in keys
    }
    step_cost: dict[str, list[float]] = {}  # measured step seconds per local setting, over its runs here
    for (setting, _, _), state in states.items():
        if state.step_s is not None:
            step_cost.setdefault(setting, []).append(state.step_s)
    out = []
    for setting_id, method, seed in keys:
        setting = settings[setting_id]
        cpu = None
        if setting.backend == "local" and setting_id in step_cost:
            cpu = statistics.fmean(step_cost[setting_id]) * setting.train.steps * setting.local.threads / 60
        out.append(PlannedRun(setting, method, seed, states[(setting_id, method, seed)], cpu))
    return out


def experiment_gpu_hours(experiment: Experiment, settings: dict[str, Setting]) -> float:
    """The GPU-hours of all the experiment's verl runs (0 for a local experiment)."""
    keys = experiment.run_keys(lambda s: settings[s].seeds)
    return sum(gpu_hours(settings[s]) for s, _, _ in keys if settings[s].backend == "verl")
