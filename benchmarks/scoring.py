"""Scoring throughput: 1,920 AIME-style samples (Avg@32 over 60 problems), one process against the pool.

Prints verifications per second of (A) math-verify on every sample (answer_type "math": each prediction is parsed
and verified, the workload the pool exists for) in one process and in a GradingPool of W workers, side by side in
one run, with their ratio; and (B) the full AIME scoring as configured (answer_type "integer": plainly written integers
compare as integers, the rest goes to math-verify), end to end through score_samples, pool start-up included.

    python benchmarks/scoring.py [--workers 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from dppo_bench.eval.data import Problem, ProblemSet, problems_sha256
from dppo_bench.eval.grading import GradingPool, default_workers, grade
from dppo_bench.eval.samples import read_samples, write_samples
from dppo_bench.eval.score import score_samples
from dppo_bench.eval.spec import load_benchmark

N_PROBLEMS, N_SAMPLES = 60, 32
FILLER = (
    "Let $x$ be the number of ways. By the principle of inclusion-exclusion, "
    "$\\sum_{k=0}^{n} (-1)^k \\binom{n}{k} (n-k)^m$ counts the surjections, and substituting $n = 4$ gives "
    "$4^m - 4\\cdot 3^m + 6 \\cdot 2^m - 4$. We check the case $m = 5$: $1024 - 972 + 192 - 4 = 240$. "
)


def final_line(rng: random.Random, answer: int) -> str:
    """A final answer in the formats real models write, right or wrong."""
    shown = answer if rng.random() < 0.6 else rng.randrange(1000)
    return rng.choice(
        [
            f"The final answer is $\\boxed{{{shown}}}$.",
            f"Therefore the answer is \\boxed{{{shown}}}.",
            f"Answer: {shown}",
            f"**Answer:** ${shown}$",
            f"\\boxed{{{shown:03d}}}",
            f"\\boxed{{\\text{{{shown}}}}}",
            f"so $m+n = \\boxed{{{shown}}}$",
            f"\\boxed{{\\frac{{{2 * shown}}}{{2}}}}",
            f"\\boxed{{{shown}^{{1}}}}",
            f"\\boxed{{{shown}.0}}",
            f"First \\boxed{{{rng.randrange(1000)}}}, but correcting an error: \\boxed{{{shown}}}",
            "I could not finish the computation.",
        ]
    )


def make_samples(seed: int = 0) -> tuple[ProblemSet, dict[str, list[str]]]:
    rng = random.Random(seed)
    problems = [Problem(f"aime-style-{i:02d}", f"Problem {i}", str(rng.randrange(1000))) for i in range(N_PROBLEMS)]
    completions = {
        p.id: [FILLER * rng.randint(4, 16) + final_line(rng, int(p.answer)) for _ in range(N_SAMPLES)] for p in problems
    }
    return ProblemSet(problems, problems_sha256(problems), "benchmarks/scoring.py", "local", None), completions


def items_of(problems: ProblemSet, completions: dict[str, list[str]], answer_type: str):
    answers = problems.by_id()
    return [(c, answers[pid].answer, answer_type) for pid, cs in completions.items() for c in cs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, default_workers()))
    args = parser.parse_args()
    problems, completions = make_samples()
    items = items_of(problems, completions, "math")
    total = len(items)

    grade(*items[0])  # import math-verify before timing the single process (the pool's workers do it at start)
    t0 = time.perf_counter()
    single = [grade(*item) for item in items]
    single_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with GradingPool(args.workers) as pool:
        start_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        pooled = pool.grade_many(items)
        pool_s = time.perf_counter() - t1
    assert pooled == single, "the pool and the single process disagree"

    print(f"(A) math-verify on every sample, {total} samples ({N_PROBLEMS} problems x {N_SAMPLES}):")
    print(f"    one process      {total / single_s:7.0f} verifications/s  ({single_s:.2f} s)")
    print(
        f"    pool, {args.workers} workers  {total / pool_s:7.0f} verifications/s  ({pool_s:.2f} s; "
        f"start-up {start_s:.2f} s; {total / (pool_s + start_s):.0f}/s with it)"
    )
    print(f"    ratio            {single_s / pool_s:7.2f}x  ({single_s / (pool_s + start_s):.2f}x with start-up)")

    benchmark = load_benchmark("aime24").model_copy(update={"id": "aime_style"})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl.gz"
        header = {"benchmark": "aime_style", "data_sha256": problems.sha256, "model": {}, "sampling": {}}
        write_samples(path, header, completions)
        t0 = time.perf_counter()
        scores = score_samples(benchmark, problems, read_samples(path), workers=args.workers)
        full_s = time.perf_counter() - t0
    print("(B) AIME scoring as configured (answer_type integer), read + grade + metrics, pool start-up included:")
    print(f"    {full_s:.2f} s for {total} samples ({total / full_s:.0f}/s); avg@32 = {scores['avg@32']:.4f}")


if __name__ == "__main__":
    main()
