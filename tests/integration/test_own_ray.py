"""A one-node verl run starts a Ray of its own even when ``ray start`` left a cluster running on the machine (a
user's own, on a workstation or a shared login node): the launcher's trainer runs what verl's ``main_ppo`` does,
``ray.init(num_cpus=...)`` without an address, which would join that cluster and fail there."""

import json
import os
import subprocess
import sys

import pytest
from ray_fixtures import foreign_ray_head

from dppo_bench.verl_launch import launch as L

# verl 0.9.1's main_ppo: ray.init(**config.ray_kwargs.ray_init) with num_cpus set and no address
DRIVER = (
    "import json, ray\n"
    "ray.init(num_cpus=1, include_dashboard=False, logging_level='ERROR')\n"
    "print(json.dumps({'gcs': ray.get_runtime_context().gcs_address}))\n"
    "ray.shutdown()\n"
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def foreign_ray():
    with foreign_ray_head() as head, pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TMPDIR", head.tmpdir)  # this process's and its children's Ray finds the head
        env.delenv("RAY_ADDRESS", raising=False)
        yield head


def test_a_one_node_run_starts_its_own_ray_beside_a_running_cluster(foreign_ray, capsys):
    code, where = L.run_trainer([sys.executable, "-c", DRIVER], dict(os.environ), 1, 1)
    text = capsys.readouterr().out  # the launcher passes the trainer's output on
    assert code == 0, text[-3000:]
    own = json.loads(text.strip().splitlines()[-1])["gcs"]
    assert own != foreign_ray.address and where["ray"] == "started by verl" and foreign_ray.alive()


def test_without_the_launcher_the_same_driver_joins_the_running_cluster_and_fails(foreign_ray):
    """The failure the launcher prevents, on the same machine state (so the test above cannot pass by luck)."""
    proc = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "num_cpus" in proc.stderr, proc.stderr[-3000:]
