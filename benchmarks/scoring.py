"""Scoring throughput: one process against the pool, side by side in one run, on idle and on busy cores.

(A) A MATH-500-style set made here (500 problems x 8 samples, seeded): non-integer answers (fractions, surds,
tuples, intervals, multiples of pi, expressions, degrees, letter choices, and integers as often as in MATH-500) in
the formats real models write them (Answer lines with prose, display math, headings, boxes), right or wrong.
Every sample is graded twice per round, interleaved, each time in a fresh interpreter (cold, as a `score` command
is): in one process (``grade_many(workers=1)``) and as ``dppo-bench score`` does by default (the number of worker
processes planned from the work and the free cores, pool start-up included). First on the cores as they are, then
with a busy loop on every core.
(B) The full AIME-style scoring as configured (Avg@32 over 60 problems, integers compare as integers).

    python benchmarks/scoring.py [--rounds 2] [--problems 500]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dppo_bench.eval import verifier
from dppo_bench.eval.data import Problem, ProblemSet, problems_sha256
from dppo_bench.eval.grading import available_cpus, decide, free_cores, grade_many, plan_workers
from dppo_bench.eval.samples import read_samples, write_samples
from dppo_bench.eval.score import score_samples
from dppo_bench.eval.spec import load_benchmark
from dppo_bench.eval.values import comparable

SAMPLES_PER_PROBLEM = 8
FILLER = (
    "Let $x$ be the unknown. Squaring both sides of $\\sqrt{x+3} = x - 3$ gives $x + 3 = x^2 - 6x + 9$, so "
    "$x^2 - 7x + 6 = 0$ and $(x-1)(x-6) = 0$. Checking, $x = 1$ fails, since $\\sqrt{4} \\neq -2$.\n\n"
)


def answer(rng: random.Random) -> tuple[str, list[str]]:
    """A gold answer and ways of writing it that equal it."""
    a, b, c = rng.randint(2, 40), rng.randint(2, 19), rng.randint(2, 9)
    kind = rng.choice(["integer"] * 6 + ["fraction", "surd", "tuple", "interval", "pi", "linear", "degrees", "choice"])
    if kind == "integer":
        return str(a * b), [str(a * b), f"{a * b}^\\circ" if a % 2 else f"{a * b} \\text{{ units}}"]
    if kind == "fraction":
        return f"\\frac{{{a}}}{{{a + b}}}", [f"\\frac{{{a}}}{{{a + b}}}", f"\\dfrac{{{a}}}{{{a + b}}}", f"{a}/{a + b}"]
    if kind == "surd":
        return f"{c}\\sqrt{{{b}}}", [f"{c}\\sqrt{{{b}}}", f"\\sqrt{{{c * c * b}}}"]
    if kind == "tuple":
        return f"({a}, -{b})", [f"({a},-{b})", f"\\left( {a}, -{b} \\right)"]
    if kind == "interval":
        return f"[-{b}, {a})", [f"[-{b},{a})", f"x \\in [-{b}, {a})"]
    if kind == "pi":
        return f"\\frac{{{c}\\pi}}{{{b}}}", [f"\\frac{{{c}\\pi}}{{{b}}}", f"\\frac{{{c}}}{{{b}}}\\pi"]
    if kind == "linear":
        return f"{c}x - {a}", [f"{c}x - {a}", f"-{a} + {c}x"]
    if kind == "degrees":
        return f"{a}^\\circ", [f"{a}^\\circ", f"{a}"]
    return f"\\text{{({'ABCDE'[a % 5]})}}", [f"\\text{{({'ABCDE'[a % 5]})}}", f"({'ABCDE'[a % 5]})"]


def wrong(rng: random.Random, written: str) -> str:
    """The same shape, another value."""
    for digit in rng.sample("23456789", 8):
        if digit in written:
            return written.replace(digit, str((int(digit) + 1) % 10), 1)
    return written + "+1"


def final_part(rng: random.Random, value: str) -> str:
    """The end of a completion, in the formats of real Answer-template and boxed completions."""
    return rng.choice(
        [
            f"Answer: ${value}$",
            f"Answer: ${value}$ (without quotes)",
            f"$$\n\\text{{Answer: }} {value}\n$$",
            f"**Answer:**\n\\[ {value} \\]",
            f"### Answer:\n\n$$ x = {value} $$",
            f"Answer: The value we want is ${value}$.",
            f"\\[Answer: {value}\\]",
            f"Answer: ${value}.$",
            f"The final answer is $\\boxed{{{value}}}$.",
            f"Therefore the answer is \\boxed{{{value}}}.",
            f"First \\boxed{{{wrong(rng, value)}}}, but correcting a sign: \\boxed{{{value}}}",
            f"Answer: $\\frac{{{value[:3]}",  # cut off by the token limit
        ]
    )


def math_style_set(seed: int, n_problems: int) -> tuple[ProblemSet, dict[str, list[str]]]:
    rng = random.Random(seed)
    problems, completions = [], {}
    for i in range(n_problems):
        gold, forms = answer(rng)
        problems.append(Problem(f"math-style-{seed}-{i:03d}", f"Problem {i}", gold))
        completions[problems[-1].id] = [
            FILLER * rng.randint(2, 8) + final_part(rng, rng.choice(forms) if rng.random() < 0.6 else wrong(rng, gold))
            for _ in range(SAMPLES_PER_PROBLEM)
        ]
    return ProblemSet(problems, problems_sha256(problems), "benchmarks/scoring.py", "local", None), completions


def items_of(problems: ProblemSet, completions: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    answers = problems.by_id()
    return [(c, answers[pid].answer, "auto") for pid, cs in completions.items() for c in cs]


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the pool's workers, once it is closed)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def distinct_pairs(items: list[tuple[str, str, str]]) -> int:
    """How many (prediction, answer) pairs math-verify gets (what `score` plans its processes from)."""
    return len({(comparable(p), a) for c, a, t in items for v, p in [decide(c, a, t)] if v is None})


def grade_in_a_fresh_process(items_path: Path, side: str) -> dict:
    """One side of the comparison in a new interpreter, cold as a `score` command is (math-verify imported, no
    expression or parser cache warm): {"wall", "cpu" (its own and its workers'), "planned", "verdicts"}."""
    out = subprocess.run(
        [sys.executable, __file__, "--grade", str(items_path), side], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def grade_side(items_path: Path, side: str) -> None:
    """The child of grade_in_a_fresh_process: grade as one process ("single") or as `score` plans it ("pool")."""
    items = [tuple(item) for item in json.loads(items_path.read_text())]
    verifier.check("1", "1", 5.0)  # import math-verify, as a pool worker does before its first task
    c0, t0 = cpu_seconds(), time.perf_counter()
    verdicts = grade_many(items, workers=1) if side == "single" else grade_many(items)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    workers = 1 if side == "single" else plan_workers(distinct_pairs(items))  # the plan again, for the report
    print(
        json.dumps(
            {"wall": wall, "cpu": cpu, "planned": workers, "verdicts": [list(vars(v).values()) for v in verdicts]}
        )
    )


def one_against_pool(rounds: int, n_problems: int, seed0: int, tmp: Path) -> tuple[dict, dict, int, int, list[int]]:
    """Best wall-clock and CPU seconds of one process and of the planned pool over ``rounds`` fresh sets,
    interleaved; the samples and distinct pairs per round, and the processes each pool run was planned with."""
    wall = {"single": float("inf"), "pool": float("inf")}
    cpu, planned = dict(wall), []
    for r in range(rounds):
        items = items_of(*math_style_set(seed0 + r, n_problems))
        path = tmp / f"items-{seed0 + r}.json"
        path.write_text(json.dumps(items))
        verdicts = {}
        for side in ("single", "pool") if r % 2 == 0 else ("pool", "single"):  # neither always goes first
            result = grade_in_a_fresh_process(path, side)
            wall[side], cpu[side] = min(wall[side], result["wall"]), min(cpu[side], result["cpu"])
            verdicts[side] = result["verdicts"]
            if side == "pool":
                planned.append(result["planned"])
        assert verdicts["pool"] == verdicts["single"], "the pool and the single process disagree"
    return wall, cpu, len(items), distinct_pairs(items), planned


def busy_loops() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]


def full_aime_scoring() -> tuple[float, int, float]:
    rng = random.Random(0)
    problems = [Problem(f"aime-style-{i:02d}", f"Problem {i}", str(rng.randrange(1000))) for i in range(60)]
    lines = [
        "Answer: {a}",
        "**Answer:** ${a}$",
        "The final answer is $\\boxed{{{a}}}$.",
        "\\boxed{{\\frac{{{b}}}{{2}}}}",
    ]
    completions = {
        p.id: [
            FILLER * rng.randint(2, 8)
            + rng.choice(lines).format(a=int(p.answer) + rng.choice([0, 0, 1]), b=2 * int(p.answer))
            for _ in range(32)
        ]
        for p in problems
    }
    problem_set = ProblemSet(problems, problems_sha256(problems), "benchmarks/scoring.py", "local", None)
    benchmark = load_benchmark("aime24").model_copy(update={"id": "aime_style"})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl.gz"
        write_samples(path, {"benchmark": "aime_style", "data_sha256": problem_set.sha256}, completions)
        t0 = time.perf_counter()
        scores = score_samples(benchmark, problem_set, read_samples(path))
        return time.perf_counter() - t0, 60 * 32, scores["avg@32"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds on fresh sets; best reported")
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--grade", nargs=2, metavar=("ITEMS", "SIDE"), help=argparse.SUPPRESS)  # a child's job
    args = parser.parse_args()
    if args.grade:
        return grade_side(Path(args.grade[0]), args.grade[1])

    free_before, load_before = free_cores(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        idle = one_against_pool(args.rounds, args.problems, 0, Path(tmp))
        loops = busy_loops()
        try:
            time.sleep(1.0)
            busy = one_against_pool(args.rounds, args.problems, 100, Path(tmp))
        finally:
            for p in loops:
                p.kill()
                p.wait()
    full_s, full_n, avg = full_aime_scoring()

    cpus = available_cpus()
    print(f"(A) MATH-500-style set: {idle[2]} samples ({args.problems} problems x {SAMPLES_PER_PROBLEM}), about")
    print(f"    {idle[3]} distinct (prediction, answer) pairs for math-verify; best of {args.rounds} rounds")
    for name, (wall, cpu, total, _, planned) in (
        (f"cores as they are ({free_before} of {cpus} free at the start)", idle),
        (f"a busy loop on each of the {os.cpu_count()} cores", busy),
    ):
        single_s, pool_s = wall["single"], wall["pool"]
        print(f"    {name}:")
        print(f"      one process     {total / single_s:6.0f} samples/s  ({single_s:.2f} s, {cpu['single']:.2f} CPU s)")
        print(
            f"      as `score` does {total / pool_s:6.0f} samples/s  ({pool_s:.2f} s, {cpu['pool']:.2f} CPU s; "
            f"a plan just after: {', '.join(map(str, planned))} process(es))"
        )
        print(f"      ratio           {single_s / pool_s:6.2f}x")
    print("(B) full AIME-style scoring as configured (answer_type integer): read + grade + metrics")
    print(f"    {full_s:.2f} s for {full_n} samples ({full_n / full_s:.0f}/s); avg@32 = {avg:.4f}")
    print(f"    1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({cpus} CPUs)")


if __name__ == "__main__":
    main()
