"""The pipeline through the real SLURM: `snakemake --profile profiles/slurm tiny_smoke` (the CI overlay sets only the
test cluster's partition, memory and shorter status waits), every job a real sbatch job."""

import json
from collections import Counter

import pytest
from slurm_runs import QueueWatch, finish, job_processes, jobs_of_run, run_uuids, scontrol_job, snakemake_on_slurm

# tiny_smoke's jobs: data, pretraining, 3 trainings, 3 evaluations, the table and the figure (the target itself and
# nothing else is a local rule: data preparation of verl settings is not part of it)
JOBS = {"tiny_data": 1, "tiny_pretrain": 1, "train": 3, "evaluate": 3, "aggregate_table": 1, "aggregate_figure": 1}


@pytest.mark.slow
def test_tiny_smoke_runs_every_job_once_through_sbatch(slurm_profile, tmp_path):
    work = tmp_path / "work"
    with QueueWatch() as watch, snakemake_on_slurm(work, slurm_profile, "tiny_smoke") as run:
        code, out = finish(run, work, timeout=1200)
    assert code == 0, out[-4000:]

    results = work / "results/tiny_smoke"
    assert (results / "figure.png").stat().st_size > 10_000 and "DPPO-Binary-TV" in (results / "table.md").read_text()
    for method in ("dppo_binary_tv", "minirl", "dppo_topk_kl"):
        rows = (work / f"results/runs/tiny_smoke/{method}/seed0/metrics.jsonl").read_text().splitlines()
        assert [json.loads(r)["step"] for r in rows] == list(range(1, 7))

    # SLURM's own account of the run: one job per step of the pipeline, each COMPLETED, each seen by squeue while
    # it was queued or running
    (uuid,) = run_uuids(out)
    jobs = jobs_of_run(uuid)
    assert Counter(j["comment"].split("_wildcards_")[0].removeprefix("rule_") for j in jobs) == JOBS
    assert len({j["comment"] for j in jobs}) == len(jobs)  # no job ran twice
    assert {j["state"] for j in jobs} == {"COMPLETED"}
    assert {j["id"] for j in jobs} <= set(watch.seen)
    assert any("RUNNING" in states for states in watch.seen.values())

    # CPU jobs: no GPU, the CPU partition; whole-machine jobs ask the profile's CPUs without --cores
    for job in jobs:
        info = scontrol_job(job["id"])
        assert info["Partition"] == "debug" and "gpu" not in info["TRES"], info
    pretrain = next(j for j in jobs if j["comment"].startswith("rule_tiny_pretrain"))
    assert scontrol_job(pretrain["id"])["NumCPUs"] == "2"
    assert job_processes({j["id"] for j in jobs}) == []
