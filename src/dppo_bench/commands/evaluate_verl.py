"""``dppo-bench evaluate-verl``: re-score a verl run's online validation dumps on one benchmark.

The verl-backend counterpart of ``dppo-bench evaluate``: the same files per step (``eval/<benchmark>/step<N>/``
``samples.jsonl.gz`` and ``scores.json``) and the same ``summary.json``, from the generations verl dumped during
training instead of new ones.

verl dumps every validation's generations to ``RUN_DIR/validation/<step>.jsonl`` (``trainer.validation_data_dir``,
all online benchmarks in one file). For each validated step the benchmark's rows of that dump become the step's
samples file (:func:`dppo_bench.eval.verl_dump.convert_dump`) and are scored as ``dppo-bench score`` scores them, so
the aggregation reads verl runs exactly as local ones, with the same extraction and verifier as every offline score.
A step already scored from the same dump is not scored again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate-verl", help="re-score a verl run's online validation dumps (our scorer)")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--steps", required=True, help="comma-separated validated steps, e.g. 0,100,200")
    p.add_argument("--data", required=True, type=Path, help="the benchmark's prepared <id>.problems.jsonl")
    p.add_argument("--workers", type=int, default=1, help="math-verify worker processes")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap confidence interval")
    p.add_argument("--out", required=True, type=Path, help="summary.json")
    p.set_defaults(func=evaluate_verl)


def evaluate_verl(args: argparse.Namespace) -> int:
    steps = [int(x) for x in args.steps.split(",") if x]
    summary = rescore_run(args.run_dir, args.benchmark, steps, args.data, workers=args.workers, seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _sampling(spec, run_info: dict) -> dict:
    """What verl validated with: the benchmark's n, temperature and top_p, the setting's max response length."""
    return {
        "n": spec.n,
        "temperature": spec.sampling.temperature,
        "top_p": spec.sampling.top_p,
        "max_tokens": run_info["setting_config"]["train"]["max_response_length"],
    }


def _scored_from(scores_path: Path, samples_path: Path, dump_sha256: str) -> bool:
    """Whether scores.json exists and was computed from samples converted from this very dump."""
    if not (scores_path.is_file() and samples_path.is_file()):
        return False
    from dppo_bench.eval.samples import read_samples

    source = read_samples(samples_path).header.get("source", {})
    scores = json.loads(scores_path.read_text())
    samples_sha = hashlib.sha256(samples_path.read_bytes()).hexdigest()
    return source.get("sha256") == dump_sha256 and scores.get("samples", {}).get("sha256") == samples_sha


def rescore_run(run_path: Path, benchmark: str, steps: list[int], data: Path, *, workers: int = 1, seed: int = 0):
    """Write eval/<benchmark>/step<N>/{samples.jsonl.gz,scores.json} for each of ``steps``; returns the summary."""
    from dppo_bench.eval.data import read_normalized
    from dppo_bench.eval.grading import GradingPool
    from dppo_bench.eval.samples import read_samples
    from dppo_bench.eval.score import score_samples, write_scores
    from dppo_bench.eval.spec import load_benchmark
    from dppo_bench.eval.verl_dump import convert_dump
    from dppo_bench.rundir import RunDir

    spec = load_benchmark(benchmark)
    problems = read_normalized(data)
    run = RunDir(run_path)
    info = run.read_run()
    if not info:
        raise FileNotFoundError(f"{run.run_json}: no run record (train the run first)")
    last_step = info.get("last_step")
    run_name = f"{info['setting']}/{info['method']}/seed{info['seed']}"
    summary = {"benchmark": spec.id, "n": spec.n, "metric": f"avg@{spec.n}", "steps": {}, "not_reached": []}
    with GradingPool(workers) as pool:
        for step in steps:
            dump = run.path / "validation" / f"{step}.jsonl"
            if not dump.is_file():
                if last_step is not None and step > last_step:  # the run ended before it (failed or diverged)
                    summary["not_reached"].append(step)
                    continue
                raise FileNotFoundError(f"{dump}: no validation dump for step {step} of this run")
            out = run.path / "eval" / spec.id / f"step{step}"
            samples, scores_path = out / "samples.jsonl.gz", out / "scores.json"
            dump_sha = hashlib.sha256(dump.read_bytes()).hexdigest()
            if not _scored_from(scores_path, samples, dump_sha):
                out.mkdir(parents=True, exist_ok=True)
                tmp = samples.with_name("samples.tmp.jsonl.gz")
                tmp.unlink(missing_ok=True)
                model = f"verl run {run_name} step {step}"
                convert_dump(
                    dump,
                    problems,
                    tmp,
                    benchmark=spec.id,
                    model=model,
                    sampling=_sampling(spec, info),
                    template=spec.prompt,
                )
                os.replace(tmp, samples)
                write_scores(score_samples(spec, problems, read_samples(samples), pool=pool, seed=seed), scores_path)
            scores = json.loads(scores_path.read_text())
            summary["steps"][str(step)] = scores[f"avg@{spec.n}"]
            print(f"{run.path} step {step}: {spec.id} avg@{spec.n} = {scores[f'avg@{spec.n}']:.4f}", flush=True)
    return summary
