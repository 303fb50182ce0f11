"""A recipe edited after its run finished: every snakemake after the edit retrains or refuses, and the old run is
never reported as the edited recipe's; restoring the recipe makes the pipeline current again."""

import json
import time

import pytest
from snakemake_fixtures import job_counts, recipe_root, snakemake


def recipe(delta: float) -> str:
    return (
        "display_name: Stale test\npaper: test\nmask: dppo_binary_tv\nanchor: rollout\n"
        f"hyperparameters:\n  sanity: {{delta: {delta}, is_cap: null}}\n"
    )


EXPERIMENT_YAML = """title: Stale test
paper_item: none
description: a throwaway experiment of the staleness test
runs:
  - setting: tiny_smoke
    methods: [zz_stale_test_method]
columns:
  - {title: reward final, metric: train/reward_mean, stat: final}
"""


@pytest.mark.slow
def test_an_edited_recipe_never_reports_its_old_run(tmp_path):
    root = recipe_root(tmp_path / "recipes")
    method = root / "recipes" / "methods" / "zz_stale_test_method.yaml"
    method.write_text(recipe(0.15))
    (root / "experiments" / "zz_stale_test.yaml").write_text(EXPERIMENT_YAML)
    first = snakemake(tmp_path, "--cores", "2", "zz_stale_test", root=root)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "results/runs/tiny_smoke/zz_stale_test_method/seed0"
    table = (tmp_path / "results/zz_stale_test/table.md").read_text()
    metrics = (run / "metrics.jsonl").read_text()

    time.sleep(1)  # a newer mtime, as a real edit would have
    method.write_text(recipe(0.5))
    for attempt in range(2):  # the second is where a removed train.completed used to pass as "Nothing to be done"
        plan = snakemake(tmp_path, "-n", "zz_stale_test", root=root)
        assert {"train", "evaluate", "aggregate_table"} <= set(job_counts(plan.stdout)), attempt
        proc = snakemake(tmp_path, "--cores", "2", "zz_stale_test", root=root)
        assert proc.returncode != 0, attempt
        log = (tmp_path / "logs/train/tiny_smoke/zz_stale_test_method/seed0.log").read_text()
        assert "holds a different run" in log and "run.json" in log
        assert (run / "metrics.jsonl").read_text() == metrics  # the old run is kept, not overwritten
    assert (tmp_path / "results/zz_stale_test/table.md").read_text() == table  # never rebuilt from the old run

    method.write_text(recipe(0.15))  # restored: the recorded run is its run again
    again = snakemake(tmp_path, "--cores", "2", "zz_stale_test", root=root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert (run / "metrics.jsonl").read_text() == metrics
    done = snakemake(tmp_path, "--cores", "2", "zz_stale_test", root=root)
    assert "Nothing to be done" in done.stdout + done.stderr
