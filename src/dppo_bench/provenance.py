"""Provenance of a run: code version, package versions, hardware, times."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib import metadata

from dppo_bench.config import REPO_ROOT

PACKAGES = ("dppo-bench", "torch", "verl", "transformers", "math-verify", "antlr4-python3-runtime", "vllm", "datasets")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def git_state() -> dict:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""

    sha = git("rev-parse", "HEAD")
    return {"sha": sha or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no")) if sha else None}


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def hardware() -> dict:
    import torch

    info = {"machine": platform.machine(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def provenance() -> dict:
    return {
        "git": git_state(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "hardware": hardware(),
        "host": platform.node(),
    }
