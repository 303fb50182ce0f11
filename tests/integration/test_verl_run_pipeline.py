"""The verl chain in Snakemake: dry runs of every experiment in a fresh directory, resources from the settings,
the lint, and the planned training command run against the fake trainer."""

import json
import re
import shlex
import subprocess

import pytest
from snakemake_fixtures import ENV, REPO, job_counts, recipe_root, snakemake
from verl_fixtures import FAKE_COMMAND, write_parquet

from dppo_bench.config import EXPERIMENTS_DIR, find_setting, load_experiment
from dppo_bench.io import file_sha256
from dppo_bench.plan import on_gpus

EXPERIMENT_IDS = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))


def expected_jobs(experiment_id: str) -> dict[str, int]:
    """What the experiment's yaml implies: one training per run, one evaluation per run and benchmark, one mismatch
    probe per probed setting, data preparation per distinct dataset, one build per packaged model, the tables (and a
    figure with panels) and the target itself."""
    from dppo_bench.config import base_setting_id

    e = load_experiment(EXPERIMENTS_DIR / f"{experiment_id}.yaml")
    counts: dict[str, int] = {}
    data, bases, tiny_data, models = set(), set(), set(), set()

    def reads(s) -> None:
        """What a training run or a probe of setting ``s`` reads, each built once whoever reads it."""
        if s.backend == "verl":
            data.update({s.verl.train_data, *s.eval.benchmarks})
            path = s.verl.model.path
            if path.startswith("results/base/"):  # a tiny base model the pipeline pretrains
                bases.add(path.split("/")[2])
                tiny_data.add("tiny_sanity")  # the tiny task's splits, which the tiny datasets are prepared from
            if path.startswith("results/models/"):  # a packaged model the pipeline converts (rule packaged_model)
                models.add(path.split("/")[2])
        else:
            bases.add(base_setting_id(s.id))
            tiny_data.add(base_setting_id(s.id))

    for setting_id, _, _ in e.run_keys(lambda s: find_setting(s).seeds):
        s = find_setting(setting_id)
        rule, evaluate = ("train_gpu", "evaluate_gpu") if on_gpus(s) else ("train", "evaluate")  # (profiles/slurm)
        counts[rule] = counts.get(rule, 0) + 1
        counts[evaluate] = counts.get(evaluate, 0) + len(s.eval.benchmarks)
        reads(s)
    for setting_id in e.probes:
        s = find_setting(setting_id)
        rule = {"local": "probe_mismatch_local", "verl": "probe_mismatch_verl"}[s.backend]
        rule = "probe_mismatch_gpu" if on_gpus(s) else rule
        counts[rule] = counts.get(rule, 0) + 1
        reads(s)
    if models:
        counts["packaged_model"] = len(models)
    if data:
        counts["prepare_data"] = len(data)
    if bases:
        counts["tiny_pretrain"] = len(bases)
    if tiny_data:
        counts["tiny_data"] = len(tiny_data)
    counts["aggregate_table"] = 1
    if e.panels:
        counts["aggregate_figure"] = 1
    counts[experiment_id] = 1
    return counts


def test_fig3_plans_seven_runs_their_evaluations_data_and_aggregation(tmp_path):
    proc = snakemake(tmp_path, "-n", "fig3_sanity")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout) == {
        "prepare_data": 2,  # the sanity training set and AIME24 (boxed template)
        "train_gpu": 7,
        "evaluate_gpu": 7,
        "aggregate_table": 1,
        "aggregate_figure": 1,
        "fig3_sanity": 1,
    }
    assert "resources: tmpdir=/tmp, nodes=1, gpu=8, runtime=4320\n" in proc.stdout  # one node: no mpi, no tasks


def test_a_multi_node_setting_asks_for_its_nodes_as_one_mpi_job(tmp_path):
    proc = snakemake(tmp_path, "-n", "fig14_moe_base_r3_dynamics")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nodes=4, gpu=32, runtime=4320, mpi=srun, tasks_per_node=8" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("experiment_id", EXPERIMENT_IDS)
def test_every_experiment_plans_in_a_fresh_directory(tmp_path, experiment_id):
    proc = snakemake(tmp_path, "-n", experiment_id)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout) == expected_jobs(experiment_id)


def test_the_workflow_lints_clean(tmp_path):
    proc = snakemake(tmp_path, "--lint")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Congratulations, your workflow is in a good condition!" in output, output[-3000:]
    assert "Lints for" not in output


def planned_shell(stdout: str, rule: str, method: str) -> str:
    """The shell command ``snakemake -n -p`` prints for one job of ``rule``."""
    for block in stdout.split("\nrule ")[1:]:
        if block.startswith(f"{rule}:") and f"method={method}," in block:
            return next(ln.split(": ", 1)[1] for ln in block.splitlines() if ln.startswith("Shell command: "))
    raise AssertionError(f"no {rule} job for {method} planned")


@pytest.mark.slow
def test_the_planned_training_command_runs_a_verl_run_to_completion(tmp_path):
    """The rule's own command line, run where Snakemake would run it, with the fake trainer standing in for verl
    (DPPO_BENCH_VERL_COMMAND): 3,600 steps recorded once each, the marker written, run.json complete."""
    proc = snakemake(tmp_path, "-n", "-p", "fig3_sanity")
    assert proc.returncode == 0, proc.stderr[-3000:]
    command = planned_shell(proc.stdout, "train_gpu", "dppo_binary_tv")
    assert "--val-data results/data/verl/aime24_sanity.parquet" in command
    write_parquet(tmp_path / "results/data/verl/sanity_r1d_1p5b.parquet", "sanity_r1d_1p5b")
    write_parquet(tmp_path / "results/data/verl/aime24_sanity.parquet", "aime24")
    (tmp_path / "logs/train/sanity_r1d_1p5b/dppo_binary_tv").mkdir(parents=True)
    env = {**ENV, "DPPO_BENCH_VERL_COMMAND": shlex.join(FAKE_COMMAND)}
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, timeout=600)
    log = tmp_path / "logs/train/sanity_r1d_1p5b/dppo_binary_tv/seed0.log"
    assert run.returncode == 0, log.read_text()[-3000:]
    run_dir = tmp_path / "results/runs/sanity_r1d_1p5b/dppo_binary_tv/seed0"
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(3601))
    records = {p.name: file_sha256(p) for p in (run_dir / "run.json", run_dir / "metrics.jsonl")}  # it vouches for
    assert json.loads((run_dir / "train.completed").read_text()) == {
        "status": "completed", "last_step": 3600, "records": records,
    }  # fmt: skip
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["verl"]["command"] == list(FAKE_COMMAND)
    assert sorted(int(p.stem) for p in (run_dir / "validation").glob("*.jsonl")) == list(range(0, 3601, 100))


def test_one_train_and_one_evaluate_rule_take_each_backends_inputs(tmp_path):
    """The rules choose inputs and options by the setting's backend: a local run trains from the tiny base model and
    is evaluated on its task's held-out split; a verl run trains on parquet with its online benchmarks and is
    evaluated on the prepared problems its validation dumps are matched to."""
    local = snakemake(tmp_path, "-n", "-p", "tiny_smoke")
    verl = snakemake(tmp_path, "-n", "-p", "verl_cpu")
    assert local.returncode == 0 and verl.returncode == 0, (local.stderr + verl.stderr)[-3000:]
    train = planned_shell(local.stdout, "train", "dppo_binary_tv")
    assert "--train-data results/data/tiny/tiny_smoke/train.jsonl --base-model results/base/tiny_smoke/model" in train
    evaluate = planned_shell(local.stdout, "evaluate", "dppo_binary_tv")
    assert "--data results/data/tiny/tiny_smoke/heldout.jsonl --threads 1" in evaluate
    train = planned_shell(verl.stdout, "train", "dppo_binary_tv")
    data = "--train-data results/data/verl/tiny_arith_train.parquet --val-data results/data/verl/tiny_arith.parquet"
    assert data in train
    assert "--base-model" not in train
    evaluate = planned_shell(verl.stdout, "evaluate", "dppo_binary_tv")
    assert "--data results/data/verl/tiny_arith.problems.jsonl" in evaluate


def planned_resources(stdout: str, rule: str) -> list[str]:
    """The resources line ``snakemake -n`` prints for every job of ``rule``."""
    blocks = [b for b in stdout.split("\nrule ")[1:] if b.startswith(f"{rule}:")]
    return [ln.split("resources: ", 1)[1] for b in blocks for ln in b.splitlines() if "resources: " in ln]


def test_the_slurm_profile_gives_gpus_to_gpu_jobs_alone(tmp_path):
    """profiles/slurm's GPU partition, GPU model and host memory go to the GPU rules (train_gpu, probe_mismatch_gpu,
    evaluate_gpu); local and verl-on-CPU jobs ask for none of them and take the CPU partition."""
    profile = ("--profile", str(REPO / "profiles/slurm"))
    gpu = snakemake(tmp_path, "-n", *profile, "fig3_sanity", "fig2_mismatch")
    cpu = snakemake(tmp_path, "-n", *profile, "verl_cpu", "verl_cpu_mismatch", "tiny_smoke")
    assert gpu.returncode == 0 and cpu.returncode == 0, (gpu.stderr + cpu.stderr)[-3000:]
    for rule, count in (("train_gpu", 7), ("probe_mismatch_gpu", 1), ("evaluate_gpu", 7)):
        lines = planned_resources(gpu.stdout, rule)
        assert len(lines) == count and all(
            "slurm_partition=CHANGE-gpu-partition" in ln and "gpu_model=h100" in ln and "cpus_per_gpu=12" in ln
            for ln in lines
        ), lines
    for rule, count in (("train", 12 + 3), ("evaluate", 12 + 3), ("probe_mismatch_verl", 1), ("tiny_pretrain", 2)):
        lines = planned_resources(cpu.stdout, rule)
        assert len(lines) == count and all(
            "slurm_partition=CHANGE-cpu-partition" in ln and "gpu" not in ln for ln in lines
        ), lines


def test_an_offline_benchmark_of_a_gpu_setting_generates_on_its_gpus(tmp_path):
    """An offline benchmark of a GPU setting is generated by vLLM from the saved weights: its evaluate_gpu job asks for
    the rollout's tensor-parallel GPUs; the online benchmark, scored from the validation dumps, asks for none."""
    root = recipe_root(tmp_path / "recipes")
    setting = root / "recipes" / "settings" / "sanity_r1d_1p5b.yaml"
    setting.write_text(setting.read_text().replace("eval:\n", "eval:\n  offline: [math500]\n"))
    tp = find_setting("sanity_r1d_1p5b").verl.parallelism.rollout_tensor
    run = "results/runs/sanity_r1d_1p5b/dppo_binary_tv/seed0/eval"
    targets = [f"{run}/math500/summary.json", f"{run}/aime24_sanity/summary.json"]
    plan = snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles/slurm"), *targets, root=root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    gpus = sorted(re.findall(r"(?:^|, )gpu=(\d+)", ln) for ln in planned_resources(plan.stdout, "evaluate_gpu"))
    assert gpus == [[], [str(tp)]], gpus
    assert all("slurm_partition=CHANGE-gpu-partition" in ln for ln in planned_resources(plan.stdout, "evaluate_gpu"))
