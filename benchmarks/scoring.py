"""Scoring throughput: one process against the pool, side by side in one run, on idle and on busy cores.

(A) A MATH-500-style set made here (500 problems x 8 samples, seeded): non-integer answers (fractions, surds,
tuples, intervals, multiples of pi, expressions, degrees, letter choices, and integers as often as in MATH-500) in
the formats real models write them (Answer lines with prose, display math, headings, boxes), right or wrong.
Every sample is graded twice per round, interleaved, each time in a fresh interpreter (cold, as a `score` command
is): in one process (``grade_many(workers=1)``) and as ``dppo-bench score`` does by default (the number of worker
processes planned from the work and the free cores, pool start-up included). First on the cores as they are, then
with a busy loop on every core.
(B) The full AIME-style scoring as configured (Avg@32 over 60 problems, integers compare as integers).
(C) An AIME-style file in which a model wrote power towers (17 of 960 samples): scored as `score` does, idle and
with a busy loop on every core (the verdicts must be the same), and the CPU time of one tower pair, here and (with
``--baseline SRC``, another checkout's ``src``) in the code before towers were recognised, side by side.
(D) The CPU time math-verify takes for MATH-500's answers (each against itself and against a changed copy): what
the per-pair budget (``verifier.DEFAULT_TIMEOUT_S``) must leave room for.

    python benchmarks/scoring.py [--rounds 2] [--problems 500] [--baseline ../main/src]
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

from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval import verifier
from dppo_bench.eval.grading import available_cpus, decide, free_cores, grade_many, plan_workers
from dppo_bench.eval.samples import read_samples, write_samples
from dppo_bench.eval.score import score_samples
from dppo_bench.eval.values import comparable
from dppo_bench.problem_sets.load import Problem, ProblemSet, problems_sha256

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


TOWERS = [  # what real models wrote when they gave up on a huge count: numbers no computer can write out
    "9^{9^{9^{9}}}",
    "9^{9^{9^9}}",
    "8^{8^{8^{8}}}",
    "7^{7^{7^{7}}}",
    "9^{9^{9^{9^{9}}}}",
    "6^{6^{6^{6}}}",
]
TOWER_LINES = ["\\boxed{{{t}}}", "Answer: ${t}$", "The final answer is $\\boxed{{{t}}}$.", "So the count is ${t}$."]


def tower_file(tmp: Path) -> tuple[Path, ProblemSet]:
    """30 AIME-style problems x 32 samples; 17 samples end in a tower, the rest in the formats of (B)."""
    rng = random.Random(1)
    problems = [Problem(f"tower-style-{i:02d}", f"Problem {i}", str(rng.randrange(1000))) for i in range(30)]
    formats = [
        "Answer: {a}",
        "**Answer:** ${a}$",
        "The final answer is $\\boxed{{{a}}}$.",
        "\\boxed{{\\frac{{{b}}}{{2}}}}",
    ]
    slots = set(rng.sample(range(30 * 32), 17))
    completions = {}
    for i, p in enumerate(problems):
        completions[p.id] = []
        for s in range(32):
            a = int(p.answer) + rng.choice([0, 0, 1])
            if 32 * i + s in slots:
                end = rng.choice(TOWER_LINES).format(t=rng.choice(TOWERS))
            else:
                end = rng.choice(formats).format(a=a, b=2 * a)
            completions[p.id].append(FILLER * rng.randint(2, 8) + end)
    problem_set = ProblemSet(problems, problems_sha256(problems), "benchmarks/scoring.py", "local", None)
    path = tmp / "towers.jsonl.gz"
    write_samples(path, {"benchmark": "aime_style", "data_sha256": problem_set.sha256}, completions)
    return path, problem_set


def score_tower_file() -> None:
    """The child of scored_in_a_fresh_process: make the tower file, score it as `score` does, print the result."""
    with tempfile.TemporaryDirectory() as tmp:
        path, problem_set = tower_file(Path(tmp))
        benchmark = load_benchmark("aime24").model_copy(update={"id": "aime_style"})
        c0, t0 = cpu_seconds(), time.perf_counter()
        scores = score_samples(benchmark, problem_set, read_samples(path))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    verdicts = [(p["problem_id"], p["verdicts"]) for p in scores["problems"]]
    print(json.dumps({"wall": wall, "cpu": cpu, "verdicts": verdicts}))


def scored_in_a_fresh_process() -> tuple[float, float, list]:
    """(wall s, CPU s, verdicts) of scoring the tower file in a new interpreter, cold as a `score` command is."""
    out = subprocess.run([sys.executable, __file__, "--score-towers"], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.splitlines()[-1])
    return result["wall"], result["cpu"], result["verdicts"]


def tower_pairs(path: Path, problem_set: ProblemSet) -> list[tuple[str, str, str]]:
    answers = problem_set.by_id()
    return [
        (r["completion"], answers[r["problem_id"]].answer, "integer")
        for r in read_samples(path).rows
        if any(t in r["completion"] for t in TOWERS)
    ]


def tower_pair_cost(items_path: Path, src: str | None) -> dict:
    """CPU seconds per tower pair in a fresh interpreter, with this checkout's code or the one at ``src``."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    out = subprocess.run(
        [sys.executable, __file__, "--grade", str(items_path), "single"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result = json.loads(out.stdout.splitlines()[-1])
    return {"cpu_per_pair": result["cpu"] / len(result["verdicts"]), "verdicts": result["verdicts"]}


def towers(tmp: Path, baseline: str | None, baseline_pairs: int) -> None:
    path, problem_set = tower_file(tmp)
    idle = scored_in_a_fresh_process()
    loops = busy_loops()
    try:
        time.sleep(1.0)
        busy = scored_in_a_fresh_process()
    finally:
        for p in loops:
            p.kill()
            p.wait()
    from dppo_bench.eval.extract import extract_answer

    pairs = tower_pairs(path, problem_set)
    by_pair = {(extract_answer(c).text, a): (c, a, t) for c, a, t in pairs}  # one completion per verifier pair
    distinct = list(by_pair.values())
    items_path = tmp / "tower-items.json"
    items_path.write_text(json.dumps(distinct))
    here = tower_pair_cost(items_path, None)
    print(f"(C) AIME-style file with towers: 960 samples, {len(pairs)} end in a tower ({len(distinct)} distinct pairs)")
    for name, (wall, cpu, _) in (("idle", idle), ("busy loop on each core", busy)):
        print(f"    {name:24} {wall:6.2f} s wall, {cpu:6.2f} CPU s (scored as `score` does)")
    print(f"    verdicts idle and busy identical: {idle[2] == busy[2]}")
    print(f"    one tower pair, this code: {here['cpu_per_pair'] * 1000:.2f} ms CPU ({len(distinct)} pairs, 1 process)")
    if baseline:
        items_path.write_text(json.dumps(distinct[:baseline_pairs]))
        before = tower_pair_cost(items_path, baseline)
        ratio = before["cpu_per_pair"] / max(here["cpu_per_pair"], 1e-9)
        per_pair = before["cpu_per_pair"]
        print(f"    one tower pair, {baseline}: {per_pair:.2f} s CPU ({baseline_pairs} pairs); ratio {ratio:.0f}x")
        same = [v[0] for v in before["verdicts"]] == [v[0] for v in here["verdicts"][:baseline_pairs]]
        print(f"    graded wrong both times (a timeout before, compared as written now): {same}")


def math500_costs(data: Path) -> None:
    """The CPU time of math-verify on MATH-500's answers, against themselves and against a changed copy."""
    answers = [json.loads(line)["answer"] for line in data.read_text().splitlines() if line.strip()]
    verifier.check("1", "1", 5.0)
    costs = []
    for gold in answers:
        for prediction in (gold, wrong(random.Random(gold), gold)):  # the first of the two pays for the gold's parse
            t0 = time.process_time()
            verifier.check(prediction, gold, 30.0)
            costs.append(time.process_time() - t0)
    costs.sort()
    print(f"(D) math-verify on MATH-500's answers ({len(costs)} pairs):")
    print(
        f"    median {costs[len(costs) // 2] * 1000:.1f} ms, 99th percentile {costs[int(len(costs) * 0.99)] * 1000:.1f}"
        f" ms, costliest {costs[-1] * 1000:.1f} ms CPU; budget per pair {verifier.DEFAULT_TIMEOUT_S * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds on fresh sets; best reported")
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--baseline", help="another checkout's src: the CPU time of a tower pair before this change")
    parser.add_argument("--baseline-pairs", type=int, default=2, help="tower pairs graded by --baseline (25 s each)")
    parser.add_argument(
        "--math500", type=Path, default=Path(__file__).parents[1] / "../shared/data/math500/math500.jsonl"
    )
    parser.add_argument("--grade", nargs=2, metavar=("ITEMS", "SIDE"), help=argparse.SUPPRESS)  # a child's job
    parser.add_argument("--score-towers", action="store_true", help=argparse.SUPPRESS)  # a child's job
    args = parser.parse_args()
    if args.grade:
        return grade_side(Path(args.grade[0]), args.grade[1])
    if args.score_towers:
        return score_tower_file()

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
    with tempfile.TemporaryDirectory() as tmp:
        towers(Path(tmp), args.baseline, args.baseline_pairs)
    math500_costs(args.math500)
    print(f"1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({cpus} CPUs)")


if __name__ == "__main__":
    main()
