"""Driving the pipeline from tests: snakemake in a fresh directory with this checkout's Snakefile, reading its
recipes from the checkout or from a copy of them that the test may change (``recipe_root``)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from dppo_bench.config.roots import CONFIG_ROOT, ROOT_DIRS, ROOT_VARIABLE

REPO = Path(__file__).resolve().parents[1]
# the venv's bin first: the rules call `dppo-bench`
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def recipe_root(tmp: Path) -> Path:
    """A copy of every recipe directory (methods, settings, datasets, experiments, eval specs) under ``tmp``: a test
    adds or breaks files there, never in the checkout."""
    root = tmp / "recipe_root"
    for directory in ROOT_DIRS:
        shutil.copytree(directory, root / directory.relative_to(CONFIG_ROOT))
    return root


def snakemake(workdir, *args, root: Path | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir), *args]
    env = ENV if root is None else {**ENV, ROOT_VARIABLE: str(root)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def job_counts(stdout: str) -> dict[str, int]:
    """The "Job stats" table of a (dry) run, without its total."""
    table = stdout.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}
