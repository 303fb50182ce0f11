"""What an experiment costs before it runs, and what of it already exists on disk.

A verl run on GPUs is budgeted by its setting's SLURM allocation: nodes x GPUs per node x the run-time limit, the
most the run can hold (a run that finishes early costs less; one that hits the limit resumes in a new job). A run
on the CPU costs no GPU-hours: a local run's cost is measured, not declared (the mean ``perf/step_s`` of the
setting's runs on disk x steps x torch threads); a verl run on the CPU (verl.device: cpu) is bounded by its
run-time limit, wall-clock on the machine it runs on.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.config import Experiment, MethodRecipe, Setting
from dppo_bench.config.runs import setting_benchmarks
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.eval.protocol import setting_protocol_sha256
from dppo_bench.probe.tokens import read_tokens
from dppo_bench.rundir import RunDir, probe_record

PROBE = "(mismatch probe)"

FINISHED = ("completed", "diverged")
PROBE_RUNTIME_MIN = 60  # a mismatch probe's limit (one rollout batch and one forward, model loading included)


def on_gpus(setting: Setting) -> bool:
    """Whether the setting's jobs need GPUs: verl settings, except those on the CPU (verl.device: cpu)."""
    return setting.backend == "verl" and setting.verl.device != "cpu"


def gpu_hours(setting: Setting, runtime_min: int | None = None) -> float:
    """The GPU-hours one verl job of ``setting`` may hold: nodes x GPUs per node x run-time limit (the setting's
    training limit unless ``runtime_min`` is given)."""
    v = setting.verl
    return v.nodes * v.gpus_per_node * (runtime_min or v.runtime_min) / 60


@dataclass(frozen=True)
class RunState:
    status: str  # finished | partial | stale | missing
    last_step: int | None = None  # the last recorded step of a partial or finished run
    step_s: float | None = None  # its mean measured step time (local runs)
    to_evaluate: tuple[str, ...] = ()  # a finished run's benchmarks not (or no longer) evaluated as specified


def run_state(
    run_dir: RunDir, setting: Setting, recipe: MethodRecipe, benchmarks: Mapping[str, BenchmarkSpec]
) -> RunState:
    """What is on disk for one run: stale if what it computes changed since it ran (its training identity, as
    aggregation judges); a finished run also lists the evaluations still to make, which need no training."""
    info = run_dir.read_run()
    if not info:
        return RunState("missing")
    if not run_dir.is_current(info, setting, recipe):
        return RunState("stale")
    rows = run_dir.read_metrics()
    last = max((r["step"] for r in rows), default=None)
    times = [r[canonical.STEP_SECONDS] for r in rows if isinstance(r.get(canonical.STEP_SECONDS), int | float)]
    step_s = statistics.fmean(times) if times else None
    if not (info.get("status") in FINISHED and run_dir.done.exists()):
        return RunState("partial", last, step_s)
    due = tuple(
        b
        for b in setting.eval.benchmarks
        if not run_dir.evaluation_current(b, setting_protocol_sha256(setting, benchmarks[b]))
    )
    return RunState("finished", last, step_s, due)


def probe_state(path: Path, setting: Setting) -> RunState:
    """A mismatch probe record: finished, stale (made for another version of the setting) or missing."""
    if not path.is_file():
        return RunState("missing")

    return RunState("finished" if read_tokens(path).probed_with(setting) else "stale")


@dataclass(frozen=True)
class PlannedRun:
    setting: Setting
    method: str  # "(mismatch probe)" for Fig. 2's probe of the setting
    seed: int
    state: RunState
    cpu_minutes: float | None = None  # local runs: measured step cost x steps x threads, when any run was measured
    runtime_min: int | None = None  # a verl job's limit when it is not the setting's training limit (probes)

    @property
    def gpu_hours(self) -> float:
        return gpu_hours(self.setting, self.runtime_min) if on_gpus(self.setting) else 0.0

    @property
    def limit_min(self) -> int | None:
        """A verl job's run-time limit (None for a local run)."""
        return (self.runtime_min or self.setting.verl.runtime_min) if self.setting.backend == "verl" else None

    @property
    def shape(self) -> str:
        if self.setting.backend == "local":
            return f"local, {self.setting.local.threads} thread(s)"
        v = self.setting.verl
        devices = f"{v.gpus_per_node} GPUs" if on_gpus(self.setting) else "CPU"
        return f"{v.nodes} x {devices} x {self.limit_min / 60:g} h"


def plan(
    experiment: Experiment,
    settings: dict[str, Setting],
    methods: dict[str, MethodRecipe],
    root: Path,
    probes_root: Path = Path("results/probes"),
) -> list[PlannedRun]:
    """Every run (or probe) of ``experiment`` with its cost and what exists of it under ``root`` (results/runs)."""
    probes = [
        PlannedRun(
            settings[s], PROBE, 0, probe_state(probe_record(s, probes_root), settings[s]), None, PROBE_RUNTIME_MIN
        )
        for s in experiment.probes
    ]
    keys = experiment.run_keys(lambda s: settings[s].seeds)
    benchmarks = setting_benchmarks(settings[s] for s, _, _ in keys)
    states = {key: run_state(RunDir.of(*key, root), settings[key[0]], methods[key[1]], benchmarks) for key in keys}
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
    return probes + out


def experiment_gpu_hours(experiment: Experiment, settings: dict[str, Setting]) -> float:
    """The GPU-hours of all the experiment's runs and probes on GPUs (0 for an experiment on the CPU)."""
    keys = experiment.run_keys(lambda s: settings[s].seeds)
    runs = sum(gpu_hours(settings[s]) for s, _, _ in keys if on_gpus(settings[s]))
    return runs + sum(gpu_hours(settings[s], PROBE_RUNTIME_MIN) for s in experiment.probes if on_gpus(settings[s]))
