"""After a finished pipeline: a cosmetic edit (a recipe's display_name, a comment, the order of its keys) plans no
training or evaluation, and a new display name refreshes the tables and figure only; a damaged scores.json makes
snakemake aggregate again, where it is named, and the same command rerun scores the step again and ends where the
undamaged pipeline was."""

import pytest
from snakemake_fixtures import job_counts, recipe_root, snakemake

METHOD = "zz_cosmetic_test_method"
EXPERIMENT = "zz_cosmetic_test"
RECIPE = (
    "display_name: Old name\npaper: test\nmask: dppo_binary_tv\nanchor: rollout\n"
    "hyperparameters:\n  sanity: {delta: 0.15, is_cap: null}\n"
)
# the same recipe: another display name, a comment, the keys in another order
EDITED = (
    "# a comment that changes nothing\nanchor: rollout\nmask: dppo_binary_tv\n"
    "hyperparameters:\n  sanity: {is_cap: null, delta: 0.15}\npaper: test\ndisplay_name: Renamed method\n"
)
EXPERIMENT_YAML = f"""title: Cosmetic test
paper_item: none
description: a throwaway experiment of the cosmetic-edit test
runs:
  - setting: tiny_smoke
    methods: [{METHOD}]
panels:
  - {{title: Rewards, metrics: [train/reward_mean]}}
columns:
  - {{title: held-out final, metric: eval/tiny_arith/avg@4, stat: final}}
"""


def nothing_to_do(proc) -> bool:
    return proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_cosmetic_edits_plan_no_training_and_a_damaged_score_is_made_again(tmp_path):
    root = recipe_root(tmp_path / "recipes")
    method = root / "recipes" / "methods" / f"{METHOD}.yaml"
    method.write_text(RECIPE)
    (root / "experiments" / f"{EXPERIMENT}.yaml").write_text(EXPERIMENT_YAML)
    first = snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "results/runs/tiny_smoke" / METHOD / "seed0"
    table = tmp_path / f"results/{EXPERIMENT}/table.md"
    records = {p: p.read_bytes() for p in (run / "run.json", run / "metrics.jsonl", run / "train.completed")}
    assert "| Old name |" in table.read_text()

    method.write_text(EDITED)
    plan = snakemake(tmp_path, "-n", EXPERIMENT, root=root)
    assert set(job_counts(plan.stdout)) == {"aggregate_table", "aggregate_figure", EXPERIMENT}, plan.stdout[-2000:]
    assert snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root).returncode == 0
    assert "| Renamed method |" in table.read_text() and "Old name" not in table.read_text()
    assert {p: p.read_bytes() for p in records} == records  # the run was not touched
    setting = root / "recipes" / "settings" / "tiny_smoke.yaml"
    setting.write_text(setting.read_text() + "# only a comment\n")
    assert nothing_to_do(snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root))

    scores = run / "eval/tiny_arith/step3/scores.json"
    good, text = scores.read_text(), table.read_text()
    scores.write_text(good[: len(good) // 2])
    failed = snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root)
    assert failed.returncode != 0
    log = (tmp_path / f"logs/aggregate_table/{EXPERIMENT}.log").read_text()
    assert f"{scores.relative_to(tmp_path)}: not valid JSON" in log and "rerun the same command" in log, log
    again = snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert table.read_text() == text
    assert scores.read_text().split('"scored_at"')[0] == good.split('"scored_at"')[0]
    assert nothing_to_do(snakemake(tmp_path, "--cores", "2", EXPERIMENT, root=root))
