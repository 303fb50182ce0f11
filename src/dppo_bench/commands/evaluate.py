"""``dppo-bench evaluate``: score steps of a run on one benchmark, in one process.

The run's record decides where each step's samples come from (:mod:`dppo_bench.eval.step_samples`): verl's online
validation dumps of a benchmark the run validated as it is specified today, else generation from the weights the
run saved (``--engine``: the HF backend on the CPU, or vLLM). Scoring and ``summary.json`` are the same for both
(:mod:`dppo_bench.eval.run_eval`). One job per (run, benchmark) rather than per step, because each process start
costs several seconds of imports: on the CPU miniature that would dominate the evaluation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.eval.run_eval import evaluate_run
from dppo_bench.io import atomic_write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help="score steps of a run (from verl's dumps or its saved weights)")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--steps", required=True, help="comma-separated steps, e.g. 0,50,100")
    p.add_argument("--data", type=Path, help="a normalized problems file (default: the benchmark's source)")
    p.add_argument(
        "--engine",
        choices=["hf", "vllm"],
        default="hf",
        help="what generates from saved weights: transformers on the CPU, or vLLM (GPUs, or its CPU build)",
    )
    p.add_argument("--seed", type=int, default=0, help="of generation and of the bootstrap confidence interval")
    p.add_argument("--batch-size", type=int, default=256, help="local runs: samples per generate call")
    p.add_argument("--threads", type=int, default=1, help="cores: torch threads to generate, math-verify workers")
    p.add_argument("--out", required=True, type=Path, help="summary.json")
    p.set_defaults(func=evaluate)


def evaluate(args: argparse.Namespace) -> int:
    steps = [int(x) for x in args.steps.split(",") if x]
    summary = evaluate_run(
        args.run_dir,
        args.benchmark,
        steps,
        args.data,
        engine=args.engine,
        seed=args.seed,
        threads=args.threads,
        batch_size=args.batch_size,
    )
    atomic_write_json(args.out, summary)  # the pipeline's marker of a finished evaluation: whole or absent
    return 0
