"""A Ray cluster that ``ray start --head`` left running on the machine, as a user's own on a workstation or a shared
login node: ``ray.init()`` without an address joins it. RAY_TMPDIR (where Ray looks for it) keeps it apart from any
other Ray on the machine: only processes given that variable can find it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")


@dataclass(frozen=True)
class ForeignRay:
    address: str  # the GCS address ray.init() without an address would join
    tmpdir: str  # RAY_TMPDIR under which it is found
    process: subprocess.Popen

    def alive(self) -> bool:
        return self.process.poll() is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def foreign_ray_head(port: int | None = None, timeout_s: float = 120.0) -> Iterator[ForeignRay]:
    """``port``: its GCS port (default: a free one; 6379 is where Ray's own default would put it)."""
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay under 108 characters
    port = port or _free_port()
    argv = [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false"]
    head = subprocess.Popen(
        [*argv, "--block"],
        env={**_env(), "RAY_TMPDIR": tmp},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = Path(tmp) / "ray" / "ray_current_cluster"  # where ray.init() without an address looks
    try:
        deadline = time.monotonic() + timeout_s
        while not marker.is_file():
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start --head did not come up (exit code {head.poll()})")
            time.sleep(0.5)
        yield ForeignRay(marker.read_text().strip(), tmp, head)
    finally:
        head.terminate()
        head.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
