"""Per-sample verdicts: extraction, the integer rule, and math-verify here or in worker processes.

A verdict is decided without the verifier when it can be (no answer extracted; an AIME-style integer written
plainly, compared as an integer so that "025" = 25; a number too large to compute, compared as written). Everything
else goes to math-verify (``verifier``) under a CPU-time budget per pair, each distinct (prediction, answer) pair
once per process: verdicts are kept across calls (samples, steps of a run), since a pair's verdict does not change.
Where it runs is chosen from the work and the free cores (:func:`plan_workers`): in this process when worker
processes would not pay for their start-up, else in a ``pool.VerifierPool``. Either way a pair that times out is
retried once, alone, with a larger CPU-time budget before it is recorded as a timeout, so verdicts do not depend on
the machine's load or on the path taken.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from dppo_bench.config.specs import AnswerType
from dppo_bench.eval import verifier
from dppo_bench.eval.extract import extract_answer
from dppo_bench.eval.magnitude import as_written, too_large
from dppo_bench.eval.pool import RETRY_FACTOR, Pair, Result, VerifierPool
from dppo_bench.eval.values import as_integer, comparable
from dppo_bench.eval.verifier import DEFAULT_TIMEOUT_S

ANSWER_TYPES: tuple[str, ...] = get_args(AnswerType)
PAIRS_PER_WORKER = 400  # a worker process pays for its start-up (about 1 s) only with this many pairs to verify
KEPT_VERDICTS = 200_000  # verdicts of distinct pairs kept per process (about 100 bytes each)
_GOLD_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    timeout: bool  # the verifier gave no verdict within its CPU-time budget (after the retry)
    extracted: str | None  # the final answer read from the completion; None = it states none


GradeItem = tuple[str, str, str]  # (completion, answer, answer_type)


def answer_kind(answer: str, answer_type: AnswerType) -> Literal["integer", "math"]:
    """How an answer compares: "integer" (as integers, math-verify only for non-plain predictions) or "math"."""
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type {answer_type!r} is not one of {', '.join(ANSWER_TYPES)}")
    is_integer = bool(_GOLD_INTEGER.fullmatch(answer.strip()))
    if answer_type == "integer" and not is_integer:
        raise ValueError(f"answer {answer!r} is not an integer but answer_type is 'integer'")
    if answer_type == "math":
        return "math"
    return "integer" if is_integer else "math"


def decide(
    completion: str, answer: str, answer_type: str = "auto", opens_reasoning: bool = False
) -> tuple[Verdict | None, str | None]:
    """The verdict when no verifier is needed, else (None, extracted answer for math-verify)."""
    extraction = extract_answer(completion, opens_reasoning)
    if extraction is None:
        return Verdict(False, False, None), None
    if answer_kind(answer, answer_type) == "integer":
        value = as_integer(extraction.text)
        if value is not None:
            return Verdict(value == int(answer), False, extraction.text), None
    if too_large(extraction.text) or _gold_too_large(answer):  # sympy would compute it, in one endless C call
        return Verdict(as_written(comparable(extraction.text)) == as_written(answer), False, extraction.text), None
    return None, extraction.text


@lru_cache(maxsize=8192)
def _gold_too_large(answer: str) -> bool:
    return too_large(answer)


def grade(
    completion: str,
    answer: str,
    answer_type: AnswerType = "auto",
    *,
    opens_reasoning: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Verdict:
    """One sample's verdict. In this process on the main thread; from any other thread via the shared pool."""
    return grade_many([(completion, answer, answer_type)], opens_reasoning=opens_reasoning, timeout_s=timeout_s)[0]


def grade_many(
    items: Iterable[GradeItem],
    pool: VerifierPool | None = None,
    *,
    workers: int | None = None,
    opens_reasoning: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Verdict]:
    """Verdicts in input order. math-verify runs in ``pool`` if given, else in ``workers`` processes (default:
    :func:`plan_workers`; 1 = this process, which off the main thread means the shared pool)."""
    verdicts: list[Verdict | None] = []
    owners: dict[Pair, list[tuple[int, str]]] = {}
    for i, (completion, answer, answer_type) in enumerate(items):
        verdict, prediction = decide(completion, answer, answer_type, opens_reasoning)
        verdicts.append(verdict)
        if verdict is None:
            owners.setdefault((comparable(prediction), answer), []).append((i, prediction))
    pairs = list(owners)
    for pair, result in zip(pairs, verify(pairs, pool, workers=workers, timeout_s=timeout_s), strict=True):
        for i, prediction in owners[pair]:
            verdicts[i] = Verdict(result[0], result[1], prediction)
    return verdicts  # type: ignore[return-value]


def verify(
    pairs: list[Pair], pool: VerifierPool | None = None, *, workers: int | None = None, timeout_s: float
) -> list[Result]:
    """(correct, timeout) of each (prediction, answer) pair: kept from an earlier call, else by math-verify,
    wherever it pays to run it."""
    budget = timeout_s if pool is None else pool.cpu_limit_s
    keys = [_verdict_key(pair, budget) for pair in pairs]
    with _kept_lock:
        known = {key: _kept[key] for key in keys if key in _kept}
    todo = list(dict.fromkeys(pair for pair, key in zip(pairs, keys, strict=True) if key not in known))
    for pair, result in zip(todo, _verify(todo, pool, workers, timeout_s), strict=True):
        known[_verdict_key(pair, budget)] = result
    with _kept_lock:
        _kept.update(known)
        while len(_kept) > KEPT_VERDICTS:
            del _kept[next(iter(_kept))]  # the oldest first
    return [known[key] for key in keys]


_kept: dict[bytes, Result] = {}
_kept_lock = threading.Lock()


def forget_verdicts() -> None:
    """Drop the verdicts kept so far (a test that must see math-verify run again)."""
    with _kept_lock:
        _kept.clear()


def _verdict_key(pair: Pair, budget: float) -> bytes:
    """A short key for a pair's verdict under a budget (a prediction may be 200 kB long)."""
    return hashlib.blake2b(repr((pair, budget)).encode(), digest_size=16).digest()


def _verify(pairs: list[Pair], pool: VerifierPool | None, workers: int | None, timeout_s: float) -> list[Result]:
    if not pairs:
        return []
    if pool is not None:
        return pool.check_many(pairs)
    if threading.current_thread() is not threading.main_thread():
        return shared_pool().check_many(pairs, timeout_s)
    count = plan_workers(len(pairs)) if workers is None else workers
    if count <= 1:
        return check_here(pairs, timeout_s)
    with VerifierPool(count, cpu_limit_s=timeout_s) as own:
        return own.check_many(pairs)


def check_here(pairs: list[Pair], cpu_limit_s: float) -> list[Result]:
    """math-verify in this process (main thread), with the pool's rule: a timeout is retried once, alone."""
    results = [verifier.check(prediction, answer, cpu_limit_s) for prediction, answer in pairs]
    retried = RETRY_FACTOR * cpu_limit_s
    return [verifier.check(*pair, retried) if r[1] else r for pair, r in zip(pairs, results, strict=True)]


def plan_workers(pairs: int) -> int:
    """How many processes verify ``pairs`` pairs: one per free core, as long as each gets enough work to pay for
    its start-up; 1 (this process alone) when fewer than two would, so the parallel path is never the slower."""
    if pairs < 2 * PAIRS_PER_WORKER:
        return 1  # decided without measuring the cores (which takes a moment)
    count = min(free_cores(), pairs // PAIRS_PER_WORKER)
    return count if count >= 2 else 1


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def free_cores(interval_s: float = 0.2) -> int:
    """Cores of this process's CPUs that other processes left idle over the last ``interval_s`` (Linux
    /proc/stat; elsewhere the CPUs less the 1-minute load average)."""
    stat = Path("/proc/stat")
    if not stat.is_file():
        return max(0, round(available_cpus() - os.getloadavg()[0]))

    def ticks() -> tuple[int, int]:
        values = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all

    idle0, total0 = ticks()
    time.sleep(interval_s)
    idle1, total1 = ticks()
    machine_cpus = os.cpu_count() or 1
    idle_cores = machine_cpus * (idle1 - idle0) / max(1, total1 - total0)
    return max(0, min(available_cpus(), round(idle_cores)))


class GradingPool(VerifierPool):
    """Worker processes kept across several scorings (e.g. every step of a run), grading in bulk.

    ``with GradingPool(workers) as pool: verdicts = pool.grade_many([(completion, answer, answer_type), ...])``
    """

    def __init__(
        self, workers: int | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S, hard_timeout_s: float | None = None
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of CPU seconds, got {timeout_s}")
        workers = max(1, free_cores()) if workers is None else workers
        super().__init__(workers, cpu_limit_s=timeout_s, wall_limit_s=hard_timeout_s)

    def grade(self, completion: str, answer: str, answer_type: str = "auto", opens_reasoning: bool = False):
        return self.grade_many([(completion, answer, answer_type)], opens_reasoning)[0]

    def grade_many(self, items: Iterable[GradeItem], opens_reasoning: bool = False) -> list[Verdict]:
        return grade_many(items, self, opens_reasoning=opens_reasoning, timeout_s=self.cpu_limit_s)


_shared: GradingPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> GradingPool:
    """The process-wide pool used off the main thread (verl's reward threads, async actors); started lazily."""
    global _shared
    with _shared_lock:
        if _shared is None:
            workers = int(os.environ.get("DPPO_BENCH_GRADING_WORKERS", 0)) or min(4, available_cpus())
            _shared = GradingPool(workers).start()
            atexit.register(_shared.close)
        return _shared
