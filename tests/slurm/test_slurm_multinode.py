"""A two-node training job on the real SLURM: the plugin's mpi job over both nodes, the launcher's Ray bootstrap
(scontrol for the nodes, ``srun ray start`` on each, the driver on the head), ``scancel`` while it trains, and the
rerun that resumes from the last checkpoint, all with a Ray of a user's own running on the machine at Ray's default
port. The trainer is a Ray driver (ray_driver.py) that runs a task on each node and then writes verl's records as
tests/fake_main_ppo.py does: verl itself on two nodes does not fit CI."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray_fixtures import foreign_ray_head
from slurm_runs import finish, job_processes, jobs_of_run, run_uuids, snakemake_on_slurm, squeue, wait_until
from snakemake_fixtures import recipe_root
from verl_fixtures import write_parquet

from dppo_bench.config import SETTINGS_DIR, setting_data
from dppo_bench.config.roots import ROOT_VARIABLE
from dppo_bench.config.specs import load_any, load_benchmark
from dppo_bench.verl_launch.slurm import ray_port

RAY_DRIVER = Path(__file__).with_name("ray_driver.py")
SETTING, METHOD = "two_node_cpu", "dppo_binary_tv"
RUN = f"results/runs/{SETTING}/{METHOD}/seed0"


def two_node_setting(root: Path) -> dict:
    """The sanity setting's verl run on two CPU nodes (one logical GPU each), 6 steps, a checkpoint every 2."""
    data = setting_data(SETTINGS_DIR / "sanity_r1d_1p5b.yaml")
    data["display_name"] = "two CPU nodes (SLURM test)"
    data["train"].update(steps=6, save_every=2)
    data["eval"]["every"] = 2
    data["verl"].update(device="cpu", nodes=2, gpus_per_node=1, runtime_min=30)
    (root / "recipes/settings" / f"{SETTING}.yaml").write_text(yaml.safe_dump(data))
    return data


def prepared_inputs(work: Path, setting: dict) -> None:
    """The parquet files `dppo-bench data prepare` would write, with the data_source the launcher checks."""
    train = setting["verl"]["train_data"]
    write_parquet(work / f"results/data/verl/{train}.parquet", load_any(train).data_source)
    for b in setting["eval"]["online"]:
        write_parquet(work / f"results/data/verl/{b}.parquet", load_benchmark(b).data_source)


def running_job(work: Path) -> dict | None:
    uuids = run_uuids((work / "snakemake.out").read_text())
    return next((j for u in uuids[-1:] for j in jobs_of_run(u) if j["state"] == "RUNNING"), None)


@pytest.fixture
def users_ray():
    """A Ray cluster left running on the machine, both nodes' host, at Ray's default port."""
    with foreign_ray_head(port=6379) as head:
        yield head
        assert head.alive()


@pytest.mark.slow
def test_a_two_node_job_builds_ray_on_both_nodes_and_resumes_after_scancel(slurm_profile, users_ray, tmp_path):
    root, work, report = recipe_root(tmp_path), tmp_path / "work", tmp_path / "ray_driver.jsonl"
    prepared_inputs(work, two_node_setting(root))
    env = {
        ROOT_VARIABLE: str(root),
        "DPPO_BENCH_VERL_COMMAND": f"{sys.executable} {RAY_DRIVER}",
        "RAY_DRIVER_REPORT": str(report),
    }
    target = (f"{RUN}/train.completed", "--allowed-rules", "train")  # the inputs above stand in for data preparation
    run_dir = work / RUN

    # attempt 1: trains to step 4's checkpoint and hangs at step 5, until scancel
    with snakemake_on_slurm(work, slurm_profile, *target, env={**env, "FAKE_HANG_AT": "5"}) as first:
        job = wait_until(lambda: running_job(work), 300, "the training job running", proc=first)
        assert (job["nodes"], job["nodelist"]) == ("2", "node[1-2]")
        saved = run_dir / "checkpoints/global_step_4"
        wait_until(lambda: report.is_file() and saved.is_dir(), 300, "step 4 saved", proc=first)
        subprocess.run(["scancel", job["id"]], check=True)
        code, out = finish(first, work, timeout=300)
    assert code != 0 and f"SLURM-job '{job['id']}' failed" in out, out[-3000:]
    assert squeue("-j", job["id"])[0]["state"] == "CANCELLED"
    # the launcher, the trainer and Ray on both nodes end with the job
    wait_until(lambda: not job_processes({job["id"]}), 120, f"no process of job {job['id']} left")
    assert not (run_dir / "train.completed").exists()

    # attempt 2: the same command resumes from step 4 on a fresh Ray cluster and finishes
    with snakemake_on_slurm(work, slurm_profile, *target, env=env) as second:
        code, out = finish(second, work, timeout=600)
    assert code == 0, out[-4000:]
    (resumed,) = [j for j in jobs_of_run(run_uuids(out)[-1]) if j["state"] == "COMPLETED"]
    assert resumed["nodelist"] == "node[1-2]"

    seen = [json.loads(line) for line in report.read_text().splitlines()]
    assert [s["workers"][0]["slurm_job"] for s in seen] == [job["id"], resumed["id"]]
    assert [s["ray_address"] for s in seen] == [f"127.0.0.1:{ray_port(j)}" for j in (job["id"], resumed["id"])]
    for s in seen:  # Ray spans the allocation: a worker on each node, the driver on the head, a GPU per node
        assert sorted(w["slurm_node"] for w in s["workers"]) == ["node1", "node2"]
        assert s["driver_node"] == "node1" and s["gpus"] == 2

    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and [a["resumed_from"] for a in info["attempts"]] == [0, 4]
    # scancel's SIGTERM reached the launcher, which passed it on to the trainer and recorded the attempt
    assert (info["attempts"][0]["signal"], info["attempts"][0]["returncode"]) == (signal.SIGTERM, 128 + signal.SIGTERM)
    assert [a["slurm"] for a in info["attempts"]] == [
        {"job_id": j, "nodelist": "node[1-2]", "num_nodes": 2} for j in (job["id"], resumed["id"])
    ]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(7))  # every step once across the two attempts
    wait_until(lambda: not job_processes({resumed["id"]}), 60, f"no process of job {resumed['id']} left")
