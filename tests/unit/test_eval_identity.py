"""Evaluation is not training: a benchmark added, an eval spec edited or other evaluated steps leave a run current
(training identity, run.json) and make only its evaluations out of date (protocol, summary.json), in the run's
record, aggregation and `dppo-bench plan` alike."""

import json

import pytest
import yaml
from record_fixtures import write_scores

from dppo_bench.aggregate.collect import read_run
from dppo_bench.cli import main
from dppo_bench.config import SETTINGS_DIR, ConfigError, find_method, find_setting, load_setting, setting_data
from dppo_bench.config.runs import setting_benchmarks
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.protocol import setting_protocol_sha256
from dppo_bench.plan import run_state
from dppo_bench.rundir import RunDir

VERL = find_setting("moe_base")
LOCAL = find_setting("tiny_smoke")
RECIPE = find_method("dppo_binary_tv")
TINY = load_benchmark("tiny_arith")


def with_eval(setting, **update):
    return setting.model_copy(update={"eval": setting.eval.model_copy(update=update)})


def with_sampling(spec, **update):
    return spec.model_copy(update={"sampling": spec.sampling.model_copy(update=update)})


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(with_eval(VERL, offline=["math500"]), id="verl: an offline benchmark added"),
        pytest.param(with_eval(LOCAL, offline=[*LOCAL.eval.offline, "tiny_arith_greedy"]), id="local: one added"),
        pytest.param(with_eval(LOCAL, every=LOCAL.eval.every * 2), id="local: evaluated less often"),
    ],
)
def test_what_only_evaluates_a_run_keeps_its_training_identity(changed):
    base = VERL if changed.backend == "verl" else LOCAL
    assert changed.sha256() == base.sha256()


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(with_eval(VERL, online=["aime24"]), id="an online benchmark dropped"),
        pytest.param(with_eval(VERL, every=VERL.eval.every + 1), id="validated at other steps"),
    ],
)
def test_verls_online_validation_is_part_of_the_training(changed):
    """It runs inside the training job, on the rollout engine that samples the training batches."""
    assert changed.sha256() != VERL.sha256()


def test_a_killed_verl_run_resumes_with_a_benchmark_added_but_not_with_another_online_one(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.start(VERL, RECIPE, 0, {})
    run.start(with_eval(VERL, offline=["math500"]), RECIPE, 0, {})
    with pytest.raises(ValueError, match="holds a different run"):
        run.start(with_eval(VERL, online=["aime24"]), RECIPE, 0, {})


def test_an_edited_spec_or_other_steps_change_the_protocol_not_the_training():
    base = setting_protocol_sha256(LOCAL, TINY)
    assert setting_protocol_sha256(LOCAL, with_sampling(TINY, temperature=0.7)) != base
    assert setting_protocol_sha256(with_eval(LOCAL, every=6), TINY) != base
    renamed = TINY.model_copy(update={"title": "renamed", "notes": "other notes"})
    assert setting_protocol_sha256(LOCAL, renamed) == base  # what readers see only


def test_offline_benchmarks_are_scored_at_the_evaluated_steps_whose_weights_are_saved():
    moe = with_eval(VERL, offline=["math500"])
    assert moe.eval_steps("aime24") == [0, *range(5, 201, 5)]  # online: every validation
    assert moe.eval_steps("math500") == [0, *range(25, 201, 25)]  # offline: saved every 25 steps
    assert LOCAL.eval_steps("tiny_arith") == [0, 3, 6]
    with pytest.raises(ValueError, match="does not evaluate 'aime25'"):
        LOCAL.eval_steps("aime25")


def setting_with(tmp_path, base, **eval_fields):
    data = setting_data(SETTINGS_DIR / f"{base}.yaml")
    data["eval"] = {**data["eval"], **eval_fields}
    path = tmp_path / "zz_setting.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "base, eval_fields, field, message",
    [
        ("tiny_smoke", {"online": ["tiny_arith"], "offline": []}, "eval.online", "validates nothing while it trains"),
        ("moe_base", {"online": [], "offline": ["math500"]}, "eval.online", "at least one online benchmark"),
        ("moe_base", {"offline": ["aime24"]}, "eval.offline", "listed twice"),
        ("tiny_smoke", {"offline": []}, "eval.offline", "at least one benchmark"),
        ("moe_base", {"offline": ["aime99"]}, "eval.offline.0", "unknown benchmark 'aime99'"),
    ],
)
def test_bad_evaluation_lists_name_the_field(tmp_path, base, eval_fields, field, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_setting(setting_with(tmp_path, base, **eval_fields))
    assert err.value.field == field


def finished_run(root, setting, rows=()):
    run = RunDir(root / setting.id / RECIPE.id / "seed0").create()
    run.start(setting, RECIPE, 0, {})
    run.update_run(status="completed", last_step=setting.train.steps)
    steps = range(1, setting.train.steps + 1)
    run.append_metrics([{"step": s, "train/reward_mean": 0.5, **dict(rows).get(s, {})} for s in steps])
    run.mark_done({"status": "completed"})
    return run


def evaluated(run, setting, spec, values):
    """An evaluation as `dppo-bench evaluate` leaves it: scores.json per step, summary.json with the protocol."""
    for step, value in values.items():
        write_scores(run.path, spec.id, step, spec.n, value)
    steps = {str(s): v for s, v in values.items()}
    summary = {"protocol_sha256": setting_protocol_sha256(setting, spec), "steps": steps}
    (run.eval_dir(spec.id) / "summary.json").write_text(json.dumps(summary))


def test_a_finished_run_with_a_benchmark_added_is_current_and_only_the_new_evaluation_is_due(tmp_path):
    run = finished_run(tmp_path, LOCAL)
    evaluated(run, LOCAL, TINY, {0: 0.25, 3: 0.5, 6: 0.75})
    assert run_state(run, LOCAL, RECIPE, setting_benchmarks([LOCAL])).to_evaluate == ()
    more = with_eval(LOCAL, offline=["tiny_arith", "tiny_arith_greedy"])
    assert run.is_current(run.read_run(), more, RECIPE)
    state = run_state(run, more, RECIPE, setting_benchmarks([more]))
    assert (state.status, state.to_evaluate) == ("finished", ("tiny_arith_greedy",))
    collected = read_run(tmp_path, more, RECIPE, 0, "x", False, setting_benchmarks([more]))
    assert collected.status == "completed" and collected.series["eval/tiny_arith/avg@4"] == {0: 0.25, 3: 0.5, 6: 0.75}


def test_an_evaluation_of_another_protocol_is_due_again_and_not_shown_meanwhile(tmp_path):
    run = finished_run(tmp_path, LOCAL)
    evaluated(run, LOCAL, TINY, {0: 0.25, 3: 0.5, 6: 0.75})
    edited = with_sampling(TINY, temperature=0.7)
    state = run_state(run, LOCAL, RECIPE, {"tiny_arith": edited})
    assert (state.status, state.to_evaluate) == ("finished", ("tiny_arith",))  # the training stands
    collected = read_run(tmp_path, LOCAL, RECIPE, 0, "x", False, {"tiny_arith": edited})
    assert collected.status == "completed" and collected.outdated_evaluations == ["tiny_arith"]
    assert "eval/tiny_arith/avg@4" not in collected.series and collected.series["train/reward_mean"]


def test_aggregation_reads_the_evaluated_steps_only_and_never_verls_online_numbers(tmp_path):
    """Scores of steps the protocol no longer evaluates stay on disk but are not mixed in; the online numbers
    verl logged are superseded by the scored dumps (which equal them while the spec stands)."""
    run = finished_run(tmp_path, LOCAL, {3: {"eval/tiny_arith/avg@4": 0.99}})  # as verl logs its val-core
    evaluated(run, LOCAL, TINY, {0: 0.25, 3: 0.5, 6: 0.75})
    write_scores(run.path, "tiny_arith", 2, 4, 0.125)  # from an evaluation at other steps
    series = read_run(tmp_path, LOCAL, RECIPE, 0, "x", False, setting_benchmarks([LOCAL])).series
    assert series["eval/tiny_arith/avg@4"] == {0: 0.25, 3: 0.5, 6: 0.75}


def test_plan_shows_a_finished_run_with_its_evaluations_to_make(tmp_path, capsys):
    run = finished_run(tmp_path, LOCAL)  # tiny_smoke's dppo_binary_tv, not evaluated yet
    assert main_output(capsys, tmp_path).endswith("| finished; to evaluate: tiny_arith |")
    evaluated(run, LOCAL, TINY, {0: 0.25, 3: 0.5, 6: 0.75})
    assert main_output(capsys, tmp_path).endswith("| finished |")


def main_output(capsys, runs):
    assert main(["plan", "tiny_smoke", "--runs", str(runs)]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if "| dppo_binary_tv |" in line)
