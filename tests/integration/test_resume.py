"""Kill a training run mid-way, twice, rerun it: the metrics equal an uninterrupted run's."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from local_fixtures import build_run_inputs, write_setting

from dppo_bench.config import load_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.local.trainer import LocalRun, LocalTrainer
from dppo_bench.rundir import RunDir


def train_cmd(setting, base, train, out):
    return [
        sys.executable,
        "-m",
        "dppo_bench",
        "train",
        "--setting",
        str(setting),
        "--method",
        "dppo_binary_kl",
        "--seed",
        "3",
        "--out",
        str(out),
        "--base-model",
        str(base),
        "--train-data",
        str(train),
        "--no-progress",
    ]


def run_until(cmd, ready, timeout=600):
    """Start ``cmd``; SIGKILL it as soon as ``ready()`` holds (the kill lands wherever the run is)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and not ready():
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.02)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return killed


def without_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


@pytest.mark.slow
def test_killed_twice_then_rerun_equals_uninterrupted(tmp_path):
    setting_path = write_setting(tmp_path, steps=24, save_every=4)
    base, train = build_run_inputs(tmp_path, setting_path)
    out = tmp_path / "killed"
    run = RunDir(out)
    kills = 0
    for step in (8, 16):  # kill once the checkpoint of this step exists: the run is then mid-way between saves
        kills += run_until(train_cmd(setting_path, base, train, out), lambda s=step: (run.checkpoint_dir(s)).is_dir())
    assert kills == 2
    assert json.loads(run.run_json.read_text())["status"] == "running"  # a SIGKILL leaves no chance to record
    subprocess.run(train_cmd(setting_path, base, train, out), check=True, capture_output=True)
    info = json.loads(run.run_json.read_text())
    assert info["status"] == "completed" and len(info["resumed_at"]) == 2

    reference = RunDir(tmp_path / "reference").create()
    setting = load_setting(setting_path)
    LocalTrainer(LocalRun(resolve_run(setting, "dppo_binary_kl", 3), base, train), reference, progress=False).fit()
    killed_rows, reference_rows = run.read_metrics(), reference.read_metrics()
    assert [r["step"] for r in killed_rows] == list(range(1, 25))
    assert without_perf(killed_rows) == without_perf(reference_rows)


def test_a_different_run_in_the_same_directory_is_refused(tmp_path):
    setting_path = write_setting(tmp_path, steps=2, save_every=1)
    base, train = build_run_inputs(tmp_path, setting_path)
    out = tmp_path / "run"
    subprocess.run(train_cmd(setting_path, base, train, out), check=True, capture_output=True)
    before = (out / "metrics.jsonl").read_text()
    other = train_cmd(setting_path, base, train, out)
    other[other.index("dppo_binary_kl")] = "pg_is"
    proc = subprocess.run(other, capture_output=True, text=True)
    assert proc.returncode == 2 and "holds a different run" in proc.stderr and "run.json" in proc.stderr
    assert (out / "metrics.jsonl").read_text() == before  # nothing already written is lost


@pytest.mark.slow
def test_sigterm_records_the_run_as_interrupted_and_a_rerun_resumes(tmp_path):
    setting_path = write_setting(tmp_path, steps=12, save_every=2)
    base, train = build_run_inputs(tmp_path, setting_path)
    out = tmp_path / "run"
    run = RunDir(out)
    proc = subprocess.Popen(
        train_cmd(setting_path, base, train, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while not run.checkpoint_dir(2).is_dir():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    info = json.loads(run.run_json.read_text())
    assert info["status"] == "interrupted" and info["finished_at"] and "SystemExit" in info["error"]
    subprocess.run(train_cmd(setting_path, base, train, out), check=True, capture_output=True)
    assert json.loads(run.run_json.read_text())["status"] == "completed"
    assert [r["step"] for r in run.read_metrics()] == list(range(1, 13))
