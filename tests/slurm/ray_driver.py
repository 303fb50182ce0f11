"""The trainer of the two-node test, in place of ``python -m verl.trainer.main_ppo``: a Ray driver that joins the
cluster the launcher built in the SLURM allocation (RAY_ADDRESS), runs one task on each of its nodes, appends what
it saw to RAY_DRIVER_REPORT, then trains as tests/fake_main_ppo.py (verl's records, checkpoints and resume)."""

import json
import os
import runpy
import sys
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

FAKE_MAIN_PPO = Path(__file__).resolve().parents[1] / "fake_main_ppo.py"


@ray.remote(num_cpus=1)
def where() -> dict:
    """The SLURM node a Ray worker runs on: its raylet was started by ``srun -w <node> ray start``."""
    return {"slurm_node": os.environ.get("SLURMD_NODENAME"), "slurm_job": os.environ.get("SLURM_JOB_ID")}


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n["Alive"]]
    pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)) for n in alive]
    report = {
        "driver_node": os.environ.get("SLURMD_NODENAME"),
        "ray_address": os.environ["RAY_ADDRESS"],
        "gpus": sum(n["Resources"].get("GPU", 0) for n in alive),
        "workers": ray.get([task.remote() for task in pinned]),
    }
    ray.shutdown()
    with open(os.environ["RAY_DRIVER_REPORT"], "a") as f:
        f.write(json.dumps(report) + "\n")
    sys.argv = [str(FAKE_MAIN_PPO), *sys.argv[1:]]
    runpy.run_path(str(FAKE_MAIN_PPO), run_name="__main__")


if __name__ == "__main__":
    main()
