"""Worker processes that run math-verify (``verifier.check``) on their own main thread, with hard limits.

Each worker is a fresh interpreter (not a fork: safe when the caller has threads, Ray or torch, and it never
re-imports the caller's ``__main__``), fed through a pipe. A dispatcher thread keeps up to ``PIPELINE_DEPTH``
items queued in each worker's pipe (sent in chunks of consecutive items, reported back in batches), so a worker
never waits for the parent between items. It also enforces a hard wall-clock limit on the item at the head of
each worker's queue: a worker that overruns it (stuck in one long C call, where no signal gets through) or
crashes is killed and replaced, that item is recorded as a timeout, and the items queued behind it are given to
other workers. Thread-safe: ``check`` may be called from any thread.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection

from dppo_bench.eval import verifier

PIPELINE_DEPTH = 16  # items queued per worker, so it never waits for the dispatcher between items
CHUNK = 8  # items per message: consecutive items (one problem's) go to one worker, which keeps its caches warm
FLUSH_S = 0.02  # a worker reports its finished items when its chunk ends, and at least this often
LARGE_PAYLOAD = 8192  # characters; larger items go alone to an idle worker (a full pipe would block the dispatcher)
_WORKER_CMD = "import sys; from dppo_bench.eval.pool import serve; serve(int(sys.argv[1]), int(sys.argv[2]))"
TIMEOUT_RESULT = (False, True)  # (correct, timeout) of an item the worker did not finish
STARTUP_LIMIT_S = 120.0  # a worker that is not ready (interpreter + math-verify import) by then counts as crashed


def serve(read_fd: int, write_fd: int) -> None:
    """A worker process's loop: items in order, on the main thread, so math-verify's SIGALRM timeouts fire."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    verifier.check("1", "1", 5)  # import math-verify and parse once before the first item's clock starts
    outbox.send(("ready", []))
    while True:
        try:
            task = inbox.recv()  # a list of (prediction, answer, timeout_s), or None to stop
        except (EOFError, OSError):
            return  # the parent is gone
        if task is None:
            return
        results: list[tuple[str, object]] = []
        flushed = time.monotonic()
        for prediction, answer, timeout_s in task:  # a chunk, in order
            try:
                results.append(("ok", verifier.check(prediction, answer, timeout_s)))
            except Exception as e:  # noqa: BLE001  (reported to the caller as an error, not a verdict)
                results.append(("error", f"{type(e).__name__}: {e}"))
            if time.monotonic() - flushed >= FLUSH_S:  # finished items are reported at least this often
                outbox.send(("results", results))
                results, flushed = [], time.monotonic()
        if results:
            outbox.send(("results", results))


@dataclass
class _Task:
    future: Future
    payload: tuple[str, str, int]
    hard_limit_s: float

    @property
    def size(self) -> int:
        return len(self.payload[0]) + len(self.payload[1])


class _Worker:
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
        self.inflight: deque[_Task] = deque()
        self.spawned = time.monotonic()
        self.ready = False  # it has imported math-verify; until then no item's clock runs
        self.head_started = 0.0  # when the worker began the item at the head of ``inflight``

    @property
    def deadline(self) -> float:
        if not self.inflight:
            return math.inf
        if not self.ready:
            return self.spawned + STARTUP_LIMIT_S
        return self.head_started + self.inflight[0].hard_limit_s

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


class VerifierPool:
    """``check(prediction, answer, timeout_s)`` -> Future of math-verify's (correct, timeout), in workers.

    ``hard_timeout_s`` bounds one item's wall-clock time whatever happens inside math-verify (default: four times
    its own limit plus 5 s, above the worst legitimate parse and comparisons).
    """

    def __init__(self, workers: int, *, timeout_s: int, hard_timeout_s: float | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if int(timeout_s) != timeout_s or timeout_s < 1:
            raise ValueError(f"timeout_s must be a whole number of seconds >= 1 (SIGALRM), got {timeout_s}")
        self.workers = workers
        self.timeout_s = int(timeout_s)
        self.hard_timeout_s = hard_timeout_s
        self.restarts = 0  # workers replaced after a hard timeout or a crash
        self._lock = threading.Lock()
        self._queue: deque[_Task] = deque()
        self._pool: list[_Worker] = []
        self._wake_r, self._wake_w = mp.Pipe(duplex=False)
        self._thread: threading.Thread | None = None
        self._closing = False

    def start(self):
        if self._thread is None:
            self._pool = [_Worker() for _ in range(self.workers)]
            self._thread = threading.Thread(target=self._dispatch, name="dppo-bench-verifier-pool", daemon=True)
            self._thread.start()
            # Warm every worker (imports, first parse) so that the first real items do not pay for it.
            for f in [self.check("1", "1") for _ in range(self.workers)]:
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

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self, prediction: str, answer: str, timeout_s: int | None = None) -> Future:
        return self.check_many([(prediction, answer)], timeout_s)[0]

    def check_many(self, pairs: list[tuple[str, str]], timeout_s: int | None = None) -> list[Future]:
        if not pairs:
            return []
        t = int(timeout_s or self.timeout_s)
        hard = self.hard_timeout_s if self.hard_timeout_s is not None else 4 * t + 5
        tasks = [_Task(Future(), (prediction, answer, t), hard) for prediction, answer in pairs]
        with self._lock:
            if self._closing or self._thread is None:
                raise RuntimeError("the pool is not running (use it as a context manager)")
            self._queue.extend(tasks)
        self._wake()
        return [task.future for task in tasks]

    # -- the dispatcher thread -------------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass  # closing

    def _dispatch(self) -> None:
        poller = select.poll()  # kept across iterations: connection.wait() would build a selector every call
        poller.register(self._wake_r.fileno(), select.POLLIN)
        polled: dict[int, _Worker] = {}
        while True:
            with self._lock:
                self._feed()
                busy = [w for w in self._pool if w.inflight]
                if self._closing and not busy and not self._queue:
                    return
                for w in self._pool:
                    if w.conn.fileno() not in polled or polled[w.conn.fileno()] is not w:
                        polled[w.conn.fileno()] = w
                        poller.register(w.conn.fileno(), select.POLLIN)
            deadline = min((w.deadline for w in busy), default=math.inf)
            timeout_ms = None if deadline == math.inf else max(0, math.ceil((deadline - time.monotonic()) * 1000))
            ready = {fd for fd, _ in poller.poll(timeout_ms)}
            if self._wake_r.fileno() in ready:
                while select.select([self._wake_r], [], [], 0)[0]:
                    self._wake_r.recv_bytes()
            with self._lock:
                for fd in [fd for fd, w in polled.items() if w not in self._pool]:  # replaced workers
                    poller.unregister(fd)
                    del polled[fd]
                for w in list(self._pool):
                    if w.conn.fileno() in ready:
                        self._collect(w)
                    elif time.monotonic() >= w.deadline:
                        self._fail(w)

    def _feed(self) -> None:
        """Hand queued items out in chunks, round-robin, up to PIPELINE_DEPTH per worker."""
        sent = True
        while self._queue and sent:
            sent = False
            for i in range(len(self._pool)):
                # small queues are spread over all workers rather than sent to the first one
                size = min(CHUNK, max(1, -(-len(self._queue) // len(self._pool))))
                chunk = self._take(self._pool[i], size)
                if chunk:
                    self._send(i, chunk)
                    sent = True

    def _take(self, w: _Worker, size: int) -> list[_Task]:
        chunk: list[_Task] = []
        room = min(size, PIPELINE_DEPTH - len(w.inflight))
        while self._queue and len(chunk) < room:
            large = self._queue[0].size > LARGE_PAYLOAD
            if large and (w.inflight or chunk):
                break
            chunk.append(self._queue.popleft())
            if large:
                break
        return chunk

    def _send(self, i: int, chunk: list[_Task]) -> None:
        w = self._pool[i]
        if not w.inflight:
            w.head_started = time.monotonic()
        w.inflight.extend(chunk)
        try:
            w.outbox.send([task.payload for task in chunk])
        except OSError:  # the worker died: the chunk goes back to the queue and the worker is replaced
            for _ in chunk:
                w.inflight.pop()
            self._queue.extendleft(reversed(chunk))
            if w.inflight:
                self._fail(w)  # it died on its head item
            else:
                self._respawn(w)

    def _collect(self, w: _Worker) -> None:
        while select.select([w.conn], [], [], 0)[0]:  # Connection.poll() would build a selector every call
            try:
                kind, results = w.conn.recv()
            except (EOFError, OSError):  # the worker died (on its head item, if it has one)
                if w.inflight:
                    self._fail(w)
                else:
                    self._respawn(w)
                return
            w.ready = w.ready or kind == "ready"
            for status, value in results:
                task = w.inflight.popleft()
                if status == "ok":
                    task.future.set_result(value)
                else:
                    error = RuntimeError(f"verifier worker failed on {task.payload[0][:80]!r}: {value}")
                    task.future.set_exception(error)
            w.head_started = time.monotonic()  # the next item began at most this long ago

    def _fail(self, w: _Worker) -> None:
        """Kill a worker that overran its hard limit or died: its head item is a timeout, the others requeue."""
        head = w.inflight.popleft()
        self._queue.extendleft(reversed(w.inflight))
        self._respawn(w)
        head.future.set_result(TIMEOUT_RESULT)

    def _respawn(self, w: _Worker) -> None:
        w.stop(kill=True)
        self._pool[self._pool.index(w)] = _Worker()
        self.restarts += 1
