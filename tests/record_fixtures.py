"""Run records written by tests without training: a step's scores.json whose counts give a chosen avg@n."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

from dppo_bench.eval.metrics import avg_at_n, ks_for, mean_pass_at_k


def counts_for(value: float, n: int) -> list[tuple[int, int]]:
    """(n, c) per problem, as few problems as give a mean accuracy of ``value`` (a multiple of 1/(n * problems))."""
    share = Fraction(value).limit_denominator(10_000)
    problems = share.denominator // math.gcd(share.denominator, n)
    total = int(share * n * problems)
    return [(n, total // problems + (i < total % problems)) for i in range(problems)]


def write_scores(run_path: Path, benchmark: str, step: int, n: int, value: float) -> Path:
    """``eval/<benchmark>/step<step>/scores.json`` of the run, with per-problem counts that give ``value``."""
    counts = counts_for(value, n)
    scores = {
        "benchmark": benchmark,
        "n": n,
        f"avg@{n}": avg_at_n(counts),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks_for(n)},
        "problems": [{"problem_id": f"p{i}", "n": m, "c": c} for i, (m, c) in enumerate(counts)],
    }
    path = Path(run_path) / "eval" / benchmark / f"step{step}" / "scores.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(scores))
    return path
