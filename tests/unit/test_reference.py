"""The paper's readings: keyed by what they measure, shown in every experiment with that run and column."""

import pytest
from record_fixtures import write_scores

from dppo_bench.aggregate.collect import collect
from dppo_bench.aggregate.figures import ZERO_LINE_LABEL, draw
from dppo_bench.aggregate.reference import (
    AT_STEP,
    TABLE_STATS,
    Key,
    load_references,
    read_references,
)
from dppo_bench.aggregate.tables import table_rows, to_markdown
from dppo_bench.config import EXPERIMENTS_DIR, ConfigError, find_experiment, find_method, find_setting, load_experiment
from dppo_bench.rundir import RunDir

HEADER = "setting,method,metric,stat,step,value,precision,paper_item,source\n"
GRPO_AIME24_FINAL = Key("moe_base", "grpo_clip_higher", "eval/aime24/avg@32", "final", None)


def experiments():
    return [load_experiment(p) for p in sorted(EXPERIMENTS_DIR.glob("*.yaml"))]


def rows_of(experiment, root):
    """Table rows of the experiment from the run directories under ``root``, with the paper's readings."""
    settings = {g.setting: find_setting(g.setting) for g in experiment.runs}
    methods = {m: find_method(m) for g in experiment.runs for m in g.methods}
    runs = collect(experiment, settings, methods, root)
    return runs, table_rows(experiment, runs, load_references(experiment.id))


def write_eval_run(root, setting, method, evals):
    """A completed run whose only records are AIME24 Avg@32 scores at the given steps."""
    run = RunDir(root / setting / method / "seed0").create()
    run.write_run(
        {
            "status": "completed",
            "recipe_sha256": find_method(method).sha256(),
            "setting_sha256": find_setting(setting).sha256(),
        }
    )
    run.metrics.touch()  # no training rows: what matters here is the offline evaluation
    for step, value in evals.items():
        write_scores(run.path, "aime24", step, 32, value)


def test_paper_csv_loads_and_its_repeated_readings_agree():
    refs = read_references()  # raises if two figures disagree on one quantity
    assert len(refs) > 30
    assert refs[GRPO_AIME24_FINAL].value == 0.46 and refs[GRPO_AIME24_FINAL].paper_items == ("Fig. 1 (right)",)
    assert all(k.stat in TABLE_STATS | {AT_STEP} and r.precision > 0 for k, r in refs.items())


def test_two_readings_of_one_quantity_count_once_if_they_agree_else_fail(tmp_path):
    path = tmp_path / "paper.csv"
    row = "moe_base,pg_tis,eval/aime24/avg@32,final,,{v},0.01,{item},x\n"
    path.write_text(HEADER + row.format(v=0.40, item="Fig. 1") + row.format(v=0.41, item="Fig. 8"))
    (ref,) = read_references(path).values()
    assert ref.value == pytest.approx(0.405) and ref.paper_items == ("Fig. 1", "Fig. 8")
    path.write_text(HEADER + row.format(v=0.40, item="Fig. 1") + row.format(v=0.45, item="Fig. 8"))
    with pytest.raises(ConfigError, match=r"line 3: value.*0\.45 off Fig\. 8 but 0\.4 off Fig\. 1"):
        read_references(path)


@pytest.mark.parametrize(
    "row, field",
    [
        ("s,m,x,final,,high,0.01,Fig. 3,x", "line 2: value"),
        ("s,m,x,last,,0.5,0.01,Fig. 3,x", "line 2: stat"),
        ("s,m,x,at_step,,0.5,0.01,Fig. 3,x", "line 2: step"),
        ("s,m,x,final,600,0.5,0.01,Fig. 3,x", "line 2: step"),
        ("s,m,x,final,,0.5,0.01,,x", "line 2: paper_item"),
    ],
)
def test_a_bad_row_is_an_error_naming_line_and_field(tmp_path, row, field):
    path = tmp_path / "paper.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(ConfigError, match=field):
        read_references(path)


def test_every_reading_is_shown_by_some_experiment():
    """A table statistic needs an experiment with its run and column; a value at a step, one with its panel."""
    shown = set()
    for e in experiments():
        runs = {(g.setting, m) for g in e.runs for m in g.methods}
        shown |= {(s, m, c.metric, c.stat) for s, m in runs for c in e.columns}
        shown |= {(s, m, metric, AT_STEP) for s, m in runs for p in e.panels for metric in p.metrics}
    for key in read_references():
        assert key[:4] in shown, key


def test_a_reading_appears_in_every_experiment_that_has_its_run_and_column(tmp_path):
    refs = read_references()
    showing = set()
    for e in experiments():
        _, rows = rows_of(e, tmp_path)  # no run directories: every run missing, the paper's values still shown
        for row in rows:
            for col in e.columns:
                key = Key(row["setting"], row["method"], col.metric, col.stat, None)
                ref = refs.get(key)
                assert row.get(f"{col.title} (paper)") == (ref.value if ref else None), (e.id, row["run"], col.title)
                if key == GRPO_AIME24_FINAL:
                    showing.add(e.id)
    # the Fig. 1 reading is the same run and metric as Fig. 8's, the dynamics figure's and the summary table's
    assert {"fig1_right", "fig8_moe_base", "fig13_moe_base_dynamics", "summary_table"} <= showing


def test_the_delta_is_ours_minus_the_papers(tmp_path):
    write_eval_run(tmp_path, "moe_base", "grpo_clip_higher", {0: 0.2, 100: 0.5, 200: 0.43})
    for experiment_id in ("fig1_right", "fig8_moe_base", "summary_table"):
        _, rows = rows_of(find_experiment(experiment_id), tmp_path)
        row = next(r for r in rows if (r["setting"], r["method"]) == ("moe_base", "grpo_clip_higher"))
        assert row["AIME24 final"] == 0.43 and row["AIME24 final (paper)"] == 0.46
        assert row["AIME24 final Δ"] == pytest.approx(0.43 - 0.46)
        assert row["AIME24 peak Δ"] == pytest.approx(0.5 - 0.47)
        assert "Fig. 1 (right)" in to_markdown(find_experiment(experiment_id), rows).splitlines()[-1]


def test_readings_where_the_papers_run_ended_early_are_not_our_final(tmp_path):
    """CISPO's 0.79 is where the paper's run stopped (step 600), not the last step of ours: a cross at step 600,
    never a final value or a delta; DPPO's 0.985 at the paper's last step is both."""
    experiment = find_experiment("fig3_sanity")
    runs, rows = rows_of(experiment, tmp_path)
    by_method = {r["method"]: r for r in rows}
    assert by_method["pg_tis"]["reward final (paper)"] is None
    assert by_method["dppo_binary_tv"]["reward final (paper)"] == 0.985
    fig = draw(experiment, runs, load_references(experiment.id))
    rewards = next(ax for ax in fig.axes if ax.get_title() == "Rewards")
    drawn = [ln for ln in rewards.lines if len(ln.get_xdata())]  # not the legend's empty handles
    points = {(float(ln.get_xdata()[0]), float(ln.get_ydata()[0])) for ln in drawn if ln.get_marker() == "x"}
    assert {(600.0, 0.79), (1000.0, 0.77), (3400.0, 0.88), (2950.0, 0.94)} <= points
    dotted = {float(ln.get_ydata()[0]) for ln in drawn if ln.get_linestyle() == ":"}
    assert 0.985 in dotted and 0.79 not in dotted
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("cross: the paper's value at that step") for t in legend)


def test_the_max_min_panel_has_the_no_mismatch_line(tmp_path):
    experiment = find_experiment("fig3_sanity")
    runs, _ = rows_of(experiment, tmp_path)
    fig = draw(experiment, runs)
    for ax in fig.axes:
        zero = [ln for ln in ax.lines if ln.get_label() == ZERO_LINE_LABEL]
        if ax.get_title().startswith("Max & Min"):
            (line,) = zero
            assert list(line.get_ydata()) == [0, 0] and line.get_linestyle() == "--"
            assert [t.get_text() for t in ax.get_legend().get_texts()] == [ZERO_LINE_LABEL]
        else:
            assert not zero
