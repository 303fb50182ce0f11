"""``dppo-bench plan <experiment>``: each run's cluster shape and budget, the total, and what exists on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config import find_experiment, find_method, find_setting
from dppo_bench.plan import on_gpus, plan


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help="what an experiment costs (GPU-hours, CPU-minutes) and what is done")
    p.add_argument("experiment")
    p.add_argument("--runs", type=Path, default=Path("results/runs"), help="root of the run directories")
    p.add_argument("--probes", type=Path, default=Path("results/probes"), help="root of the mismatch probe records")
    p.set_defaults(func=show_plan)


def _state(run) -> str:
    state = run.state
    if state.status == "partial":
        return "partial (no step yet)" if state.last_step is None else f"partial (last step {state.last_step})"
    if state.to_evaluate:
        return f"{state.status}; to evaluate: {', '.join(state.to_evaluate)}"
    return state.status


def render(experiment, runs) -> str:
    lines = [
        f"{experiment.id}: {experiment.title} [{experiment.paper_item}]",
        "",
        "| setting | method | seed | shape (nodes x GPUs x limit) | GPU-hours | CPU-minutes | on disk |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        gpu = f"{run.gpu_hours:,.0f}" if on_gpus(run.setting) else "-"
        if run.setting.backend == "local":
            cpu = "unmeasured" if run.cpu_minutes is None else f"{run.cpu_minutes:.1f}"
        else:
            cpu = "-" if on_gpus(run.setting) else f"limit {run.limit_min} (wall)"
        lines.append(f"| {run.setting.id} | {run.method} | {run.seed} | {run.shape} | {gpu} | {cpu} | {_state(run)} |")
    total = sum(r.gpu_hours for r in runs)
    left = sum(r.gpu_hours for r in runs if r.state.status != "finished")
    finished = sum(r.state.status == "finished" for r in runs)
    lines += ["", f"runs: {len(runs)} ({finished} finished)"]
    if any(on_gpus(r.setting) for r in runs):
        lines.append(f"GPU-hours: {total:,.0f} in all, at most {left:,.0f} for the runs not finished")
    verl_cpu = [r for r in runs if r.setting.backend == "verl" and not on_gpus(r.setting)]
    if verl_cpu:
        limit = sum(r.limit_min for r in verl_cpu)
        lines.append(f"verl on the CPU: {len(verl_cpu)} job(s), at most {limit} wall-clock minutes one after another")
    local = [r for r in runs if r.setting.backend == "local"]
    if local:
        measured = [r.cpu_minutes for r in local if r.cpu_minutes is not None]
        unmeasured = len(local) - len(measured)
        note = f"; {unmeasured} run(s) of settings with no measured step yet" if unmeasured else ""
        lines.append(f"CPU-minutes: {sum(measured):.1f} for the runs of measured settings{note}")
    return "\n".join(lines) + "\n"


def show_plan(args: argparse.Namespace) -> int:
    experiment = find_experiment(args.experiment)
    settings = {s: find_setting(s) for s in [*(g.setting for g in experiment.runs), *experiment.probes]}
    methods = {m: find_method(m) for g in experiment.runs for m in g.methods}
    print(render(experiment, plan(experiment, settings, methods, args.runs, args.probes)), end="")
    return 0
