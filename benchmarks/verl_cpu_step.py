"""Seconds per training step of verl's own trainer on this CPU against the local backend on the same setting,
side by side in one run, and verl's start-up time.

  python benchmarks/verl_cpu_step.py [--method dppo_binary_tv] [--steps 8]

The setting is tiny_verl (verl 0.9.1's trainer with vLLM's CPU build) and its local twin tiny_verl_local (the same
task, base model, batch and schedule, trained in-process); both need what `snakemake --cores 2 verl_cpu` builds
first (the base model results/base/tiny_verl_local/model and the prepared data under results/data/). The local run
goes first, then verl's; "step" is each backend's own per-step wall time (perf/step_s: rollout, log-prob passes,
update), without validation. verl's start-up is the wall time of its run spent outside every step and validation
(Ray, TaskRunner, the actor engine, vLLM, the checkpoints), measured around `dppo-bench train`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dppo_bench.config import find_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.local.trainer import LocalRun, LocalTrainer
from dppo_bench.rundir import RunDir

BASE_MODEL = Path("results/base/tiny_verl_local/model")
TRAIN_JSONL = Path("results/data/tiny/tiny_sanity/train.jsonl")
DATA = (Path("results/data/verl/tiny_arith_train.parquet"), Path("results/data/verl/tiny_arith.parquet"))


def local_steps(method: str, steps: int, out: Path) -> list[float]:
    setting = find_setting("tiny_verl_local")
    setting = setting.model_copy(update={"train": setting.train.model_copy(update={"steps": steps})})
    run = LocalRun(resolve_run(setting, method, 0), BASE_MODEL, TRAIN_JSONL)
    LocalTrainer(run, RunDir(out).create(), progress=False).fit()
    return [r["perf/step_s"] for r in RunDir(out).read_metrics()]


def verl_run(method: str, out: Path) -> tuple[list[float], float, float]:
    """(seconds per step, seconds of validation, wall seconds of the whole run)."""
    cmd = [
        str(Path(sys.executable).with_name("dppo-bench")), "train", "--setting", "tiny_verl", "--method", method,
        "--seed", "0", "--out", str(out), "--train-data", str(DATA[0]), "--val-data", str(DATA[1]),
    ]  # fmt: skip
    start = time.perf_counter()
    with (out.parent / "verl.log").open("w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["perf/step_s"] for r in rows if "perf/step_s" in r]
    validation = sum(r.get("perf/validation_s", 0.0) for r in rows)
    return steps, validation, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="dppo_binary_tv")
    args = p.parse_args()
    for needed in (BASE_MODEL, TRAIN_JSONL, *DATA):
        if not needed.exists():
            sys.exit(f"{needed} is missing: run `snakemake --cores 2 verl_cpu` (or its data and base model) first")
    setting = find_setting("tiny_verl")
    steps, t = setting.train.steps, setting.train
    with tempfile.TemporaryDirectory() as tmp:
        local = local_steps(args.method, steps, Path(tmp) / "local" / "run")
        verl, validation, wall = verl_run(args.method, Path(tmp) / "verl")
    startup = wall - sum(verl) - validation
    print(
        f"{args.method}, {steps} steps of {t.prompts_per_step} prompts x {t.responses_per_prompt} responses; median "
        "seconds per step"
    )
    print(f"  local backend (tiny_verl_local)   {statistics.median(local):7.3f}")
    print(f"  verl + vLLM on CPU (tiny_verl)    {statistics.median(verl):7.3f}")
    print(f"verl / local = {statistics.median(verl) / statistics.median(local):.1f}x per step")
    print(
        f"verl's run: {wall:.0f} s wall, of which {sum(verl):.0f} s in steps, {validation:.0f} s in "
        f"{len(setting.eval_steps(setting.eval.online[0]))} validations and {startup:.0f} s start-up, checkpoints and "
        "shutdown"
    )


if __name__ == "__main__":
    main()
