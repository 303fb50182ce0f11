"""The test SLURM (cluster.sh): started once for the session, stopped at its end. Where it cannot run (not root, not
Debian, someone else's SLURM) its tests skip with the reason; under CI=true that is a failure."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLUSTER = HERE / "cluster.sh"
LOCK = Path("/var/tmp/dppo-bench-slurm.lock")  # one session at a time uses the machine's test cluster
LOCK_WAIT_S = 1800


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: runs jobs on the test SLURM of tests/slurm/cluster.sh")


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slurm)


def _unavailable(why: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"the SLURM tests must run in CI, and the test cluster cannot start here: {why}")
    pytest.skip(f"no test SLURM: {why}")


def _locked(path: Path, wait_s: float):
    handle = path.open("w")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"another test session held {path} for {wait_s:.0f} s")
            time.sleep(5)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running two-node cluster (node1, node2, partition debug); every job cancelled and every daemon stopped at
    the end. The start and stop times are printed (pytest -s)."""
    check = subprocess.run([str(CLUSTER), "check"], capture_output=True, text=True)
    if check.returncode:
        _unavailable(check.stdout.strip() or check.stderr.strip())
    lock = _locked(LOCK, LOCK_WAIT_S)
    try:
        started = time.monotonic()
        start = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True, timeout=900)
        if start.returncode:
            subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True, timeout=300)
            pytest.fail(f"tests/slurm/cluster.sh start failed:\n{start.stderr[-3000:]}")
        print(f"\nslurm-ci start: {time.monotonic() - started:.1f} s; {start.stderr.strip().splitlines()[-1]}")
        yield
        stopped = time.monotonic()
        stop = subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True, timeout=300)
        print(f"\nslurm-ci stop: {time.monotonic() - stopped:.1f} s")
        assert stop.returncode == 0, f"tests/slurm/cluster.sh stop failed:\n{stop.stderr[-3000:]}"
    finally:
        lock.close()


def merged(base: dict, overlay: dict) -> dict:
    """``base`` with ``overlay``'s keys: nested mappings merged key by key, a null removing the key."""
    out = dict(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture
def slurm_profile(slurm_cluster, tmp_path) -> Path:
    """profiles/slurm with the test cluster's values (ci_overlay.yaml), as a profile directory."""
    profile = merged(
        yaml.safe_load((REPO / "profiles/slurm/profile.yaml").read_text()),
        yaml.safe_load((HERE / "ci_overlay.yaml").read_text()),
    )
    directory = tmp_path / "profile"
    directory.mkdir()
    (directory / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return directory
