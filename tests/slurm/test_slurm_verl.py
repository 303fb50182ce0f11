"""verl itself through sbatch: one run of tiny_verl (verl 0.9.1's trainer, Ray on one node, vLLM's CPU build) as a
job of the real SLURM, with its base model and data made by the pipeline's own jobs. Several minutes on 2 cores,
beyond what CI's budget leaves for the SLURM tests: run it with DPPO_BENCH_SLURM_VERL=1 (docs/cluster.md)."""

import json
import os

import pytest
from slurm_runs import finish, job_processes, jobs_of_run, run_uuids, scontrol_job, snakemake_on_slurm

RUN = "results/runs/tiny_verl/dppo_binary_tv/seed0"

pytestmark = pytest.mark.skipif(
    os.environ.get("DPPO_BENCH_SLURM_VERL") != "1", reason="verl through sbatch takes minutes: DPPO_BENCH_SLURM_VERL=1"
)


@pytest.mark.slow
def test_a_tiny_verl_run_trains_to_its_last_step_as_a_slurm_job(slurm_profile, tmp_path):
    work = tmp_path / "work"
    with snakemake_on_slurm(work, slurm_profile, f"{RUN}/train.completed") as run:
        code, out = finish(run, work, timeout=3600)
    assert code == 0, out[-4000:]
    info = json.loads((work / RUN / "run.json").read_text())
    assert info["status"] == "completed" and info["last_step"] == 8
    (attempt,) = info["attempts"]
    assert attempt["ray"] == "started by verl" and attempt["slurm"]["num_nodes"] == 1
    steps = [json.loads(line)["step"] for line in (work / RUN / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(9))
    (uuid,) = run_uuids(out)
    (train,) = [j for j in jobs_of_run(uuid) if j["comment"].startswith("rule_train_")]
    assert train["state"] == "COMPLETED" and train["id"] == attempt["slurm"]["job_id"]
    assert "gpu" not in scontrol_job(train["id"])["TRES"]  # verl.device: cpu asks for no GPU
    assert job_processes({j["id"] for j in jobs_of_run(uuid)}) == []
