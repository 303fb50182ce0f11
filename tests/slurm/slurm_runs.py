"""What SLURM itself says of a Snakemake run's jobs (squeue, scontrol), and which of their processes still live."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def snakemake_on_slurm(workdir: Path, profile: Path, *args: str, env: dict | None = None) -> Iterator[Popen]:
    """``snakemake --profile PROFILE ARGS`` in ``workdir`` (the plugin keeps its logs in the working directory),
    running while the block runs; its output goes to ``workdir/snakemake.out``. If it still runs at the end (a
    failed test), it is interrupted as Ctrl-C would (Snakemake then cancels its SLURM jobs) and killed after 60 s;
    any job of its run left in the queue is cancelled."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--profile", str(profile), *args]
    base = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with (workdir / "snakemake.out").open("a") as out:
        proc = Popen(cmd, cwd=workdir, env={**base, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for uuid in run_uuids((workdir / "snakemake.out").read_text()):
                subprocess.run(["scancel", "--name", uuid], capture_output=True)


def finish(proc: Popen, workdir: Path, timeout: float) -> tuple[int, str]:
    proc.wait(timeout=timeout)
    return proc.returncode, (workdir / "snakemake.out").read_text()


def run_uuids(output: str) -> list[str]:
    """The SLURM run ids of Snakemake's runs (each run's jobs carry its id as their job name)."""
    return re.findall(r"SLURM run ID: (\S+)", output)


def squeue(*args: str) -> list[dict[str, str]]:
    """squeue's rows (every state: finished jobs stay listed for MinJobAge seconds)."""
    fields = ("id", "name", "comment", "state", "nodes", "nodelist", "cpus")
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%j|%k|%T|%D|%N|%C", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]


def jobs_of_run(uuid: str) -> list[dict[str, str]]:
    return squeue("--name", uuid)


def scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


@dataclass
class QueueWatch:
    """Polls squeue while a run goes on: the states each job was seen in."""

    period_s: float = 1.0
    seen: dict[str, set[str]] = field(default_factory=dict)

    def __enter__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            for job in squeue("-t", "PENDING,RUNNING"):
                self.seen.setdefault(job["id"], set()).add(job["state"])
            self._stop.wait(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def job_processes(job_ids: set[str]) -> list[str]:
    """Live processes started inside any of these SLURM jobs (SLURM_JOB_ID in their environment): job steps, the
    launcher, Ray's daemons and workers. Read from /proc; nothing is signalled."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        ids = {v.split(b"=", 1)[1].decode() for v in env if v.startswith((b"SLURM_JOB_ID=", b"SLURM_JOBID="))}
        if ids & job_ids:
            found.append(f"{proc.name} {cmd[:200]}")
    return found


def wait_until(condition, timeout: float, what: str, period: float = 1.0, proc: Popen | None = None):
    """``condition()``'s first true value; an error after ``timeout``, or as soon as ``proc`` (the snakemake run
    that should bring it about) has exited."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: snakemake exited with {proc.returncode} first")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s")
        time.sleep(period)
    return value
