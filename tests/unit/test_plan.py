"""`dppo-bench plan`: each run's budget from its setting file, and what exists of it on disk."""

import json

import pytest

from dppo_bench.cli import main
from dppo_bench.config import SETTINGS_DIR, find_experiment, find_method, find_setting, setting_data
from dppo_bench.plan import plan
from dppo_bench.rundir import RunDir


def test_fig8_gpu_hours_are_the_sum_of_nodes_gpus_and_runtime_from_the_setting_files(capsys):
    experiment = find_experiment("fig8_moe_base")
    expected = 0.0
    for setting, _, _ in experiment.run_keys(lambda s: find_setting(s).seeds):
        verl = setting_data(SETTINGS_DIR / f"{setting}.yaml")["verl"]  # the yaml itself, extends resolved
        expected += verl["nodes"] * verl["gpus_per_node"] * verl["runtime_min"] / 60
    assert expected == 8 * 4 * 8 * 72  # 8 runs of 4 nodes x 8 GPUs x 72 h
    assert main(["plan", "fig8_moe_base", "--runs", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    assert f"GPU-hours: {expected:,.0f} in all" in out
    assert out.count("| missing |") == 8 and "4 x 8 GPUs x 72 h" in out


def test_verl_on_the_cpu_costs_no_gpu_hours(capsys):
    """tiny_verl (verl.device: cpu) is bounded by its run-time limit on the machine it runs on, not GPU-hours."""
    assert main(["plan", "verl_cpu", "--runs", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    limit = find_setting("tiny_verl").verl.runtime_min
    assert out.count(f"| 1 x CPU x {limit / 60:g} h | - | limit {limit} (wall) | missing |") == 12
    assert "GPU-hours:" not in out  # no GPU total
    assert f"verl on the CPU: 12 job(s), at most {12 * limit} wall-clock minutes" in out


def write_run(root, setting, method, seed, *, status, steps, step_s, recipe_sha=None, done=False):
    run = RunDir(root / setting.id / method / f"seed{seed}")
    run.path.mkdir(parents=True)
    run.write_run(
        {
            "status": status,
            "recipe_sha256": recipe_sha or find_method(method).sha256(),
            "setting_sha256": setting.sha256(),
        }
    )
    run.append_metrics([{"step": s, "perf/step_s": step_s} for s in range(1, steps + 1)])
    if done:
        run.mark_done({"status": status})


def test_states_on_disk_and_cpu_minutes_from_the_measured_step_cost(tmp_path):
    experiment = find_experiment("tiny_smoke")  # dppo_binary_tv, minirl, dppo_topk_kl on tiny_smoke (6 steps)
    setting = find_setting("tiny_smoke")
    write_run(tmp_path, setting, "dppo_binary_tv", 0, status="completed", steps=6, step_s=2.0, done=True)
    write_run(tmp_path, setting, "minirl", 0, status="failed", steps=2, step_s=4.0)
    write_run(tmp_path, setting, "dppo_topk_kl", 0, status="completed", steps=6, step_s=9.0, recipe_sha="edited")
    methods = {m: find_method(m) for m in ("dppo_binary_tv", "minirl", "dppo_topk_kl")}
    runs = {r.method: r for r in plan(experiment, {"tiny_smoke": setting}, methods, tmp_path)}
    assert runs["dppo_binary_tv"].state.status == "finished"
    assert (runs["minirl"].state.status, runs["minirl"].state.last_step) == ("partial", 2)
    assert runs["dppo_topk_kl"].state.status == "stale"  # its step cost is not counted either
    expected = (2.0 + 4.0) / 2 * setting.train.steps * setting.local.threads / 60
    assert all(r.cpu_minutes == pytest.approx(expected) for r in runs.values())
    assert all(r.gpu_hours == 0 for r in runs.values())
    assert plan(experiment, {"tiny_smoke": setting}, methods, tmp_path / "none")[0].state.status == "missing"


def test_stale_runs_are_judged_as_aggregation_judges_them(tmp_path):
    """A run whose setting changed is stale even with every step recorded."""
    experiment = find_experiment("tiny_smoke")
    setting = find_setting("tiny_smoke")
    run = RunDir(tmp_path / "tiny_smoke" / "minirl" / "seed0")
    run.path.mkdir(parents=True)
    (run.path / "run.json").write_text(
        json.dumps({"status": "completed", "recipe_sha256": find_method("minirl").sha256(), "setting_sha256": "x"})
    )
    methods = {m: find_method(m) for m in ("dppo_binary_tv", "minirl", "dppo_topk_kl")}
    states = {r.method: r.state.status for r in plan(experiment, {"tiny_smoke": setting}, methods, tmp_path)}
    assert states == {"dppo_binary_tv": "missing", "minirl": "stale", "dppo_topk_kl": "missing"}
