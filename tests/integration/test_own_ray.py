"""A one-node verl run starts a Ray of its own even when ``ray start`` left a cluster running on the machine (a
user's own, on a workstation or a shared login node): the launcher's trainer runs what verl's ``main_ppo`` does,
``ray.init(num_cpus=...)`` without an address, which would join that cluster and fail there."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dppo_bench.verl_plugin import launch as L

RAY = Path(sys.executable).with_name("ray")
# verl 0.9.1's main_ppo: ray.init(**config.ray_kwargs.ray_init) with num_cpus set and no address
DRIVER = (
    "import json, ray\n"
    "ray.init(num_cpus=1, include_dashboard=False, logging_level='ERROR')\n"
    "print(json.dumps({'gcs': ray.get_runtime_context().gcs_address}))\n"
    "ray.shutdown()\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def foreign_ray():
    """``ray start --head`` left running; RAY_TMPDIR keeps it (and the runs that would find it) apart from any other
    Ray on this machine. A short directory: Ray's socket paths must stay under 108 characters."""
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TMPDIR", tmp)
        env.delenv("RAY_ADDRESS", raising=False)
        yield from _head(tmp)


def _head(tmp: str):
    port = free_port()
    head = subprocess.Popen(
        [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false", "--block"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = Path(tmp) / "ray" / "ray_current_cluster"  # where ray.init() without an address looks
    deadline = time.monotonic() + 120
    while not marker.is_file():
        assert head.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
        time.sleep(0.5)
    yield marker.read_text().strip()
    head.terminate()
    head.wait(timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_one_node_run_starts_its_own_ray_beside_a_running_cluster(foreign_ray, tmp_path):
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        code, where = L.run_trainer(
            [sys.executable, "-c", DRIVER], dict(os.environ), 1, 1, popen=lambda argv, **kw: subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, **kw
            )
        )
    text = log.read_text()
    assert code == 0, text[-3000:]
    own = json.loads(text.strip().splitlines()[-1])["gcs"]
    assert own != foreign_ray and where["ray"] == "started by verl"


@pytest.mark.slow
def test_without_the_launcher_the_same_driver_joins_the_running_cluster_and_fails(foreign_ray):
    """The failure the launcher prevents, shown on the same machine state (so the test above cannot pass by luck)."""
    proc = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "num_cpus" in proc.stderr, proc.stderr[-3000:]
