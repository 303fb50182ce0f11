"""Per-sample verdicts: extraction, the integer rule, and math-verify in worker processes.

A verdict is decided in the caller when it can be (no answer extracted; an AIME-style integer written plainly,
compared as an integer so that "025" = 25). Everything else goes to math-verify (``verifier``), whose timeouts
use SIGALRM: on the main thread that runs in-process (``grade``); anywhere else, and for bulk scoring, it runs in
a :class:`GradingPool` of worker processes, each of which grades on its own main thread. The pool also enforces a
hard wall-clock limit per item (killing and replacing a worker that overruns it, e.g. stuck in one long C call)
and survives worker crashes; both are recorded as timeouts, so a pathological completion is scored wrong with a
timeout and never hangs or crashes the run.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

from dppo_bench.eval import verifier
from dppo_bench.eval.extract import as_integer, extract_answer
from dppo_bench.eval.pool import VerifierPool

AnswerType = Literal["auto", "integer", "math"]
ANSWER_TYPES: tuple[str, ...] = ("auto", "integer", "math")
DEFAULT_TIMEOUT_S = 5  # math-verify's own default per parse and per comparison (SIGALRM takes whole seconds)
_GOLD_INTEGER = re.compile(r"[+-]?\d+")
_SUBMIT_BATCH = 32  # items handed to the workers at a time by grade_many


@dataclass(frozen=True)
class Verdict:
    correct: bool
    timeout: bool  # the verifier gave no verdict: its time limit, the pool's hard limit, or a crashed worker
    extracted: str | None  # the final answer read from the completion; None = it states none


GradeItem = tuple[str, str, str]  # (completion, answer, answer_type)


def answer_kind(answer: str, answer_type: str) -> Literal["integer", "math"]:
    """How an answer compares: "integer" (as integers, math-verify only for non-plain predictions) or "math"."""
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type {answer_type!r} is not one of {', '.join(ANSWER_TYPES)}")
    is_integer = bool(_GOLD_INTEGER.fullmatch(answer.strip()))
    if answer_type == "integer" and not is_integer:
        raise ValueError(f"answer {answer!r} is not an integer but answer_type is 'integer'")
    if answer_type == "math":
        return "math"
    return "integer" if is_integer else "math"


def decide(completion: str, answer: str, answer_type: str = "auto") -> tuple[Verdict | None, str | None]:
    """The verdict when no verifier is needed, else (None, extracted answer for math-verify)."""
    extraction = extract_answer(completion)
    if extraction is None:
        return Verdict(False, False, None), None
    if answer_kind(answer, answer_type) == "integer":
        value = as_integer(extraction.text)
        if value is not None:
            return Verdict(value == int(answer), False, extraction.text), None
    return None, extraction.text


def grade(completion: str, answer: str, answer_type: str = "auto", *, timeout_s: int = DEFAULT_TIMEOUT_S) -> Verdict:
    """One sample's verdict. In-process on the main thread; from any other thread via the shared pool."""
    verdict, prediction = decide(completion, answer, answer_type)
    if verdict is not None:
        return verdict
    if threading.current_thread() is threading.main_thread():
        correct, timed_out = verifier.check(prediction, answer, timeout_s)
    else:
        correct, timed_out = shared_pool().check(prediction, answer, timeout_s).result()
    return Verdict(correct, timed_out, prediction)


def grade_many(
    items: Iterable[GradeItem], pool: VerifierPool | None = None, *, timeout_s: int = DEFAULT_TIMEOUT_S
) -> list[Verdict]:
    """Verdicts in input order, math-verify in ``pool`` (or in this process, on the main thread, without one).

    Identical (prediction, answer) pairs, common among the n samples of a problem, are verified once. With a
    pool, pairs are handed to the workers in batches while the rest are still being extracted.
    """
    verdicts: list[Verdict | None] = []
    owners: dict[tuple[str, str], list[int]] = {}
    results: dict[tuple[str, str], Future | tuple[bool, bool]] = {}
    batch: list[tuple[str, str]] = []
    for i, (completion, answer, answer_type) in enumerate(items):
        verdict, prediction = decide(completion, answer, answer_type)
        verdicts.append(verdict)
        if verdict is None:
            key = (prediction, answer)
            if key not in owners:
                owners[key] = []
                batch.append(key)
            owners[key].append(i)
        if pool is not None and len(batch) == _SUBMIT_BATCH:
            results.update(zip(batch, pool.check_many(batch), strict=True))
            batch = []
    if pool is not None:
        results.update(zip(batch, pool.check_many(batch), strict=True))
    else:
        results.update((key, verifier.check(*key, timeout_s)) for key in batch)
    for key, indices in owners.items():
        result = results[key]
        correct, timed_out = result.result() if isinstance(result, Future) else result
        for i in indices:
            verdicts[i] = Verdict(correct, timed_out, key[0])
    return verdicts  # type: ignore[return-value]


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class GradingPool(VerifierPool):
    """Bulk and thread-safe grading: verdicts decided here when possible, math-verify in worker processes.

    ``with GradingPool(workers) as pool: verdicts = pool.grade_many([(completion, answer, answer_type), ...])``
    """

    def __init__(self, workers: int | None = None, *, timeout_s: int = DEFAULT_TIMEOUT_S, hard_timeout_s=None):
        workers = default_workers() if workers is None else workers
        super().__init__(workers, timeout_s=timeout_s, hard_timeout_s=hard_timeout_s)

    def grade(self, completion: str, answer: str, answer_type: str = "auto") -> Verdict:
        return self.grade_many([(completion, answer, answer_type)])[0]

    def grade_many(self, items: Iterable[GradeItem]) -> list[Verdict]:
        """Verdicts in input order; the items that need math-verify run in parallel in the workers."""
        return grade_many(items, self)


_shared: GradingPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> GradingPool:
    """The process-wide pool used off the main thread (verl's reward threads, async actors); started lazily."""
    global _shared
    with _shared_lock:
        if _shared is None:
            workers = int(os.environ.get("DPPO_BENCH_GRADING_WORKERS", 0)) or min(4, default_workers())
            _shared = GradingPool(workers).start()
            atexit.register(_shared.close)
        return _shared
