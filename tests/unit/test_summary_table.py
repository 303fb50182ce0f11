"""The summary table holds every method and setting that some experiment evaluates on AIME24 and AIME25."""

from dppo_bench.config import EXPERIMENTS_DIR, find_experiment, find_method, find_setting, load_experiment

AIME = {"aime24", "aime25"}


def pairs(experiment) -> set[tuple[str, str]]:
    return {(g.setting, m) for g in experiment.runs for m in g.methods}


def test_every_aime_run_of_every_experiment_is_a_row():
    summary = find_experiment("summary_table")
    wanted = set()
    for path in EXPERIMENTS_DIR.glob("*.yaml"):
        wanted |= {(s, m) for s, m in pairs(load_experiment(path)) if AIME <= set(find_setting(s).eval.benchmarks)}
    assert {("moe_base", "dppo_topk_tv"), ("moe_base_8k", "grpo_eps_high0p28")} <= wanted
    assert pairs(summary) == wanted


def test_rows_have_distinct_labels_and_the_four_aime_columns():
    summary = find_experiment("summary_table")
    labels = [
        g.label.format(display_name=find_method(m).display_name, method=m, setting=g.setting)
        for g in summary.runs
        for m in g.methods
    ]
    assert len(labels) == len(set(labels))
    columns = {(c.metric, c.stat) for c in summary.columns}
    assert columns == {(f"eval/{b}/avg@32", s) for b in AIME for s in ("final", "peak")}
