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
import math
import multiprocessing as mp
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Literal

from dppo_bench.eval import verifier
from dppo_bench.eval.extract import as_integer, extract_answer

AnswerType = Literal["auto", "int", "math"]
ANSWER_TYPES: tuple[str, ...] = ("auto", "int", "math")
DEFAULT_TIMEOUT_S = 5  # math-verify's own default per parse and per comparison (SIGALRM takes whole seconds)
_GOLD_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    timeout: bool  # the verifier gave no verdict: its time limit, the pool's hard limit, or a crashed worker
    extracted: str | None  # the final answer read from the completion; None = it states none


GradeItem = tuple[str, str, str]  # (completion, answer, answer_type)


def answer_kind(answer: str, answer_type: str) -> Literal["int", "math"]:
    """How an answer compares: "int" (as integers, math-verify only for non-plain predictions) or "math"."""
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type {answer_type!r} is not one of {', '.join(ANSWER_TYPES)}")
    is_integer = bool(_GOLD_INTEGER.fullmatch(answer.strip()))
    if answer_type == "int" and not is_integer:
        raise ValueError(f"answer {answer!r} is not an integer but answer_type is 'int'")
    if answer_type == "math":
        return "math"
    return "int" if is_integer else "math"


def decide(completion: str, answer: str, answer_type: str = "auto") -> tuple[Verdict | None, str | None]:
    """The verdict when no verifier is needed, else (None, extracted answer for math-verify)."""
    extraction = extract_answer(completion)
    if extraction is None:
        return Verdict(False, False, None), None
    if answer_kind(answer, answer_type) == "int":
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


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_WORKER_CMD = "import sys; from dppo_bench.eval.grading import serve; serve(int(sys.argv[1]), int(sys.argv[2]))"


def serve(read_fd: int, write_fd: int) -> None:
    """A worker process's loop, on its main thread, so math-verify's SIGALRM timeouts fire."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    while True:
        try:
            task = inbox.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if task is None:
            return
        prediction, answer, timeout_s = task
        try:
            outbox.send(("ok", verifier.check(prediction, answer, timeout_s)))
        except Exception as e:  # noqa: BLE001  (reported to the caller as an error, not a verdict)
            outbox.send(("error", f"{type(e).__name__}: {e}"))


@dataclass
class _Task:
    future: Future
    payload: tuple[str, str, int]
    hard_limit_s: float


class _Worker:
    """A fresh interpreter (not a fork: safe under threads, Ray and torch, and it never re-imports __main__)."""

    def __init__(self):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CMD, str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.conn = Connection(from_child_r, writable=False)  # what the dispatcher waits on
        self.task: _Task | None = None
        self.deadline = math.inf

    def send(self, payload) -> None:
        self.outbox.send(payload)

    def stop(self, kill: bool) -> None:
        if not kill:
            try:
                self.outbox.send(None)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                kill = True
        if kill:
            self.proc.kill()
            self.proc.wait()
        self.outbox.close()
        self.conn.close()


class GradingPool:
    """Worker processes that run math-verify; thread-safe; one task in flight per worker.

    ``hard_timeout_s`` bounds one item's wall-clock time whatever happens inside math-verify (default: four times
    its own limit plus 5 s, above the worst legitimate parse + comparisons).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout_s: int = DEFAULT_TIMEOUT_S,
        hard_timeout_s: float | None = None,
    ):
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if int(timeout_s) != timeout_s or timeout_s < 1:
            raise ValueError(f"timeout_s must be a whole number of seconds >= 1 (SIGALRM), got {timeout_s}")
        self.workers = workers or default_workers()
        self.timeout_s = int(timeout_s)
        self.hard_timeout_s = hard_timeout_s
        self._lock = threading.Lock()
        self._queue: deque[_Task] = deque()
        self._pool: list[_Worker] = []
        self._wake_r, self._wake_w = mp.Pipe(duplex=False)
        self._thread: threading.Thread | None = None
        self._closing = False
        self.restarts = 0  # workers replaced after a hard timeout or a crash

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> GradingPool:
        if self._thread is None:
            self._pool = [_Worker() for _ in range(self.workers)]
            self._thread = threading.Thread(target=self._dispatch, name="dppo-bench-grading-pool", daemon=True)
            self._thread.start()
            # Warm every worker (imports, first parse) so the first real items do not pay for it.
            for f in [self.check("1", "1", self.timeout_s) for _ in range(self.workers)]:
                f.result()
        return self

    def close(self) -> None:
        if self._thread is None:
            return
        with self._lock:
            self._closing = True
        self._wake()
        self._thread.join()
        for w in self._pool:
            w.stop(kill=False)
        self._pool, self._thread = [], None
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> GradingPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- grading ---------------------------------------------------------------------------------------------
    def check(self, prediction: str, answer: str, timeout_s: int | None = None) -> Future:
        """Future of math-verify's (correct, timeout) for an extracted prediction."""
        t = int(timeout_s or self.timeout_s)
        hard = self.hard_timeout_s if self.hard_timeout_s is not None else 4 * t + 5
        task = _Task(Future(), (prediction, answer, t), hard)
        with self._lock:
            if self._closing or self._thread is None:
                raise RuntimeError("the grading pool is not running (use it as a context manager)")
            self._queue.append(task)
        self._wake()
        return task.future

    def grade(self, completion: str, answer: str, answer_type: str = "auto") -> Verdict:
        return self.grade_many([(completion, answer, answer_type)])[0]

    def grade_many(self, items: Iterable[GradeItem]) -> list[Verdict]:
        """Verdicts in input order; items needing math-verify run in parallel in the workers."""
        verdicts: list[Verdict | None] = []
        pending: list[tuple[int, str, Future]] = []
        for i, (completion, answer, answer_type) in enumerate(items):
            verdict, prediction = decide(completion, answer, answer_type)
            verdicts.append(verdict)
            if verdict is None:
                pending.append((i, prediction, self.check(prediction, answer)))
        for i, prediction, future in pending:
            correct, timed_out = future.result()
            verdicts[i] = Verdict(correct, timed_out, prediction)
        return verdicts  # type: ignore[return-value]

    # -- dispatcher thread -----------------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass  # closing

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                for w in list(self._pool):
                    if w.task is None and self._queue:
                        self._assign(w, self._queue.popleft())
                busy = [w for w in self._pool if w.task is not None]
                if self._closing and not busy and not self._queue:
                    return
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in busy) - now) if busy else None
            ready = wait([w.conn for w in busy] + [self._wake_r], timeout)
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            for w in busy:
                if w.conn in ready:
                    self._collect(w)
                elif time.monotonic() >= w.deadline:
                    self._replace(w)

    def _assign(self, w: _Worker, task: _Task) -> None:
        try:
            w.send(task.payload)
        except OSError:  # the worker died while idle: replace it and give the item to the new one
            w = self._respawn(w)
            w.send(task.payload)
        w.task, w.deadline = task, time.monotonic() + task.hard_limit_s

    def _collect(self, w: _Worker) -> None:
        task = w.task
        try:
            status, value = w.conn.recv()
        except (EOFError, OSError):  # the worker crashed on this item
            self._replace(w)
            return
        w.task, w.deadline = None, math.inf
        if status == "ok":
            task.future.set_result(value)
        else:
            task.future.set_exception(RuntimeError(f"grading worker failed on {task.payload[0][:80]!r}: {value}"))

    def _replace(self, w: _Worker) -> None:
        """Kill a worker that overran its hard limit or died; its item is recorded as a timeout."""
        task = w.task
        self._respawn(w)
        task.future.set_result((False, True))

    def _respawn(self, w: _Worker) -> _Worker:
        w.stop(kill=True)
        fresh = _Worker()
        self._pool[self._pool.index(w)] = fresh
        self.restarts += 1
        return fresh


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
