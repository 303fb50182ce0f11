"""math-verify in worker processes (a ``pebble`` process pool), with verdicts that do not depend on load.

Each worker is a fresh interpreter (spawned, not forked: safe when the caller has threads, Ray or torch) that runs
``verifier.check`` on its main thread, where the CPU-time limit works. Pairs go to the workers in chunks that
share one gold answer, so a worker parses each gold once (``verifier``'s cache). A chunk that overruns its
wall-clock limit (a worker stuck in one long C call, where no signal gets through) has its worker killed and
replaced by pebble; a worker that dies is replaced too.

A pair that timed out in that first pass (its CPU-time limit, its chunk's wall-clock limit, a dead worker) is
retried once, alone, with ``RETRY_FACTOR`` times the CPU-time budget, before it is recorded as a timeout. With CPU
limits and that retry, a pair times out only when it needs more CPU time than the retry allows, on an idle
machine or on a busy one: the same samples give the same verdicts.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import defaultdict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import pebble

from dppo_bench.eval import verifier

RETRY_FACTOR = 4  # the retry's CPU-time and wall-clock budgets, in multiples of the first pass's
CHUNK = 16  # pairs per task: amortizes the hand-over, small enough to spread one problem over the workers
Pair = tuple[str, str]  # (prediction, gold answer)
Result = tuple[bool, bool]  # (correct, timeout)
TIMEOUT: Result = (False, True)


def _warm_worker() -> None:
    """Import math-verify and parse once before the first task (its clock would otherwise include this)."""
    verifier.check("1", "1", 5.0)


def _check_chunk(pairs: list[Pair], cpu_limit_s: float) -> list[Result]:
    return [verifier.check(prediction, answer, cpu_limit_s) for prediction, answer in pairs]


def default_wall_limit(cpu_limit_s: float) -> float:
    """Wall-clock limit of one chunk: far above what CPU-limited work needs on an idle machine."""
    return 4 * cpu_limit_s + 5


class VerifierPool:
    """``check_many([(prediction, answer), ...])`` -> [(correct, timeout), ...] by math-verify in ``workers``
    processes; thread-safe (verl calls it from its reward threads)."""

    def __init__(self, workers: int, *, cpu_limit_s: float, wall_limit_s: float | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.cpu_limit_s = cpu_limit_s
        self.wall_limit_s = wall_limit_s or default_wall_limit(cpu_limit_s)
        self._pool: pebble.ProcessPool | None = None
        self._retry_lock = threading.Lock()  # one retry at a time: "alone"

    def start(self) -> VerifierPool:
        if self._pool is None:
            self._pool = pebble.ProcessPool(
                self.workers, initializer=_warm_worker, context=multiprocessing.get_context("spawn")
            )
            for f in [self._pool.schedule(_check_chunk, ([("1", "1")], 5.0)) for _ in range(self.workers)]:
                f.result()  # every worker started and warm: the first real chunks do not pay for it
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> VerifierPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def check_many(self, pairs: list[Pair], cpu_limit_s: float | None = None) -> list[Result]:
        """Results in input order: a first pass in parallel, then one retry alone for each pair that timed out.
        ``cpu_limit_s`` overrides the pool's limit for these pairs (their wall-clock limit follows it)."""
        cpu = cpu_limit_s or self.cpu_limit_s
        wall = self.wall_limit_s if cpu_limit_s is None else default_wall_limit(cpu_limit_s)
        if self._pool is None:
            raise RuntimeError("the pool is not running (use it as a context manager)")
        by_answer: dict[str, list[int]] = defaultdict(list)
        for i, (_, answer) in enumerate(pairs):
            by_answer[answer].append(i)
        chunks = [idx[k : k + CHUNK] for idx in by_answer.values() for k in range(0, len(idx), CHUNK)]
        futures = [self._submit([pairs[i] for i in chunk], cpu, wall) for chunk in chunks]
        results: list[Result] = [TIMEOUT] * len(pairs)
        for chunk, future in zip(chunks, futures, strict=True):
            for i, result in zip(chunk, _chunk_results(future, len(chunk)), strict=True):
                results[i] = result
        for i, result in enumerate(results):
            if result[1]:
                results[i] = self._retry(pairs[i], cpu, wall)
        return results

    def _submit(self, pairs: list[Pair], cpu_limit_s: float, wall_limit_s: float) -> Future:
        return self._pool.schedule(_check_chunk, (pairs, cpu_limit_s), timeout=wall_limit_s)

    def _retry(self, pair: Pair, cpu_limit_s: float, wall_limit_s: float) -> Result:
        with self._retry_lock:
            future = self._submit([pair], RETRY_FACTOR * cpu_limit_s, RETRY_FACTOR * wall_limit_s)
            return _chunk_results(future, 1)[0]


def _chunk_results(future: Future, size: int) -> list[Result]:
    """A chunk's results; all timeouts when its worker was killed at the wall-clock limit or died."""
    try:
        return future.result()
    except (FutureTimeout, pebble.ProcessExpired):
        return [TIMEOUT] * size
