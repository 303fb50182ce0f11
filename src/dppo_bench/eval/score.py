"""Score a samples file against a benchmark: per-problem (n, c, timeouts), avg@n, pass@k, bootstrap CI.

The samples must be exactly ``n`` per problem of the benchmark, numbered 0..n-1: a missing or extra sample, a
duplicate, or a problem id the benchmark does not have is an error naming it (never a silently different metric).
Each sample's verdict (the answer read, correct, timeout, corrupt text) is kept: :func:`write_scores` puts the
counts in scores.json and the verdicts beside it in ``<name>.verdicts.jsonl.gz``, so every number can be audited
down to the completion that produced it. A completion whose bytes were not UTF-8 is graded wrong, not guessed at.

A samples file with a header must be of this benchmark and problem set, and its prompt template says whether
completions start inside a reasoning block. A file without one (made by another tool) is scored as plain
completions, and scores.json records its model, sampling and prompt as unknown; its user may name the prompt
template (``prompt``), which then decides the reasoning rule and is recorded as declared.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from dppo_bench.config import ConfigError
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.eval import verifier
from dppo_bench.eval.grading import DEFAULT_TIMEOUT_S, GradingPool, Verdict, grade_many
from dppo_bench.eval.metrics import avg_at_n, bootstrap_ci, ks_for, mean_pass_at_k
from dppo_bench.eval.samples import SamplesError, SamplesFile, truncation_message
from dppo_bench.io import atomic_write_bytes, atomic_write_json, file_sha256
from dppo_bench.problem_sets.load import ProblemSet, pinned_hashes

CI_LEVEL = 0.95
CI_RESAMPLES = 10_000
_MAX_LISTED = 5
UNKNOWN = "unknown: the samples file has no header"


def _listing(items: list[str]) -> str:
    more = f" and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return ", ".join(items[:_MAX_LISTED]) + more


def check_samples(benchmark: BenchmarkSpec, problems: ProblemSet, samples: SamplesFile, n: int) -> dict[str, list]:
    """The rows of each problem, sorted by sample index, after every completeness check."""
    path = samples.path
    if samples.truncated_bytes:
        raise SamplesError(truncation_message(samples))
    header_benchmark = samples.header.get("benchmark")
    if samples.has_header and header_benchmark != benchmark.id:
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
    timeout_s: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
    prompt: str | None = None,
) -> dict:
    """scores.json's content. Grades in ``pool`` if given, else in ``workers`` processes (default: as many as
    pay for themselves, ``grading.plan_workers``; 1 = this process). ``prompt``: the template a file without a
    header was made with (for a file with one, it must be the header's)."""
    n = n or benchmark.n
    rows = check_samples(benchmark, problems, samples, n)
    answers = problems.by_id()
    corrupt = samples.invalid_utf8
    items = [
        ("" if (pid, row["sample"]) in corrupt else row["completion"], answers[pid].answer, benchmark.answer_type)
        for pid, group in rows.items()
        for row in group
    ]
    template = prompt_template(samples, prompt)
    reasoning = opens_reasoning(template, samples.path)
    if pool is None:
        verdicts = grade_many(items, workers=workers, opens_reasoning=reasoning, timeout_s=timeout_s)
    else:
        verdicts = pool.grade_many(items, opens_reasoning=reasoning)
    scores = summarize(benchmark, problems, samples, rows, verdicts, n, seed)
    if not samples.has_header and template is not None:
        scores["prompt"] = {"template": template, "declared": True}  # by the user, not recorded at generation
    return scores


def prompt_template(samples: SamplesFile, declared: str | None) -> str | None:
    """The id of the template the completions were made with: the header's, else the one the user declares."""
    if not samples.has_header:
        return declared
    recorded = (samples.header.get("prompt") or {}).get("template")
    if declared is not None and declared != recorded:
        raise SamplesError(f"{samples.path}: header field 'prompt.template' is {recorded!r}, not {declared!r}")
    return recorded


def opens_reasoning(template: str | None, path: Path) -> bool:
    """Whether the template opened a reasoning block (False when no template is known)."""
    if template is None:
        return False
    try:
        return load_prompt(template).opens_reasoning
    except ConfigError as e:
        raise SamplesError(f"{path}: prompt template: {e}") from None


def _sample_verdict(sample: int, verdict: Verdict, corrupt: bool) -> dict:
    return {
        "sample": sample,
        "answer": verdict.extracted,
        "correct": verdict.correct,
        "timeout": verdict.timeout,
        "invalid_utf8": corrupt,
    }


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
    for pid, group_rows in rows.items():
        group = verdicts[i : i + n]
        i += n
        per_sample = [
            _sample_verdict(r["sample"], v, (pid, r["sample"]) in samples.invalid_utf8)
            for r, v in zip(group_rows, group, strict=True)
        ]
        per_problem.append(
            {
                "problem_id": pid,
                "n": n,
                "c": sum(v.correct for v in group),
                "timeouts": sum(v.timeout for v in group),
                "invalid_utf8": sum(v["invalid_utf8"] for v in per_sample),
                "verdicts": per_sample,
            }
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
        "no_answer": sum(v["answer"] is None and not v["invalid_utf8"] for p in per_problem for v in p["verdicts"]),
        "invalid_utf8": sum(p["invalid_utf8"] for p in per_problem),
        "verifier": verifier.verifier_info(),
        "answer_type": benchmark.answer_type,
        "sampling": samples.header.get("sampling") if samples.has_header else UNKNOWN,
        "model": samples.header.get("model") if samples.has_header else UNKNOWN,
        "prompt": samples.header.get("prompt") if samples.has_header else UNKNOWN,
        "data_sha256": problems.sha256,
        "data_pinned": problems.sha256 in pinned_hashes(benchmark),  # equals a hash the benchmark spec pins
        "samples": {
            "path": str(samples.path),
            "sha256": file_sha256(samples.path),
            "invalid_utf8_lines": samples.invalid_utf8_lines,
        },
        "scored_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "problems": per_problem,
    }


def verdicts_path(scores_path: Path) -> Path:
    """Where the per-sample verdicts of ``scores_path`` go: scores.json -> scores.verdicts.jsonl.gz."""
    scores_path = Path(scores_path)
    return scores_path.with_name(scores_path.stem + ".verdicts.jsonl.gz")


def write_scores(scores: dict, path: Path) -> None:
    """The per-sample verdicts, then scores.json naming them (with their sha256), each written atomically.

    scores.json is written last: a reader that finds it also finds the verdicts it names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"problem_id": p["problem_id"], **v} for p in scores["problems"] for v in p.get("verdicts", [])]
    counts = {**scores, "problems": [{k: v for k, v in p.items() if k != "verdicts"} for p in scores["problems"]]}
    if rows:
        data = gzip.compress("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(), mtime=0)
        target = verdicts_path(path)
        atomic_write_bytes(target, data)
        counts["verdicts"] = {"path": target.name, "sha256": file_sha256(target)}
    atomic_write_json(path, counts)
