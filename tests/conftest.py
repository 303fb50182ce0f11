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
