"""dppo-bench evaluate: verl validation dumps and local generations, scored into eval/<benchmark>/step<N>/."""

import json
import shutil

import pytest

from dppo_bench.cli import main
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.protocol import protocol_sha256, spec_sha256
from dppo_bench.eval.run_eval import evaluate_run
from dppo_bench.eval.samples import read_samples
from dppo_bench.io import file_sha256
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


AIME24 = load_benchmark("aime24")
VALIDATED = {
    "id": "aime24",
    "spec_sha256": spec_sha256(AIME24),
    "sampling": {"n": 32, "temperature": 0.7, "top_p": 0.95, "max_tokens": 16384},
}


@pytest.fixture
def run(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.write_run(
        {
            "setting": "moe_base",
            "backend": "verl",
            "method": "dppo_binary_tv",
            "seed": 0,
            "last_step": 5,
            "setting_config": {"train": {"max_response_length": 16384}},
            "inputs": {"val": [VALIDATED]},  # what the launcher records of an online benchmark
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
    summary = evaluate_run(run_dir.path, "aime24", [0, 5, 10], problems)
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
    evaluate_run(run_dir.path, "aime24", [0, 5], problems)
    step0 = run_dir.path / "eval" / "aime24" / "step0" / "scores.json"
    step5 = run_dir.path / "eval" / "aime24" / "step5" / "scores.json"
    before0, before5 = step0.read_text(), step5.read_text()
    text = "".join(json.dumps(r) + "\n" for r in dump_rows(5, {"aime2024-I-01": 32, "aime2024-I-02": 32}))
    (run_dir.path / "validation" / "5.jsonl").write_text(text)  # step 5 validated again (a resumed attempt)
    assert evaluate_run(run_dir.path, "aime24", [0, 5], problems)["steps"] == {"0": 0.625, "5": 1.0}
    assert step0.read_text() == before0 and step5.read_text() != before5


def test_a_missing_dump_of_a_reached_step_is_an_error(run):
    run_dir, problems = run
    with pytest.raises(FileNotFoundError, match="validation/3.jsonl: no validation dump for step 3"):
        evaluate_run(run_dir.path, "aime24", [3], problems)


def test_the_command_writes_the_summary(run, tmp_path):
    run_dir, problems = run
    out = tmp_path / "summary.json"
    args = ["evaluate", "--run-dir", str(run_dir.path), "--benchmark", "aime24", "--steps", "0,5"]
    assert main([*args, "--data", str(problems), "--out", str(out)]) == 0
    scores = {s: run_dir.eval_step_dir("aime24", s) / "scores.json" for s in (0, 5)}
    assert json.loads(out.read_text()) == {
        "benchmark": "aime24",
        "n": 32,
        "metric": "avg@32",
        "source": "online validation",
        "protocol_sha256": protocol_sha256(AIME24, [0, 5], 16384),  # what makes it current (or out of date)
        "steps": {"0": 0.625, "5": 0.25},
        "not_reached": [],
        "not_saved": [],
        "records": {f"step{s}/scores.json": file_sha256(path) for s, path in scores.items()},  # what it vouches for
    }


TINY_PROBLEMS = [{"id": "t1", "problem": "2+3=", "answer": "5"}, {"id": "t2", "problem": "4+4=", "answer": "8"}]


@pytest.fixture
def local_run(tmp_path):
    """A local run that saved step 0 (a random tiny model) and ended there; the tiny task's held-out problems."""
    from dppo_bench.local.model import build_model, save_model
    from dppo_bench.local.tokenizer import build_tokenizer

    run = RunDir(tmp_path / "run").create()
    run.write_run(
        {
            "setting": "tiny_test",
            "method": "pg_is",
            "seed": 0,
            "backend": "local",
            "last_step": 0,
            "setting_config": {"train": {"max_prompt_length": 8, "max_response_length": 32}},
        }
    )
    tok = build_tokenizer()
    arch = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    save_model(build_model(arch, tok, seed=0), tok, run.checkpoint_dir(0))
    problems = tmp_path / "heldout.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in TINY_PROBLEMS))
    return run, problems


def test_a_local_run_generates_from_each_checkpoint_then_scores(local_run):
    run_dir, problems = local_run
    summary = evaluate_run(run_dir.path, "tiny_arith", [0, 2], problems)
    assert summary["not_reached"] == [2] and summary["n"] == 4 and summary["metric"] == "avg@4"
    step0 = run_dir.path / "eval" / "tiny_arith" / "step0"
    samples = read_samples(step0 / "samples.jsonl.gz")
    assert samples.header["model"]["path"] == str(run_dir.checkpoint_dir(0))
    assert sorted({r["problem_id"] for r in samples.rows}) == ["t1", "t2"] and len(samples.rows) == 8
    scores = json.loads((step0 / "scores.json").read_text())
    assert scores["sampling"] == {"n": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 32, "seed": 0}
    assert summary["steps"] == {"0": scores["avg@4"]}
    assert sum(p["c"] for p in scores["problems"]) == round(scores["avg@4"] * 8)


def test_a_scored_local_step_is_not_generated_again(local_run):
    run_dir, problems = local_run
    first = evaluate_run(run_dir.path, "tiny_arith", [0], problems)
    scores = run_dir.path / "eval" / "tiny_arith" / "step0" / "scores.json"
    before = scores.read_text()
    shutil.rmtree(run_dir.checkpoint_dir(0))  # generating again would now fail
    assert evaluate_run(run_dir.path, "tiny_arith", [0], problems) == first and scores.read_text() == before


def test_a_missing_checkpoint_of_a_reached_step_is_an_error(local_run):
    run_dir, problems = local_run
    shutil.rmtree(run_dir.checkpoint_dir(0))
    with pytest.raises(FileNotFoundError, match="no checkpoint for step 0 of this run"):
        evaluate_run(run_dir.path, "tiny_arith", [0], problems)


def test_a_run_without_a_record_or_with_an_unknown_backend_is_refused(tmp_path):
    problems = tmp_path / "heldout.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in TINY_PROBLEMS))
    run = RunDir(tmp_path / "run").create()
    with pytest.raises(FileNotFoundError, match="run.json: no run record"):
        evaluate_run(run.path, "tiny_arith", [0], problems)
    run.write_run({"setting": "s", "method": "m", "seed": 0, "backend": "jax"})
    with pytest.raises(ValueError, match="run.json: field 'backend': expected 'local' or 'verl', got 'jax'"):
        evaluate_run(run.path, "tiny_arith", [0], problems)
