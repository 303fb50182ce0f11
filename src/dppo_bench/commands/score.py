"""``dppo-bench score``: grade a samples file with math-verify and write scores.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.samples import read_samples
from dppo_bench.eval.score import score_samples, write_scores
from dppo_bench.eval.verifier import DEFAULT_TIMEOUT_S
from dppo_bench.problem_sets.pins import problems_for


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "score", help="grade samples.jsonl[.gz] (ours, or headerless rows of any tool) -> scores.json (avg@n, pass@k)"
    )
    p.add_argument("--benchmark", required=True)
    p.add_argument("--samples", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="scores.json")
    p.add_argument("--data", type=Path, help="a normalized problems file (default: the benchmark's source)")
    p.add_argument("--n", type=int, help="samples per problem (default: the benchmark's n)")
    p.add_argument(
        "--workers", type=int, help="grading processes (default: chosen from the work and the free cores; 1 = this one)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"math-verify's CPU-time budget per (prediction, answer) pair, s (default {DEFAULT_TIMEOUT_S}; a pair "
        "that runs out is retried once, alone, with a larger budget)",
    )
    p.add_argument(
        "--prompt", help="the prompt template (eval/prompts) a file without a header was made with (default: unknown)"
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.set_defaults(func=score)


def score(args: argparse.Namespace) -> int:
    spec = load_benchmark(args.benchmark)
    problems = problems_for(spec, args.data)
    samples = read_samples(args.samples)
    scores = score_samples(
        spec,
        problems,
        samples,
        n=args.n,
        workers=args.workers,
        timeout_s=args.timeout,
        seed=args.seed,
        prompt=args.prompt,
    )
    write_scores(scores, args.out)
    n, ci = scores["n"], scores["ci"]
    print(
        f"{spec.id}: avg@{n} = {scores[f'avg@{n}']:.4f} (95% CI {ci['low']:.4f}-{ci['high']:.4f}), "
        f"pass@{n} = {scores['pass@k'][str(n)]:.4f}, {len(scores['problems'])} problems, "
        f"{scores['timeouts']} timeouts, {scores['no_answer']} without an answer -> {args.out}"
    )
    if not samples.has_header:
        unknown = "model and sampling" if args.prompt else "model, sampling and prompt"
        print(f"  {args.samples} has no header: its {unknown} are recorded as unknown")
    if samples.invalid_utf8_lines:
        print(f"  {samples.invalid_utf8_lines} lines of {args.samples} had invalid UTF-8 (graded wrong)")
    return 0
