"""The verl launcher against a fake main_ppo: provenance, crash and resume, every step exactly once."""

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from verl_fixtures import FAKE_COMMAND, prepared_data, write_parquet, write_verl_setting

from dppo_bench.config import ConfigError, find_method, load_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.io import file_sha256
from dppo_bench.rundir import RunDir
from dppo_bench.verify import verify_run
from dppo_bench.verl_launch import launch as L

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_inputs(tmp_path):
    setting_path = write_verl_setting(tmp_path)
    train, val = prepared_data(tmp_path, setting_path)
    return load_setting(setting_path), train, val


def make_run(tmp_path, run_inputs, **env):
    setting, train, val = run_inputs
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "FAKE_", "WANDB_"))}
    return L.VerlRun(
        resolved=resolve_run(setting, find_method("dppo_binary_tv"), 0),
        run_dir=RunDir(tmp_path / "run"),
        train_data=train,
        val_data=val,
        command=FAKE_COMMAND,
        env={**environment, **env},
    )


def steps(run):
    return [r["step"] for r in run.run_dir.read_metrics()]


def test_a_clean_run_records_every_step_and_its_provenance(tmp_path, run_inputs):
    run = make_run(tmp_path, run_inputs, FAKE_ATTEMPT="1")
    outcome = L.launch(run)
    assert outcome == {"status": "completed", "last_step": 10}
    rows = {r["step"]: r for r in run.run_dir.read_metrics()}
    assert sorted(rows) == list(range(11))
    assert rows[0] == {"step": 0, "eval/aime24_sanity/avg@32": 0.25}  # validation before training
    assert rows[6]["train/reward_mean"] == 0.06 and rows[6]["eval/aime24_sanity/avg@32"] == pytest.approx(0.31)
    assert rows[5]["train/entropy_mean"] == 0.505 and "eval/aime24_sanity/avg@32" not in rows[5]
    assert rows[5]["mismatch/abs_diff_mean"] == 0.0005 and rows[5]["tr/mask_frac"] == 0.005
    assert rows[3]["tr/is_ratio_max"] is None  # NaN -> null
    assert all("training/global_step" not in r and "actor/entropy" not in r for r in rows.values())
    records = {p.name: file_sha256(p) for p in (run.run_dir.run_json, run.run_dir.metrics)}  # what it vouches for
    assert json.loads(run.run_dir.done.read_text()) == {**outcome, "records": records}
    assert verify_run(run.run_dir) == []  # a verl run's records verify (its checkpoints are verl's own)

    info = run.run_dir.read_run()
    assert info["status"] == "completed" and info["error"] is None and info["backend"] == "verl"
    assert info["verl"]["version"] == "0.9.1" and info["verl"]["command"] == list(FAKE_COMMAND)
    overrides = info["verl"]["overrides"]
    assert f"trainer.default_local_dir={run.run_dir.checkpoints.resolve()}" in overrides
    assert "trainer.resume_mode=auto" in overrides and 'trainer.logger=["console","file"]' in overrides
    assert info["model"] == {
        "path": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "revision": None,
        "resolved_revision": L.cached_revision("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
    }
    assert info["cluster"] == {"nodes": 1, "gpus_per_node": 8, "gpus": 8}
    train, val = run.train_data, run.val_data
    assert info["inputs"]["train"]["sha256"] == file_sha256(train)
    assert info["inputs"]["train"]["id"] == "sanity_r1d_1p5b"
    assert [v["id"] for v in info["inputs"]["val"]] == ["aime24_sanity"]
    assert info["inputs"]["val"][0]["sha256"] == file_sha256(val[0])
    (attempt,) = info["attempts"]
    assert attempt["resumed_from"] == 0 and attempt["returncode"] == 0 and attempt["folded"] is True
    assert attempt["slurm"] is None and attempt["ray"] == "started by verl"
    assert attempt["log"] == str((run.run_dir.path / "verl_logs" / "attempt-001.jsonl").resolve())


def test_crash_then_rerun_keeps_every_step_once(tmp_path, run_inputs):
    first = make_run(tmp_path, run_inputs, FAKE_CRASH_AT="7", FAKE_ATTEMPT="1")
    outcome = L.launch(first)
    assert outcome["status"] == "failed" and "exited with 1 after step 6" in outcome["error"]
    assert steps(first) == list(range(7)) and not first.run_dir.done.exists()
    assert first.run_dir.read_run()["status"] == "failed"

    second = make_run(tmp_path, run_inputs, FAKE_ATTEMPT="2")
    assert L.launch(second)["status"] == "completed"
    rows = second.run_dir.read_metrics()
    assert steps(second) == list(range(11))  # each step once, in order
    by_step = {r["step"]: r for r in rows}
    assert [by_step[s]["perf/step_s"] for s in range(1, 11)] == [1.0] * 4 + [2.0] * 6  # 5, 6 re-run after step 4
    info = second.run_dir.read_run()
    assert [a["resumed_from"] for a in info["attempts"]] == [0, 4]
    assert "trainer.val_before_train=False" in info["attempts"][1]["overrides"]  # step 4 was validated already
    assert "trainer.val_before_train=False" not in info["attempts"][0]["overrides"]
    assert len(info["resumed_at"]) == 1 and info["status"] == "completed"


def test_a_run_resumed_between_validations_validates_as_an_uninterrupted_one(tmp_path, run_inputs):
    """A checkpoint every 4 steps and validation every 8: resumed from step 4, the attempt must not validate there."""
    setting, train, val = run_inputs
    every_8 = (setting.model_copy(update={"eval": setting.eval.model_copy(update={"every": 8})}), train, val)
    L.launch(make_run(tmp_path, every_8, FAKE_CRASH_AT="7"))
    run = make_run(tmp_path, every_8)
    L.launch(run)
    attempts = run.run_dir.read_run()["attempts"]
    assert [a["resumed_from"] for a in attempts] == [0, 4]
    assert "trainer.val_before_train=False" in attempts[1]["overrides"]


def test_a_checkpoint_whose_row_was_never_logged_is_validated_again(tmp_path, run_inputs):
    """verl saves step 8's checkpoint, then validates and logs: a crash in between loses step 8's training
    metrics for good (verl never wrote them); the resumed attempt's validation of step 8 is recorded."""
    L.launch(make_run(tmp_path, run_inputs, FAKE_CRASH_AT="8"))
    run = make_run(tmp_path, run_inputs)
    assert L.launch(run)["status"] == "completed"
    by_step = {r["step"]: r for r in run.run_dir.read_metrics()}
    assert sorted(by_step) == list(range(11))
    assert by_step[8] == {"step": 8, "eval/aime24_sanity/avg@32": pytest.approx(0.33)}
    assert "trainer.val_before_train=False" not in run.run_dir.read_run()["attempts"][1]["overrides"]


def test_an_attempt_the_launcher_never_folded_is_folded_by_the_next(tmp_path, run_inputs):
    first = make_run(tmp_path, run_inputs, FAKE_CRASH_AT="7")
    L.launch(first)
    info = first.run_dir.read_run()
    info["attempts"][0]["folded"] = False  # as if the launcher had been killed before it folded the log
    first.run_dir.write_run(info)
    first.run_dir.metrics.unlink()
    second = make_run(tmp_path, run_inputs)
    assert L.launch(second)["status"] == "completed"
    assert steps(second) == list(range(11))


def test_rerunning_a_finished_run_changes_no_record(tmp_path, run_inputs):
    run = make_run(tmp_path, run_inputs)
    L.launch(run)
    before = run.run_dir.metrics.read_text()
    assert L.launch(make_run(tmp_path, run_inputs))["status"] == "completed"  # verl resumes at its last step
    assert run.run_dir.metrics.read_text() == before


def test_exit_zero_before_the_last_step_is_not_completed(tmp_path, run_inputs):
    def trainer(argv, env, nodes, gpus, **_):
        return 0, {}

    outcome = L.launch(make_run(tmp_path, run_inputs), trainer=trainer)
    assert outcome["status"] == "failed" and outcome["error"] == "verl's trainer exited 0 at step 0 of 10"
    assert not (tmp_path / "run" / "train.completed").exists()


def test_the_trainer_gets_the_log_file_wandb_mode_and_the_plugin(tmp_path, run_inputs):
    seen = {}

    def trainer(argv, env, nodes, gpus, **_):
        seen.update(argv=argv, env=env, nodes=nodes, gpus=gpus)
        return 1, {}

    run = make_run(tmp_path, run_inputs, VERL_USE_EXTERNAL_MODULES="other.module")
    run = L.VerlRun(**{**run.__dict__, "wandb": True})
    L.launch(run, trainer=trainer)
    log = seen["env"]["VERL_FILE_LOGGER_PATH"]
    assert log.endswith("verl_logs/attempt-001.jsonl") and Path(log).exists()
    assert seen["env"]["WANDB_MODE"] == "offline"
    assert seen["env"]["VERL_USE_EXTERNAL_MODULES"] == "other.module,dppo_bench.verl_plugin.entry"
    assert seen["argv"][: len(FAKE_COMMAND)] == list(FAKE_COMMAND) and (seen["nodes"], seen["gpus"]) == (1, 8)
    assert 'trainer.logger=["console","file","wandb"]' in seen["argv"]
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE=offline" in seen["argv"]

    online = make_run(tmp_path, run_inputs, WANDB_MODE="online")
    L.launch(L.VerlRun(**{**online.__dict__, "wandb": True}), trainer=trainer)
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE=online" in seen["argv"]
    assert Path(seen["env"]["VERL_FILE_LOGGER_PATH"]).name == "attempt-002.jsonl"


def test_a_different_run_in_the_directory_is_refused(tmp_path, run_inputs):
    L.launch(make_run(tmp_path, run_inputs))
    other = make_run(tmp_path, run_inputs)
    other = replace(other, resolved=replace(other.resolved, seed=1))
    with pytest.raises(ValueError, match="holds a different run"):
        L.launch(other)


def test_bad_data_is_refused_before_anything_is_written(tmp_path, run_inputs):
    setting, train, val = run_inputs
    wrong = write_parquet(tmp_path / "wrong" / "aime25.parquet", "aime25")
    with pytest.raises(ConfigError, match=r"aime25.parquet: field 'data_source': holds \['aime25'\]; aime24_sanity"):
        L.launch(make_run(tmp_path, (setting, train, (wrong,))))
    with pytest.raises(ValueError, match="give one --val-data file for each"):
        L.launch(make_run(tmp_path, (setting, train, ())))
    with pytest.raises(ConfigError, match="missing.parquet: no such file"):
        L.launch(make_run(tmp_path, (setting, tmp_path / "missing.parquet", val)))
    assert not (tmp_path / "run").exists()


def test_several_nodes_need_an_allocation_or_a_ray_cluster(tmp_path):
    setting_path = write_verl_setting(tmp_path, base="moe_base")
    train, val = prepared_data(tmp_path, setting_path)
    run = make_run(tmp_path, (load_setting(setting_path), train, val))
    with pytest.raises(ValueError, match="trains on 4 nodes: run it inside a SLURM allocation"):
        L.launch(run)
    assert not (tmp_path / "run").exists()


def test_resumed_step_follows_verls_tracker(tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()

    def verls():
        found = find_latest_ckpt_path(str(ckpt))
        return int(found.rsplit("global_step_", 1)[1]) if found else 0

    assert L.resumed_step(ckpt) == verls() == 0
    (ckpt / "latest_checkpointed_iteration.txt").write_text("25")
    assert L.resumed_step(ckpt) == verls() == 0  # the tracker names a checkpoint that is not there
    (ckpt / "global_step_25").mkdir()
    assert L.resumed_step(ckpt) == verls() == 25
    (ckpt / "latest_checkpointed_iteration.txt").write_text("garbage")
    with pytest.raises(ValueError, match="latest_checkpointed_iteration.txt: expected the step"):
        L.resumed_step(ckpt)


def test_trainer_command_and_its_placement():
    assert L.parse_command(None) == (sys.executable, "-m", "verl.trainer.main_ppo")
    assert L.parse_command("apptainer exec --nv verl.sif python -m verl.trainer.main_ppo")[:3] == (
        "apptainer",
        "exec",
        "--nv",
    )
    assert L.placement({}, 1) is None
    assert L.placement({"RAY_ADDRESS": "10.0.0.1:6379"}, 4) is None
    job = L.placement({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[1-4]", "SLURM_JOB_NUM_NODES": "4"}, 4)
    assert job.job_id == "7" and job.nodelist == "gpu[1-4]"


@pytest.mark.slow
def test_sigterm_to_the_command_stops_verl_and_records_the_attempt(tmp_path, run_inputs):
    """SLURM's time limit sends SIGTERM: the launcher passes it on, folds the rows and exits non-zero."""
    setting, train, val = run_inputs
    setting_file = tmp_path / "verl_test.yaml"
    out = tmp_path / "run"
    env = {**os.environ, "FAKE_HANG_AT": "6", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [
        *("dppo-bench", "train", "--setting", str(setting_file), "--method", "dppo_binary_tv", "--seed", "0"),
        *("--out", str(out), "--train-data", str(train), "--val-data", ",".join(map(str, val))),
        *("--verl-command", " ".join(FAKE_COMMAND)),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "verl_logs" / "attempt-001.jsonl"
    deadline = time.monotonic() + 120
    while not (log.exists() and b'"step": 5' in log.read_bytes()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    run = RunDir(out)
    info = run.read_run()
    assert info["status"] == "interrupted" and info["attempts"][0]["signal"] == signal.SIGTERM
    assert info["attempts"][0]["returncode"] == -signal.SIGTERM
    assert steps_of(run) == list(range(6)) and not run.done.exists()


def steps_of(run_dir):
    return [r["step"] for r in run_dir.read_metrics()]


def test_non_finite_values_never_reach_the_record(tmp_path, run_inputs):
    run = make_run(tmp_path, run_inputs)
    L.launch(run)
    text = run.run_dir.metrics.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert all(v is None or math.isfinite(v) for r in run.run_dir.read_metrics() for v in r.values())


def test_the_train_command_line_of_a_verl_run(monkeypatch, tmp_path, run_inputs):
    from dppo_bench import cli
    from dppo_bench.commands import train

    monkeypatch.setenv("DPPO_BENCH_WANDB", "1")
    monkeypatch.setenv("DPPO_BENCH_VERL_COMMAND", "apptainer exec --nv verl.sif python -m verl.trainer.main_ppo")
    argv = [
        "train",
        "--setting",
        "s",
        "--method",
        "m",
        "--seed",
        "0",
        "--out",
        "o",
        "--val-data",
        "a.parquet,b.parquet",
    ]
    args = cli.build_parser().parse_args([*argv, "c.parquet"])
    assert args.wandb is True and L.parse_command(args.verl_command)[:2] == ("apptainer", "exec")
    seen = {}
    monkeypatch.setattr(L, "launch", lambda run: seen.setdefault("run", run) and {"status": "completed"})
    setting, train_data, _ = run_inputs
    args.train_data, args.out = train_data, tmp_path / "r"
    assert train.train_verl(args, resolve_run(setting, find_method("pg_is"), args.seed)) == 0
    run = seen["run"]
    assert run.val_data == (Path("a.parquet"), Path("b.parquet"), Path("c.parquet")) and run.wandb is True
    assert run.command == ("apptainer", "exec", "--nv", "verl.sif", "python", "-m", "verl.trainer.main_ppo")


def test_a_pinned_model_revision_trains_from_its_snapshot(tmp_path, run_inputs, monkeypatch):
    import huggingface_hub

    setting, train, val = run_inputs
    model = setting.verl.model.model_copy(update={"path": "org/model", "revision": "0123abc"})
    pinned = setting.model_copy(update={"verl": setting.verl.model_copy(update={"model": model})})
    snapshot = tmp_path / "hub" / "snapshots" / "0123abc"
    calls = []
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, revision: calls.append((repo_id, revision)) or snapshot
    )
    run = make_run(tmp_path, (pinned, train, val))
    assert L.launch(run)["status"] == "completed" and calls == [("org/model", "0123abc")]
    info = run.run_dir.read_run()
    assert info["model"] == {"path": "org/model", "revision": "0123abc", "snapshot": str(snapshot)}
    assert f"actor_rollout_ref.model.path={snapshot}" in info["verl"]["overrides"]
    local = pinned.model_copy(
        update={"verl": pinned.verl.model_copy(update={"model": model.model_copy(update={"path": str(tmp_path)})})}
    )
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    record, path = L.model_record(local)  # a local directory: recorded with its weights' sha256, given absolute
    assert record == {
        "path": str(tmp_path),
        "revision": "0123abc",
        "local": True,
        "sha256": {"model.safetensors": hashlib.sha256(b"weights").hexdigest()},
    }
    assert path == tmp_path.resolve()


def test_an_attempt_reads_no_spec_after_the_run_was_resolved(tmp_path, run_inputs, monkeypatch):
    """The command resolves the run's specs once (dppo_bench.config.runs); the launcher, the overrides and the
    records take them from there, so a spec edited mid-command cannot reach one part and not another."""
    from dppo_bench.config import specs as spec

    run, read = make_run(tmp_path, run_inputs), []
    load = spec._load
    monkeypatch.setattr(spec, "_load", lambda model, path: read.append(path) or load(model, path))
    assert L.launch(run)["status"] == "completed"
    assert read == []
