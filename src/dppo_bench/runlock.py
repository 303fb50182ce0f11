"""One writer per run directory: ``dppo-bench train`` holds an exclusive lock on ``RUN_DIR/train.lock`` while it
writes the run, on both backends (and ``dppo-bench evaluate`` one on each benchmark's evaluation directory).

The lock is the kernel's (``flock``), not the file's existence: it is released when its holder exits, however it
exits, so a killed trainer never leaves a run locked and its rerun resumes. The file only records who holds it
(pid, host, start, command), for the message a second trainer stops with.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dppo_bench.io import naming
from dppo_bench.provenance import now

LOCK_NAME = "train.lock"


class RunLockedError(RuntimeError):
    """Another process is writing this run directory."""


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on {info['host']}, started {info['started_at']}: {info['command']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not recorded itself yet"


@contextmanager
def run_lock(run_dir: Path | str, name: str = LOCK_NAME) -> Iterator[int]:
    """Hold the lock ``run_dir/name`` for the ``with`` block; one already held raises :class:`RunLockedError`.
    Yields the lock's file descriptor: a child process given it (``pass_fds``) holds the lock too, until it exits,
    so a worker that outlives its killed parent still keeps a second writer out."""
    path = Path(run_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path.read_text())
            raise RunLockedError(
                f"{run_dir}: this run is being written by another process ({holder}); refusing to write it too. "
                f"Wait for it to end, or stop it; its lock ({path}) is released when it exits."
            ) from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": now(), "command": sys.argv}
        with naming(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would let two processes lock two files)
