"""Driving the pipeline from tests: snakemake in a fresh directory with this checkout's Snakefile."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the venv's bin first: the rules call `dppo-bench`
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def snakemake(workdir, *args, timeout: int = 1800) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)


def job_counts(stdout: str) -> dict[str, int]:
    """The "Job stats" table of a (dry) run, without its total."""
    table = stdout.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}
