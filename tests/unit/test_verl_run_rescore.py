"""dppo-bench evaluate-verl: a verl run's validation dumps re-scored into eval/<benchmark>/step<N>/ by our scorer."""

import json

import pytest

from dppo_bench.cli import main
from dppo_bench.commands.evaluate_verl import rescore_run
from dppo_bench.eval.samples import read_samples
from dppo_bench.rundir import RunDir

PROBLEMS = [
    {"id": "aime2024-I-01", "problem": "Find one plus one.", "answer": "2"},
    {"id": "aime2024-I-02", "problem": "Find two plus three.", "answer": "5"},
]


def dump_rows(step, correct):
    """32 generations per problem: ``correct[pid]`` of them end in the right answer; plus rows of another set."""
    rows = []
    for p in PROBLEMS:
        for i in range(32):
            answer = p["answer"] if i < correct[p["id"]] else "7"
            rows.append({"input": p["problem"], "output": f"Thinking.\nAnswer: {answer}", "gts": p["answer"],
                         "score": 0.0, "step": step, "problem_id": p["id"]})  # fmt: skip
    rows.append({"input": "other", "output": "Answer: 1", "gts": "1", "step": step, "problem_id": "aime2025-I-01"})
    return rows


@pytest.fixture
def run(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.write_run(
        {
            "setting": "moe_base",
            "method": "dppo_binary_tv",
            "seed": 0,
            "last_step": 5,
            "setting_config": {"train": {"max_response_length": 16384}},
        }  # fmt: skip
    )
    (run.path / "validation").mkdir()
    for step, correct in (
        (0, {"aime2024-I-01": 8, "aime2024-I-02": 32}),
        (5, {"aime2024-I-01": 16, "aime2024-I-02": 0}),
    ):
        text = "".join(json.dumps(r) + "\n" for r in dump_rows(step, correct))
        (run.path / "validation" / f"{step}.jsonl").write_text(text)
    problems = tmp_path / "aime24.problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return run, problems


def test_each_dump_becomes_samples_and_scores_of_its_step(run):
    run_dir, problems = run
    summary = rescore_run(run_dir.path, "aime24", [0, 5, 10], problems)
    assert summary["steps"] == {"0": 0.625, "5": 0.25} and summary["not_reached"] == [10]
    step0 = run_dir.path / "eval" / "aime24" / "step0"
    scores = json.loads((step0 / "scores.json").read_text())
    assert scores["avg@32"] == 0.625 and scores["n"] == 32
    assert [(p["problem_id"], p["c"]) for p in scores["problems"]] == [("aime2024-I-01", 8), ("aime2024-I-02", 32)]
    header = read_samples(step0 / "samples.jsonl.gz").header
    assert header["sampling"] == {"n": 32, "temperature": 0.7, "top_p": 0.95, "max_tokens": 16384}
    assert header["model"]["path"] == "verl run moe_base/dppo_binary_tv/seed0 step 0"
    assert not (step0 / "samples.tmp.jsonl.gz").exists()


def test_a_rerun_scores_only_what_changed(run):
    run_dir, problems = run
    rescore_run(run_dir.path, "aime24", [0, 5], problems)
    step0 = run_dir.path / "eval" / "aime24" / "step0" / "scores.json"
    step5 = run_dir.path / "eval" / "aime24" / "step5" / "scores.json"
    before0, before5 = step0.read_text(), step5.read_text()
    text = "".join(json.dumps(r) + "\n" for r in dump_rows(5, {"aime2024-I-01": 32, "aime2024-I-02": 32}))
    (run_dir.path / "validation" / "5.jsonl").write_text(text)  # step 5 validated again (a resumed attempt)
    assert rescore_run(run_dir.path, "aime24", [0, 5], problems)["steps"] == {"0": 0.625, "5": 1.0}
    assert step0.read_text() == before0 and step5.read_text() != before5


def test_a_missing_dump_of_a_reached_step_is_an_error(run):
    run_dir, problems = run
    with pytest.raises(FileNotFoundError, match="validation/3.jsonl: no validation dump for step 3"):
        rescore_run(run_dir.path, "aime24", [3], problems)


def test_the_command_writes_the_summary(run, tmp_path):
    run_dir, problems = run
    out = tmp_path / "summary.json"
    args = ["evaluate-verl", "--run-dir", str(run_dir.path), "--benchmark", "aime24", "--steps", "0,5"]
    assert main([*args, "--data", str(problems), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {
        "benchmark": "aime24",
        "n": 32,
        "metric": "avg@32",
        "steps": {"0": 0.625, "5": 0.25},
        "not_reached": [],
    }
