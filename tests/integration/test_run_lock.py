"""One writer per run directory, on both backends: a second trainer refuses while the first lives, naming the run
and its holder; once the holder has died (even by SIGKILL) a rerun takes the run over and resumes it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from local_fixtures import build_run_inputs, write_setting
from test_resume import train_cmd
from verl_fixtures import FAKE_COMMAND, prepared_data, write_verl_setting

from dppo_bench.rundir import RunDir
from dppo_bench.runlock import RunLockedError, run_lock


def wait_for(predicate, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the first trainer ended before the check"
        assert time.monotonic() < deadline, "the first trainer never got there"
        time.sleep(0.05)


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path):
    with run_lock(tmp_path / "run"):
        with pytest.raises(RunLockedError, match=rf"{tmp_path / 'run'}: .*pid {os.getpid()} on "):
            with run_lock(tmp_path / "run"):
                pass
    with run_lock(tmp_path / "run"):  # released on exit
        pass


def test_a_killed_holder_leaves_no_lock(tmp_path):
    code = "import sys, time\nfrom dppo_bench.runlock import run_lock\nwith run_lock(sys.argv[1]):\n"
    code += "    print('held', flush=True)\n    time.sleep(600)\n"
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            with run_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path):
        pass


@pytest.mark.slow
def test_two_local_trainers_on_one_run(tmp_path):
    setting_path = write_setting(tmp_path, steps=12, save_every=2)
    base, train = build_run_inputs(tmp_path, setting_path)
    out = tmp_path / "run"
    run = RunDir(out)
    cmd = train_cmd(setting_path, base, train, out)
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: run.checkpoint_dir(2).is_dir(), first)
        second = subprocess.run(cmd, capture_output=True, text=True)
        assert second.returncode == 2, second.stderr
        assert f"{out}: this run is being written by another process (pid {first.pid} on " in second.stderr
        assert first.poll() is None  # the first one goes on
    finally:
        first.kill()  # its owner dies: the kernel drops the lock with it
        first.wait()
    subprocess.run(cmd, check=True, capture_output=True)
    info = json.loads(run.run_json.read_text())
    assert info["status"] == "completed" and len(info["resumed_at"]) == 1
    assert [r["step"] for r in run.read_metrics()] == list(range(1, 13))


def verl_train_cmd(tmp_path):
    setting_path = write_verl_setting(tmp_path)
    train, val = prepared_data(tmp_path, setting_path)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dppo_bench", "train", "--setting", str(setting_path), "--method", "dppo_binary_tv"]
    cmd += ["--seed", "0", "--out", str(out), "--train-data", str(train), "--val-data", *map(str, val)]
    return cmd + ["--verl-command", " ".join(FAKE_COMMAND)], RunDir(out)


@pytest.mark.slow
def test_two_verl_launchers_on_one_run(tmp_path):
    cmd, run = verl_train_cmd(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "FAKE_", "WANDB_"))}
    first = subprocess.Popen(cmd, env={**env, "FAKE_HANG_AT": "6"}, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        log = run.path / "verl_logs" / "attempt-001.jsonl"
        wait_for(lambda: log.is_file() and log.read_text().count("\n") >= 5, first)
        second = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert second.returncode == 2, second.stderr
        assert f"{run.path}: this run is being written by another process (pid {first.pid} on " in second.stderr
        assert json.loads(run.run_json.read_text())["attempts"][-1]["attempt"] == 1  # no second attempt recorded
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the launcher and its trainer die without a word
        first.wait()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    info = json.loads(run.run_json.read_text())
    assert info["status"] == "completed" and [a["resumed_from"] for a in info["attempts"]] == [0, 4]
    assert [r["step"] for r in run.read_metrics()] == list(range(11))


@pytest.mark.slow
def test_verls_trainer_holds_the_lock_when_its_launcher_is_killed_alone(tmp_path):
    """A launcher killed while verl's trainer lives on (its own process): the trainer still writes the run, so the
    run stays locked until the trainer ends too."""
    cmd, run = verl_train_cmd(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "FAKE_", "WANDB_"))}
    first = subprocess.Popen(cmd, env={**env, "FAKE_HANG_AT": "6"}, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        log = run.path / "verl_logs" / "attempt-001.jsonl"
        wait_for(lambda: log.is_file() and log.read_text().count("\n") >= 5, first)
        first.kill()  # the launcher alone
        first.wait()
        second = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert second.returncode == 2 and "this run is being written by another process" in second.stderr
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # now the orphaned trainer too
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    assert [r["step"] for r in run.read_metrics()] == list(range(11))


def test_two_evaluations_of_one_run_and_benchmark(tmp_path, capsys):
    from dppo_bench.cli import main

    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1+1=", "answer": "2"}) + "\n")
    record = {"setting": "s", "method": "m", "seed": 0, "backend": "local"}
    config = {"train": {"max_prompt_length": 8, "max_response_length": 32}}
    RunDir(tmp_path / "run").create().write_run({**record, "setting_config": config})
    args = ["evaluate", "--run-dir", str(tmp_path / "run"), "--benchmark", "tiny_arith", "--steps", "0"]
    args += ["--data", str(data), "--out", str(tmp_path / "summary.json")]
    with run_lock(tmp_path / "run" / "eval" / "tiny_arith", "evaluate.lock"):
        assert main(args) == 2
    assert "eval/tiny_arith: this run is being written by another process" in capsys.readouterr().err
