"""`snakemake <id>_partial`: the aggregation of whatever runs exist now, with no training or evaluation job."""

from record_fixtures import write_scores
from snakemake_fixtures import job_counts, snakemake

from dppo_bench.aggregate.series import series_stat
from dppo_bench.config import find_method, find_setting
from dppo_bench.rundir import RunDir


def test_a_partial_target_plans_only_its_aggregation(tmp_path):
    for target in ("fig3_sanity_partial", "summary_table_partial"):  # a figure and tables; tables only
        proc = snakemake(tmp_path, "-n", "-p", target)
        assert proc.returncode == 0, proc.stderr[-2000:]
        counts = job_counts(proc.stdout)
        assert counts == {target: 1}
    assert "--only table" in proc.stdout
    full = job_counts(snakemake(tmp_path, "-n", "fig3_sanity").stdout)  # the full target is unchanged
    assert full["train_gpu"] == 7 and full["aggregate_table"] == 1 and "fig3_sanity_partial" not in full


def write_completed_run(root, setting, method, rewards):
    run = RunDir(root / "results" / "runs" / setting / method / "seed0").create()
    run.write_run(
        {
            "status": "completed",
            "recipe_sha256": find_method(method).sha256(),
            "setting_sha256": find_setting(setting).sha256(),
        }
    )
    run.append_metrics([{"step": i + 1, "train/reward_mean": r, "perf/step_s": 0.25} for i, r in enumerate(rewards)])
    write_scores(run.path, "tiny_arith", 3, 4, 0.375)
    (run.path / "train.completed").write_text("{}\n")


def table_line(table: str, label: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_partial_target_aggregates_the_one_run_there_is(tmp_path):
    rewards = [0.25, 0.5, 0.625]
    write_completed_run(tmp_path, "tiny_smoke", "minirl", rewards)
    proc = snakemake(tmp_path, "--cores", "1", "tiny_smoke_partial")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "results" / "tiny_smoke" / "partial"
    table = (out / "table.md").read_text()
    head = table_line(table, "run")
    minirl = dict(zip(head, table_line(table, "MiniRL"), strict=True))
    assert float(minirl["reward final"]) == series_stat(dict(enumerate(rewards, 1)), "final")
    assert float(minirl["held-out final"]) == 0.375 and float(minirl["step cost (s)"]) == 0.25
    for label in ("DPPO-Binary-TV", "DPPO-TopK-KL"):  # never ran: shown as missing, not dropped
        assert table_line(table, label)[2] == "seed 0: missing"
    assert (out / "figure.png").stat().st_size > 10_000
    assert "1/3 runs usable" in (tmp_path / "logs" / "aggregate_partial" / "tiny_smoke.log").read_text()
    assert not (tmp_path / "results" / "tiny_smoke" / "table.md").exists()  # the full target's files are untouched
    again = snakemake(tmp_path, "--cores", "1", "tiny_smoke_partial")  # no output to be up to date: it reruns
    assert again.returncode == 0 and "tiny_smoke_partial" in again.stdout + again.stderr
