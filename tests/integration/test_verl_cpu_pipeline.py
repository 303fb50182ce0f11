"""The cluster path, executed: verl 0.9.1's own trainer (v1 sync trainer, FSDP2 engine, Ray on one node) with
vLLM's CPU build as the rollout engine, our losses, reward and mismatch patch, driven by the suite exactly as on
a cluster: `snakemake` prepares the data with `dppo-bench data prepare`, builds the base model, trains through
`dppo-bench train` (the verl launcher) and evaluates through verl's validation dumps and `dppo-bench evaluate`.

One binary, one Top-K and one recompute-anchored method (recipes/settings/tiny_verl.yaml, 8 steps, a checkpoint
every 4, validation at steps 0 and 8), and the mismatch probe of Fig. 2 through verl (experiment verl_cpu_mismatch). The
recompute run is first killed twice with SIGKILL during training, as a crashed or cancelled job dies (its whole
process group and every Ray process it started), and then resumed by the pipeline. A Ray cluster that `ray start`
left running stays beside them all along, findable by every run's Ray: each starts one of its own. Last, a benchmark
is added to the finished setting (in a copy of the recipes) and scored from the weights the runs kept, without
retraining.
"""

import contextlib
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from ray_fixtures import foreign_ray_head
from snakemake_fixtures import ENV, job_counts, recipe_root, snakemake
from verl_memory import one_more_verl_run

from dppo_bench.config import find_setting
from dppo_bench.config.roots import ROOT_VARIABLE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM's CPU build is not installed"),
]

SETTING = "tiny_verl"
BINARY, TOPK, RECOMPUTE = "dppo_binary_tv", "dppo_topk_tv", "dppo_binary_tv_recompute"
DATA = ["results/data/verl/tiny_arith_train.parquet", "results/data/verl/tiny_arith.parquet"]
MODEL = "results/base/tiny_verl_local/model"
KILL_AFTER = (5, 6)  # the steps after which attempts 1 and 2 are killed (checkpoints every 4 steps)
VERL_TIMEOUT_S = 3600  # a guard against a hang: on a CI machine twice as slow as ours a call takes 25 minutes


def run_dir(workdir: Path, method: str) -> Path:
    return workdir / "results" / "runs" / SETTING / method / "seed0"


def summary(workdir: Path, method: str) -> str:
    return f"results/runs/{SETTING}/{method}/seed0/eval/tiny_arith/summary.json"


def logged_steps(log: Path) -> list[int]:
    if not log.is_file():
        return []
    steps = []
    for line in log.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            pass  # a row being written
    return steps


def kill_job(process: subprocess.Popen, token: str) -> None:
    """SIGKILL for the launcher's process group and for every process it started (Ray's daemons and workers run in
    sessions of their own, as a cluster's job cgroup would not let them): they all carry the test's token."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone when the launcher ended by itself
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DPPO_BENCH_TEST_JOB") == token:
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def train_until_killed(workdir: Path, root: Path, method: str, attempt: int, after_step: int) -> None:
    token = uuid.uuid4().hex
    cmd = [
        Path(sys.executable).with_name("dppo-bench"), "train", "--setting", SETTING, "--method", method, "--seed",
        "0", "--out", run_dir(workdir, method), "--train-data", DATA[0], "--val-data", DATA[1],
    ]  # fmt: skip
    log = run_dir(workdir, method) / "verl_logs" / f"attempt-{attempt:03d}.jsonl"
    with (workdir / f"attempt-{attempt}.log").open("w") as out:
        process = subprocess.Popen(
            [str(c) for c in cmd], cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
            env={**ENV, ROOT_VARIABLE: str(root), "DPPO_BENCH_TEST_JOB": token}, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + VERL_TIMEOUT_S / 2
        try:
            while max(logged_steps(log), default=-1) < after_step:
                if process.poll() is not None:
                    tail = (workdir / f"attempt-{attempt}.log").read_text()[-5000:]
                    raise AssertionError(f"attempt {attempt} ended early with {process.returncode}:\n{tail}")
                assert time.monotonic() < deadline, f"attempt {attempt} logged no step {after_step} in 30 minutes"
                time.sleep(1)
        finally:
            kill_job(process, token)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The recipes the pipeline reads: a copy, to which the last test adds a benchmark."""
    return recipe_root(tmp_path_factory.mktemp("verl_cpu_recipes"))


@pytest.fixture(scope="module")
def foreign_ray():
    """A Ray cluster `ray start` left on the machine, which every Ray of this module's runs would find: one-node verl
    runs must start their own beside it (RAY_ADDRESS=local, by the launcher)."""
    with foreign_ray_head() as head, pytest.MonkeyPatch.context() as env:
        env.setitem(ENV, "RAY_TMPDIR", head.tmpdir)
        yield head
        assert head.alive()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, root, foreign_ray):
    workdir = tmp_path_factory.mktemp("verl_cpu")
    # Pretraining on one thread: beside the other xdist workers a second one waits for a core more than it computes
    # (6 minutes instead of 1 in CI).
    prepared = snakemake(workdir, "--cores", "2", *DATA, MODEL, "--set-threads", "tiny_pretrain=1", root=root)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    # The killed attempts beside the pipeline's runs of the other methods and the probe: each verl run spends most of
    # its minutes starting Ray, its workers and vLLM, with cores to spare. Two runs at once: none of another module's
    # beside them (tests/verl_memory.py). Snakemake plans none of the recompute run's jobs until the attempts are over.
    with one_more_verl_run(tmp_path_factory), ThreadPoolExecutor(max_workers=1) as attempts:
        killed = attempts.submit(
            lambda: [train_until_killed(workdir, root, RECOMPUTE, a, s) for a, s in enumerate(KILL_AFTER, start=1)]
        )
        others = [summary(workdir, m) for m in (BINARY, TOPK)] + ["results/verl_cpu_mismatch/table.md"]
        pipeline = snakemake(workdir, "--cores", "2", *others, root=root, timeout=VERL_TIMEOUT_S)
        killed.result()
    assert pipeline.returncode == 0, pipeline.stderr[-5000:]
    done = snakemake(workdir, "--cores", "2", summary(workdir, RECOMPUTE), root=root, timeout=VERL_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-5000:]
    return workdir


def rows(workdir: Path, method: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir(workdir, method) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method", [BINARY, TOPK, RECOMPUTE])
def test_verls_trainer_ran_and_its_logs_became_the_records(workdir, method):
    run = run_dir(workdir, method)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["verl"]["version"] == "0.9.1"
    assert (run / "train.completed").is_file()
    attempts = sorted((run / "verl_logs").glob("attempt-*.jsonl"))
    assert attempts and all(a.stat().st_size > 0 for a in attempts)  # verl's own FileLogger output
    steps = find_setting(SETTING).train.steps
    records = rows(workdir, method)
    assert [r["step"] for r in records] == list(range(steps + 1))  # every step once, in order
    for r in records[1:]:
        # the mismatch at equal parameters from our patch (vLLM bf16 against the trainer): real, small, non-zero
        assert 0 < r["mismatch/abs_diff_mean"] < 0.1 and r["mismatch/diff_min"] <= 0 <= r["mismatch/diff_max"]
        assert 0 < r["train/entropy_mean"] and 0 <= r["tr/mask_frac"] <= 1 and r["perf/step_s"] > 0
    rewards = [r["train/reward_mean"] for r in records[1:]]
    assert any(0 < x < 1 for x in rewards)  # rewards vary, so advantages and gradients are not zero
    assert any(r["train/grad_norm"] > 0 for r in records[1:])
    assert {r["step"] for r in records if "eval/tiny_arith/avg@4" in r} == {0, 8}


def test_the_topk_run_logs_the_divergence_from_vllms_own_top_k(workdir):
    divergence = [r["tr/topk_divergence_mean"] for r in rows(workdir, TOPK)[1:]]
    assert all(d is not None and 0 < d < 1 and math.isfinite(d) for d in divergence)
    assert all("tr/topk_divergence_mean" not in r for r in rows(workdir, BINARY))


@pytest.mark.parametrize("method", [BINARY, TOPK, RECOMPUTE])
def test_online_validation_is_rescored_by_our_scorer(workdir, method):
    result = json.loads((workdir / summary(workdir, method)).read_text())
    dumps = sorted(p.name for p in (run_dir(workdir, method) / "validation").glob("*.jsonl"))
    assert dumps == ["0.jsonl", "8.jsonl"]
    scored = {int(step): value for step, value in result["steps"].items()}
    online = {r["step"]: r["eval/tiny_arith/avg@4"] for r in rows(workdir, method) if "eval/tiny_arith/avg@4" in r}
    assert set(scored) == set(online) == {0, 8} and 0 < online[0] < 1
    # the same samples, graded by the same extraction and verifier inside verl (the reward) and offline
    assert scored == pytest.approx(online, abs=1e-9)


def test_a_run_killed_twice_resumes_from_verls_checkpoint(workdir):
    run = run_dir(workdir, RECOMPUTE)
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    assert [a["resumed_from"] for a in attempts] == [0, 4, 4]
    assert [a["folded"] for a in attempts] == [True, True, True]  # the killed attempts' rows were kept
    assert attempts[-1]["returncode"] == 0
    assert sorted(p.name for p in (run / "verl_logs").glob("attempt-*.jsonl")) == [
        "attempt-001.jsonl", "attempt-002.jsonl", "attempt-003.jsonl",
    ]  # fmt: skip
    assert [r["step"] for r in rows(workdir, RECOMPUTE)] == list(range(9))


def test_the_mismatch_probe_ran_through_verl_and_vllm(workdir):
    """Fig. 2 from the engines' own numerics: the ratio scatters for rare tokens and narrows to 1 as mu -> 1."""
    import numpy as np

    record = np.load(workdir / "results" / "probes" / SETTING / "mismatch.npz")
    mu, pi, tv = record["mu"], record["pi"], record["tv"]
    meta = json.loads(str(record["meta"]))
    assert meta["backend"] == "verl" and meta["setting"] == SETTING and "top-4" in meta["tv_over"]
    setting = find_setting(SETTING)
    assert len(mu) > setting.train.prompts_per_step * setting.train.responses_per_prompt  # every generated token
    ratio = pi / mu
    spread = {name: np.subtract(*np.quantile(ratio[m], [0.95, 0.05])) for name, m in
              {"rare": mu < 0.5, "likely": mu >= 0.99}.items()}  # fmt: skip
    assert spread["likely"] < spread["rare"] and np.all(tv >= 0) and np.median(tv) < 0.05
    assert (workdir / "results" / "verl_cpu_mismatch" / "table.md").is_file()


@pytest.mark.parametrize("method", [BINARY, TOPK])
def test_app_d_counts_the_masked_token_ids_of_every_verl_step(workdir, method):
    """App. D's counting inside verl's real update: one file per step (and rank), non-empty where the loss masked."""
    counts_dir = run_dir(workdir, method) / "masked_tokens"
    for row in rows(workdir, method)[1:]:
        files = list((counts_dir / f"step{row['step']:06d}").glob("*.json"))
        assert len(files) == 1, row["step"]
        counts = json.loads(files[0].read_text())
        assert set(counts) == {"pos", "neg"}
        if row["tr/mask_frac"] > 0:
            assert sum(counts["pos"].values()) + sum(counts["neg"].values()) > 0, row["step"]


@pytest.mark.parametrize("method", [BINARY, TOPK, RECOMPUTE])
def test_the_model_of_every_checkpoint_outlives_verls_rotation(workdir, method):
    """verl's checkpoint callback (dppo_bench.verl_plugin.keep_weights) linked the model part of each save."""
    weights = run_dir(workdir, method) / "weights"
    assert sorted(p.name for p in weights.iterdir()) == ["step_000004", "step_000008"]
    for kept in weights.iterdir():
        names = {p.name for p in kept.iterdir()}
        assert "model_world_size_1_rank_0.pt" in names and "huggingface" in names
        assert not any(n.startswith(("optim", "extra")) for n in names)  # resuming needs them; evaluating does not


def test_a_benchmark_added_to_the_finished_setting_is_scored_from_the_kept_weights_without_retraining(workdir, root):
    run = run_dir(workdir, BINARY)
    records = {p: p.read_bytes() for p in (run / "run.json", run / "metrics.jsonl", run / "train.completed")}
    setting = root / "recipes" / "settings" / f"{SETTING}.yaml"
    setting.write_text(setting.read_text().replace("eval:\n", "eval:\n  offline: [tiny_arith_greedy]\n"))
    target = f"results/runs/{SETTING}/{BINARY}/seed0/eval/tiny_arith_greedy/summary.json"
    plan = snakemake(workdir, "-n", target, summary(workdir, BINARY), root=root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert job_counts(plan.stdout) == {"prepare_data": 1, "evaluate": 1}  # its problems, its evaluation: no training
    done = snakemake(workdir, "--cores", "2", target, root=root)
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads((workdir / target).read_text())
    assert result["source"] == "saved weights" and set(result["steps"]) == {"0", "8"} and not result["not_saved"]
    merged = run / "weights" / "step_000008" / "huggingface_merged"  # by verl's model merger, from the FSDP shards
    assert (merged / "config.json").is_file() and any(merged.glob("*.safetensors"))
    assert {p: p.read_bytes() for p in records} == records
