"""The sanity set's local stand-in: MATH-format rows (../shared/data/math_train) prepared into verl parquet."""

import json

import pyarrow.parquet as pq
import pytest

from dppo_bench.cli import main
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_dataset_spec
from dppo_bench.problem_sets.load import DataError, HashMismatch, load_problem_set

SPEC = load_dataset_spec("sanity_r1d_1p5b")


@pytest.mark.shared_data
def test_math_train_prepares_into_verl_rows(shared_data, tmp_path):
    source = shared_data / "math_train"
    assert main(["data", "prepare", "sanity_r1d_1p5b", "--source", str(source), "--out", str(tmp_path)]) == 0
    rows = pq.read_table(tmp_path / "sanity_r1d_1p5b.parquet").to_pylist()
    math = [json.loads(line) for line in (source / "math_train.jsonl").open()]
    assert len(rows) == len(math) == 7470
    r1_boxed = load_prompt("r1_boxed")  # the instruction of the sanity evaluation, as the hub rows carry one
    assert [r["prompt"] for r in rows] == [r1_boxed.messages(m["problem"]) for m in math]
    assert [r["reward_model"] for r in rows] == [{"style": "rule", "ground_truth": m["answer"].strip()} for m in math]
    assert {r["data_source"] for r in rows} == {"sanity_r1d_1p5b"}
    assert rows[1]["extra_info"] == {
        "split": "train",
        "index": 1,
        "problem_id": math[1]["id"],
        "answer_type": "auto",
        "dataset": "sanity_r1d_1p5b",
    }
    manifest = json.loads((tmp_path / "sanity_r1d_1p5b.manifest.json").read_text())
    assert manifest["verified"] and manifest["data_sha256"] == SPEC.sources.local.sha256


def test_the_hub_stays_the_default_and_unpinned():
    assert SPEC.default_source() == "hub" and SPEC.sources.hub.sha256 is None


HENDRYCKS = [  # MATH's own layout: no id, no answer, a worked solution
    {"problem": "What is $1/2 + 0$?", "level": "Level 1", "type": "Algebra", "solution": "It is $\\boxed{\\frac12}$."},
    {
        "problem": "Find $x$ if $2x = 6$.",
        "level": "Level 1",
        "type": "Algebra",
        "solution": "So $x = \\boxed{3}$.\n\nWe may check our answer: $2 \\cdot 3 = 6$, so our answer is correct.",
    },
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_without_answers_take_the_last_box_of_their_solution(tmp_path):
    source = write_jsonl(tmp_path / "math.jsonl", HENDRYCKS)
    problems = load_problem_set(SPEC, source=source, verify=False).problems
    assert [(p.id, p.answer) for p in problems] == [("math-train-0000", "\\frac12"), ("math-train-0001", "3")]
    assert problems[1].problem == load_prompt("r1_boxed").messages(HENDRYCKS[1]["problem"])[0]["content"]
    with pytest.raises(HashMismatch, match="sources.local.sha256"):  # not the set the spec pins
        load_problem_set(SPEC, source=source)


def test_a_solution_without_a_box_is_an_error_naming_the_row(tmp_path):
    source = write_jsonl(tmp_path / "math.jsonl", [*HENDRYCKS, {**HENDRYCKS[0], "solution": "It is 1/2."}])
    with pytest.raises(DataError, match=r"row 2: field 'answer': has no \\boxed\{\} answer"):
        load_problem_set(SPEC, source=source, verify=False)
    no_solution = write_jsonl(tmp_path / "bare.jsonl", [{"problem": "x"}])
    with pytest.raises(DataError, match="row 0: field 'answer': no column 'solution'"):
        load_problem_set(SPEC, source=no_solution, verify=False)
