"""Scoring throughput: 1,920 AIME-style samples (Avg@32 over 60 problems), one process against the pool.

Prints verifications per second of (A) math-verify on every sample (answer_type "math": each prediction is parsed
and verified, the workload the pool exists for) in one process and in a GradingPool of W workers, side by side in
one run, with their ratio; and (B) the full AIME scoring as configured (answer_type "integer": plainly written
integers compare as integers, the rest goes to math-verify) through score_samples, pool start-up included.

    python benchmarks/scoring.py [--workers 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from pathlib import Path

from dppo_bench.eval.data import Problem, ProblemSet, problems_sha256
from dppo_bench.eval.grading import GradingPool, default_workers, grade_many
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


def make_samples(seed: int) -> tuple[ProblemSet, dict[str, list[str]]]:
    rng = random.Random(seed)
    problems = [Problem(f"aime-style-{i:02d}", f"Problem {i}", str(rng.randrange(1000))) for i in range(N_PROBLEMS)]
    completions = {
        p.id: [FILLER * rng.randint(4, 16) + final_line(rng, int(p.answer)) for _ in range(N_SAMPLES)] for p in problems
    }
    return ProblemSet(problems, problems_sha256(problems), "benchmarks/scoring.py", "local", None), completions


def items_of(problems: ProblemSet, completions: dict[str, list[str]], answer_type: str):
    answers = problems.by_id()
    return [(c, answers[pid].answer, answer_type) for pid, cs in completions.items() for c in cs]


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) of this process, all its threads, and of the given child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine (all processes), from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, default_workers()))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds on fresh samples; best reported")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    # (B) first, in a fresh process: what `dppo-bench score` costs, pool start-up and cold caches included.
    problems, completions = make_samples(seed=0)
    benchmark = load_benchmark("aime24").model_copy(update={"id": "aime_style"})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl.gz"
        write_samples(path, {"benchmark": "aime_style", "data_sha256": problems.sha256}, completions)
        t0 = time.perf_counter()
        scores = score_samples(benchmark, problems, read_samples(path), workers=args.workers)
        full_s = time.perf_counter() - t0

    # (A) math-verify on every sample: one process against the pool, interleaved on the same fresh samples
    # each round (each side sees them for the first time; identical pairs are verified once by both).
    grade_many(items_of(problems, completions, "math"))  # warm the single process on round-0 samples
    t0 = time.perf_counter()
    with GradingPool(args.workers) as pool:
        start_s = time.perf_counter() - t0
        pool.grade_many(items_of(problems, completions, "math"))  # and the workers on the same samples
        single_s = pool_s = single_cpu = pool_cpu = float("inf")
        others = []  # CPUs used by other processes during each pool run
        for r in range(1, args.rounds + 1):
            items = items_of(*make_samples(seed=r), "math")
            pids = [w.proc.pid for w in pool._pool]
            c0, t0 = cpu_seconds([]), time.perf_counter()
            single = grade_many(items)
            single_s, single_cpu = min(single_s, time.perf_counter() - t0), min(single_cpu, cpu_seconds([]) - c0)
            c0, m0, t0 = cpu_seconds(pids), machine_cpu_seconds(), time.perf_counter()
            pooled = pool.grade_many(items)
            wall, used = time.perf_counter() - t0, cpu_seconds(pids) - c0
            others.append((machine_cpu_seconds() - m0 - used) / wall)
            pool_s, pool_cpu = min(pool_s, wall), min(pool_cpu, used)
            assert pooled == single, "the pool and the single process disagree"
    total = len(items)
    load_after = os.getloadavg()[0]

    print(
        f"(A) math-verify on every sample: {total} samples ({N_PROBLEMS} problems x {N_SAMPLES}), best of {args.rounds}"
    )
    print(f"    one process      {total / single_s:7.0f} verifications/s  ({single_s:.2f} s)")
    print(f"    pool, {args.workers} workers  {total / pool_s:7.0f} verifications/s  ({pool_s:.2f} s)")
    print(f"    ratio            {single_s / pool_s:7.2f}x  (pool start-up, paid once per command: {start_s:.2f} s)")
    print(f"    CPU seconds      {single_cpu:.2f} in one process, {pool_cpu:.2f} in the pool (parent and workers)")
    print("(B) full AIME-style scoring as configured (answer_type integer): read + grade + metrics + pool start-up")
    print(f"    {full_s:.2f} s for {total} samples ({total / full_s:.0f}/s); avg@32 = {scores['avg@32']:.4f}")
    print(f"    1-minute load average {load_before:.2f} before, {load_after:.2f} after ({default_workers()} CPUs)")
    print(f"    other processes used {min(others):.2f}-{max(others):.2f} of the CPUs during the pool runs")


if __name__ == "__main__":
    main()
