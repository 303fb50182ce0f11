"""Fig. 2's table and figure from probe records, and App. D's table from recorded masked-token counts."""

import csv
import io

import numpy as np
import pytest

from dppo_bench.aggregate.collect import collect
from dppo_bench.aggregate.masked_tokens import to_csv, to_latex, to_markdown, token_rows
from dppo_bench.cli import main
from dppo_bench.config import find_experiment, find_method, find_setting
from dppo_bench.probe.tokens import read_tokens, write_tokens
from dppo_bench.rundir import RunDir


def test_probe_table_gives_the_ratio_and_tv_quantiles_per_mu_bin(tmp_path):
    # rare tokens (mu = 0.005) with ratios spread evenly over [0.5, 1.5]; likely ones (mu = 0.97) with ratio 1
    spread = np.linspace(0.5, 1.5, 101)
    mu = np.concatenate([np.full(101, 0.005), np.full(50, 0.97)])
    pi = mu * np.concatenate([spread, np.ones(50)])
    tv = np.concatenate([np.full(101, 0.02), np.full(50, 0.001)])
    for probed in find_experiment("tiny_mismatch").probes:  # tiny_sanity's record is the one read below
        record = tmp_path / "probes" / probed / "mismatch.npz"
        meta = {"setting": probed, "setting_sha256": find_setting(probed).sha256(), "tv_over": "x", "rollout": "r"}
        scale = 1.0 if probed == "tiny_sanity" else 0.9
        write_tokens(record, mu, pi * scale, tv, meta)
    out = tmp_path / "out"
    assert main(["aggregate", "tiny_mismatch", "--probes", str(tmp_path / "probes"), "--out", str(out)]) == 0
    table = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    rows = {r["mu bin"]: r for r in table if r["setting"] == "tiny_sanity"}
    rare, likely = rows["[0, 0.01)"], rows["[0.95, 0.99)"]
    assert int(rare["tokens"]) == 101 and int(likely["tokens"]) == 50
    assert [float(rare[f"π/μ q{q}"]) for q in ("05", "50", "95")] == pytest.approx([0.55, 1.0, 1.45], rel=1e-4)
    assert [float(likely[f"π/μ q{q}"]) for q in ("05", "50", "95")] == pytest.approx([1.0, 1.0, 1.0], rel=1e-4)
    assert float(rare["TV q50"]) == pytest.approx(0.02) and float(likely["TV q95"]) == pytest.approx(0.001)
    assert float(rare["|π − μ| q50"]) == pytest.approx(0.005 * 0.25) and float(likely["|π − μ| q95"]) == 0.0
    assert rows["[0.5, 0.6)"]["tokens"] == "0" and rows["[0.5, 0.6)"]["π/μ q50"] == ""  # empty bin
    assert (out / "figure.png").stat().st_size > 0 and (out / "figure.pdf").stat().st_size > 0
    md = (out / "table.md").read_text()
    assert "| [0, 0.01) | 101 |" in md.replace("tiny_sanity | ", "")
    assert "| setting | rollout | mean \\|π − μ\\| | \\|log π/μ\\| q99 |" in md  # a bar in a title stays in its cell
    # the summary line of each setting: mean |pi - mu| = mean over tokens of mu * |spread - 1| (rare tokens only)
    gap = float(np.mean(np.abs(pi - mu)))
    log_ratio = np.abs(np.log(spread))
    line = next(x for x in md.splitlines() if x.startswith("| tiny_sanity | r |"))
    assert line == (
        f"| tiny_sanity | r | {gap:.4g} | {np.quantile(np.concatenate([log_ratio, np.zeros(50)]), 0.99):.4g} | "
        f"{log_ratio.max():.4g} | {tv.mean():.4g} | {101 / 151:.4g} |"
    )


def test_a_probe_of_another_setting_version_is_refused(tmp_path):
    record = tmp_path / "tiny_sanity" / "mismatch.npz"
    write_tokens(record, [0.5], [0.5], [0.0], {"setting": "tiny_sanity", "setting_sha256": "old"})
    assert main(["aggregate", "tiny_mismatch", "--probes", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def test_a_probe_is_judged_by_the_setting_it_holds(tmp_path):
    setting = find_setting("tiny_sanity")
    dump = setting.model_dump(mode="json")
    record = tmp_path / "mismatch.npz"
    write_tokens(record, [0.5], [0.5], [0.0], {"setting_sha256": "an older rule's hash", "setting_config": dump})
    assert read_tokens(record).probed_with(setting)
    edited = setting.model_copy(update={"train": setting.train.model_copy(update={"lr": 1.0})})
    assert not read_tokens(record).probed_with(edited)


def test_masked_token_table_sums_the_chosen_steps_and_ranks_by_count(tmp_path):
    experiment = find_experiment("tiny_clipped_tokens")
    setting, recipe = find_setting("tiny_sanity"), find_method("grpo_clip_higher")
    run = RunDir(tmp_path / "tiny_sanity" / "grpo_clip_higher" / "seed0")
    run.path.mkdir(parents=True)
    run.write_run({"status": "completed", "recipe_sha256": recipe.sha256(), "setting_sha256": setting.sha256()})
    counts = "tr/masked_token_counts"
    run.append_metrics(
        [
            {"step": 1, counts: {"pos": {"7": 3, "4": 1}, "neg": {"9": 2}}},
            {"step": 2, counts: {"pos": {"4": 5}, "neg": {}}},
            {"step": 3, "tr/mask_frac": 0.0},  # a row without counts
        ]
    )
    runs = collect(experiment, {"tiny_sanity": setting}, {"grpo_clip_higher": recipe}, tmp_path)
    decode = lambda run_dir, setting: type("T", (), {"decode": lambda self, ids: f"tok{ids[0]}"})()  # noqa: E731
    rows = token_rows(experiment, runs, tmp_path, {"tiny_sanity": setting}, decode_with=decode)
    pos = [(r["rank"], r["id"], r["count"], r["token"]) for r in rows if r["side"].startswith("A > 0")]
    assert pos == [(1, 4, 6, "'tok4'"), (2, 7, 3, "'tok7'")]
    assert [(r["id"], r["count"]) for r in rows if r["side"].startswith("A < 0")] == [(9, 2)]
    only_step_2 = experiment.model_copy(
        update={"masked_tokens": experiment.masked_tokens.model_copy(update={"steps": [2]})}
    )
    rows2 = token_rows(only_step_2, runs, tmp_path, {"tiny_sanity": setting}, decode_with=decode)
    assert [(r["id"], r["count"]) for r in rows2] == [(4, 5)]
    md = to_markdown(experiment, runs, rows)
    assert "| GRPO-ClipHigher | 0 | 1 | `'tok4'` | 4 | 6 |" in md and "Counts summed over every step." in md
    assert to_csv(rows).count("\n") == 4 and r"\texttt{'tok4'}" in to_latex(rows)
