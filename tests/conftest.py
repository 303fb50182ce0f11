"""Shared fixtures. Tests run on CPU, deterministic, with torch on 2 threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (as CI has it), or wherever DPPO_BENCH_SHARED_DATA points
SHARED_DATA = Path(os.environ.get("DPPO_BENCH_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

torch.set_num_threads(min(2, os.cpu_count() or 1))

# Ray starts its workers at niceness 15. Beside the tests on the other xdist workers (niceness 0) the verl runs, the
# suite's longest path, would then get only the cores those leave idle: every process a test starts inherits this.
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, the real benchmark files. Skips when absent, except in CI."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SHARED_DATA} is missing; CI must provide ../shared/data")
        pytest.skip(f"{SHARED_DATA} is not present")
    return SHARED_DATA


# `make test` runs the suite on pytest-xdist workers (-n, --no-loadscope-reorder). Each file goes to one worker, as its
# module fixtures (a verl run, a pipeline) are built once per file; the SLURM tests go together, as their cluster is
# one per session. The tests that start vLLM on the real LM go together too, the verl run first: the in-process
# engine probe leaves about 3 GB in its worker until the session ends, which beside the real-LM verl run and one of
# the toy module's would leave the 24 GB machine too little (tests/verl_memory.py). The longest groups start first, so
# that no worker begins one of them when the others are nearly done.
REAL_LM_VLLM = ("tests/integration/test_verl_cpu_smollm.py", "tests/integration/test_engine_probe.py")
LONGEST_FIRST = ("tests/integration/test_verl_cpu_pipeline.py", "real LM on vLLM", "tests/slurm")


def _worker_group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path in REAL_LM_VLLM:
        return "real LM on vLLM"
    return "tests/slurm" if path.startswith("tests/slurm/") else path


def pytest_collection_modifyitems(items):
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    files = {path: i for i, path in enumerate(REAL_LM_VLLM)}

    def key(item):
        path = item.nodeid.split("::", 1)[0]
        return rank.get(_worker_group(item.nodeid), len(rank)), files.get(path, 0)

    items.sort(key=key)  # stable: the rest as collected


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _worker_group(nodeid)

    return ByWorkerGroup(config, log)
