"""Score a samples file against a benchmark: per-problem (n, c, timeouts), avg@n, pass@k, bootstrap CI.

The samples must be exactly ``n`` per problem of the benchmark, numbered 0..n-1: a missing or extra sample, a
duplicate, or a problem id the benchmark does not have is an error naming it (never a silently different metric).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from dppo_bench.eval import verifier
from dppo_bench.eval.data import ProblemSet, pinned_hashes
from dppo_bench.eval.grading import DEFAULT_TIMEOUT_S, GradingPool, Verdict
from dppo_bench.eval.metrics import avg_at_n, bootstrap_ci, ks_for, mean_pass_at_k
from dppo_bench.eval.samples import SamplesError, SamplesFile
from dppo_bench.eval.spec import BenchmarkSpec

CI_LEVEL = 0.95
CI_RESAMPLES = 10_000
_MAX_LISTED = 5


def _listing(items: list[str]) -> str:
    more = f" and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return ", ".join(items[:_MAX_LISTED]) + more


def check_samples(benchmark: BenchmarkSpec, problems: ProblemSet, samples: SamplesFile, n: int) -> dict[str, list]:
    """The rows of each problem, sorted by sample index, after every completeness check."""
    path = samples.path
    if samples.truncated_bytes:
        raise SamplesError(f"{path}: ends in {samples.truncated_bytes} bytes of an interrupted write; resume it")
    header_benchmark = samples.header.get("benchmark")
    if header_benchmark != benchmark.id:
        raise SamplesError(f"{path}: header field 'benchmark' is {header_benchmark!r}, not {benchmark.id!r}")
    header_sha = samples.header.get("data_sha256")
    if header_sha is not None and header_sha != problems.sha256:
        raise SamplesError(
            f"{path}: header field 'data_sha256' is {header_sha}, but the problems scored against "
            f"({problems.origin}) hash to {problems.sha256}: the samples were generated for another problem set"
        )
    known = problems.by_id()
    by_problem: dict[str, dict[int, dict]] = defaultdict(dict)
    for row in samples.rows:
        pid, s = row["problem_id"], row["sample"]
        if pid not in known:
            raise SamplesError(f"{path}: problem_id {pid!r} is not a problem of {benchmark.id}")
        if s >= n:
            raise SamplesError(f"{path}: problem {pid!r} has sample {s}, but n = {n} (samples are 0..{n - 1})")
        if s in by_problem[pid]:
            raise SamplesError(f"{path}: duplicate sample {s} of problem {pid!r}")
        by_problem[pid][s] = row
    short = [f"{pid} ({len(by_problem.get(pid, {}))} of {n})" for pid in known if len(by_problem.get(pid, {})) < n]
    if short:
        raise SamplesError(f"{path}: fewer than n = {n} samples for {len(short)} problem(s): {_listing(short)}")
    return {pid: [by_problem[pid][s] for s in range(n)] for pid in known}


def score_samples(
    benchmark: BenchmarkSpec,
    problems: ProblemSet,
    samples: SamplesFile,
    *,
    n: int | None = None,
    pool: GradingPool | None = None,
    workers: int | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    seed: int = 0,
) -> dict:
    """scores.json's content. Grades in ``pool`` if given, else in a pool of ``workers`` started here."""
    n = n or benchmark.n
    rows = check_samples(benchmark, problems, samples, n)
    answers = problems.by_id()
    items = [
        (row["completion"], answers[pid].answer, benchmark.answer_type) for pid, group in rows.items() for row in group
    ]
    if pool is None:
        with GradingPool(workers, timeout_s=timeout_s) as own:
            verdicts = own.grade_many(items)
    else:
        verdicts = pool.grade_many(items)
    return summarize(benchmark, problems, samples, rows, verdicts, n, seed)


def summarize(
    benchmark: BenchmarkSpec,
    problems: ProblemSet,
    samples: SamplesFile,
    rows: dict[str, list],
    verdicts: list[Verdict],
    n: int,
    seed: int,
) -> dict:
    per_problem, i = [], 0
    for pid in rows:
        group = verdicts[i : i + n]
        i += n
        per_problem.append(
            {"problem_id": pid, "n": n, "c": sum(v.correct for v in group), "timeouts": sum(v.timeout for v in group)}
        )
    counts = [(p["n"], p["c"]) for p in per_problem]
    low, high = bootstrap_ci([c / m for m, c in counts], seed=seed, resamples=CI_RESAMPLES, level=CI_LEVEL)
    return {
        "benchmark": benchmark.id,
        "n": n,
        f"avg@{n}": avg_at_n(counts),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks_for(n)},
        "ci": {
            "metric": f"avg@{n}",
            "level": CI_LEVEL,
            "low": low,
            "high": high,
            "method": "percentile bootstrap over problems",
            "resamples": CI_RESAMPLES,
            "seed": seed,
        },
        "timeouts": sum(p["timeouts"] for p in per_problem),
        "no_answer": sum(v.extracted is None for v in verdicts),
        "verifier": verifier.verifier_info(),
        "answer_type": benchmark.answer_type,
        "sampling": samples.header.get("sampling"),
        "model": samples.header.get("model"),
        "prompt": samples.header.get("prompt"),
        "data_sha256": problems.sha256,
        "data_pinned": problems.sha256 in pinned_hashes(benchmark),  # equals a hash the benchmark spec pins
        "samples": {
            "path": str(samples.path),
            "sha256": hashlib.sha256(samples.path.read_bytes()).hexdigest(),
            "invalid_utf8_lines": samples.invalid_utf8_lines,
        },
        "scored_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "problems": per_problem,
    }


def write_scores(scores: dict, path: Path) -> None:
    """Write scores.json atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(scores, indent=2) + "\n")
    os.replace(tmp, path)
