"""``dppo-bench evaluate``: score every saved step of a run on one benchmark, in one process.

For each step it writes ``<run>/eval/<benchmark>/step<N>/samples.jsonl.gz`` and ``scores.json`` (the run
directory contract) and finally ``summary.json``. One job per (run, benchmark) rather than per step,
because each process start costs several seconds of imports: on the CPU miniature that would
dominate the evaluation. Steps already scored are skipped, so a rerun resumes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help="generate and score every saved step of a run (HF backend)")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--steps", required=True, help="comma-separated steps, e.g. 0,50,100")
    p.add_argument("--data", type=Path, help="a normalized problems file (default: the benchmark's source)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=256, help="samples per generate call")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, type=Path, help="summary.json")
    p.set_defaults(func=evaluate)


def evaluate(args: argparse.Namespace) -> int:
    import torch

    from dppo_bench.eval.data import problems_for
    from dppo_bench.eval.generate import HFBackend, SamplingConfig, resolve_model, run_generation
    from dppo_bench.eval.grading import GradingPool
    from dppo_bench.eval.prompts import load_prompt
    from dppo_bench.eval.samples import read_samples
    from dppo_bench.eval.score import score_samples, write_scores
    from dppo_bench.eval.spec import load_benchmark
    from dppo_bench.io import read_json, verify_checksums
    from dppo_bench.rundir import RunDir
    from dppo_bench.runlock import run_lock

    torch.set_num_threads(args.threads)
    spec = load_benchmark(args.benchmark)
    problems = problems_for(spec, args.data)
    template = load_prompt(spec.prompt)
    s = spec.sampling
    sampling = SamplingConfig(
        n=spec.n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=args.seed
    )
    run = RunDir(args.run_dir)
    last_step = run.read_run().get("last_step")
    summary = {"benchmark": spec.id, "n": spec.n, "metric": f"avg@{spec.n}", "steps": {}, "not_reached": []}
    with run_lock(args.run_dir / "eval" / spec.id, "evaluate.lock"), GradingPool(1) as pool:
        for step in [int(x) for x in args.steps.split(",")]:
            out = args.run_dir / "eval" / spec.id / f"step{step}"
            scores_path = out / "scores.json"
            if last_step is not None and step > last_step:  # the run ended early (diverged): nothing to score
                summary["not_reached"].append(step)
                continue
            if not scores_path.exists():
                checkpoint = run.checkpoint_dir(step)
                if not checkpoint.is_dir():
                    raise FileNotFoundError(f"{checkpoint}: no checkpoint for step {step} of this run")
                verify_checksums(checkpoint)
                model = resolve_model(str(checkpoint))
                backend = HFBackend(model.path, sampling, device="cpu", batch_size=args.batch_size)
                samples = out / "samples.jsonl.gz"
                run_generation(
                    backend,
                    model,
                    problems.problems,
                    template,
                    sampling,
                    samples,
                    benchmark=spec.id,
                    data_sha256=problems.sha256,
                )
                write_scores(
                    score_samples(spec, problems, read_samples(samples), pool=pool, seed=args.seed), scores_path
                )
            scores = read_json(scores_path)
            if scores.get("sampling") != asdict(sampling):
                raise ValueError(
                    f"{scores_path}: scored with sampling {scores.get('sampling')}, but {spec.id} now asks for "
                    f"{asdict(sampling)}; move {out.parent} away to evaluate again"
                )
            summary["steps"][str(step)] = scores[f"avg@{spec.n}"]
            print(f"{args.run_dir} step {step}: {spec.id} avg@{spec.n} = {scores[f'avg@{spec.n}']:.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0
