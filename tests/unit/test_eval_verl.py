"""Inside verl: the reward function (from threads, loaded by path as verl does) and the validation-dump converter."""

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import dppo_bench.eval.verl_reward as verl_reward
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.samples import read_samples
from dppo_bench.eval.score import check_samples
from dppo_bench.eval.verl_dump import convert_dump, dump_path
from dppo_bench.problem_sets.load import DataError, Problem, ProblemSet, problems_sha256

INFO = {"problem_id": "aime2024-I-01", "answer_type": "integer", "index": 0}


def test_compute_score_values():
    right = verl_reward.compute_score("aime24", "...\nAnswer: 204", "204", INFO)
    assert right == {"score": 1.0, "acc": 1.0, "pred": "204", "timeout": 0.0, "problem_id": "aime2024-I-01"}
    wrong = verl_reward.compute_score("math_dapo", "no answer", "204", None, incorrect_score=-1.0)
    assert wrong == {"score": -1.0, "acc": 0.0, "pred": "", "timeout": 0.0, "problem_id": ""}


def test_compute_score_from_threads_loaded_by_path_like_verl():
    """verl runs a sync reward in executor threads; math-verify items then go through the shared pool."""
    spec = importlib.util.spec_from_file_location("custom_module_test", verl_reward.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls = [
        ("\\boxed{\\frac{408}{2}}", "204", {}),
        ("\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}", "204", {"timeout_s": 0.3}),
        ("Answer: 025", "25", {}),
        ("\\boxed{\\frac{1}{3}}", "\\frac{2}{6}", {}),
        ("\\boxed{9^{9^{9^9}}}", "204", {}),  # too large to compute: compared as written, in the calling thread
    ] * 3
    with ThreadPoolExecutor(6) as ex:
        results = list(ex.map(lambda c: module.compute_score("x", c[0], c[1], {"answer_type": "auto"}, **c[2]), calls))
    expected = [(1.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 0.0), (0.0, 0.0)] * 3
    assert [(r["score"], r["timeout"]) for r in results] == expected


def test_rows_of_a_template_that_opens_reasoning_need_a_closed_reasoning_block():
    """Online as offline: rows prepared for aime24_sanity (r1_boxed) that never write </think> did not answer."""
    sanity = {**INFO, "dataset": "aime24_sanity"}
    unfinished = verl_reward.compute_score("aime24", "so the answer is \\boxed{204}", "204", sanity)
    finished = verl_reward.compute_score("aime24", "ok</think>\\boxed{204}", "204", sanity)
    assert (unfinished["acc"], unfinished["pred"], finished["acc"]) == (0.0, "", 1.0)
    assert verl_reward.compute_score("aime24", "\\boxed{204}", "204", {**INFO, "dataset": "aime24"})["acc"] == 1.0


PROBLEMS = [Problem("q0", "Compute $1+1$.", "2"), Problem("q1", "Compute $2+3$.", "5")]
PSET = ProblemSet(PROBLEMS, problems_sha256(PROBLEMS), "test", "local", None)


def dump_rows(with_ids: bool) -> list[dict]:
    """Rows the way verl's _write_generations writes them (see the integration test for verl's own writer)."""
    template = load_prompt("dapo_answer")
    rows = []
    for uid, p in enumerate(PROBLEMS + [Problem("other", "A problem of another validation set.", "9")]):
        prompt = "user\n" + template.messages(p.problem)[0]["content"] + "\nassistant\n"
        for s in range(2):
            extra = {"acc": 1.0, "pred": p.answer, "timeout": 0.0, "problem_id": p.id if with_ids else ""}
            output = f"step {s}: \\boxed{{{p.answer if s == 0 else 0}}}"
            rows.append({"input": prompt, "output": output, "gts": p.answer, "score": 1.0, "step": 10, **extra})
            rows[-1]["uid"] = f"{uid}_{s}_0"
    return rows


@pytest.mark.parametrize("with_ids", [True, False], ids=["by problem_id", "by prompt text"])
def test_convert_dump(tmp_path, with_ids):
    (tmp_path / "val").mkdir()
    for step, rows in ((5, dump_rows(with_ids)[:2]), (10, dump_rows(with_ids))):
        (tmp_path / "val" / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert dump_path(tmp_path / "val", None).name == "10.jsonl"
    out = tmp_path / "s.jsonl.gz"
    bench = load_benchmark("aime24").model_copy(update={"id": "tiny", "n": 2})
    summary = convert_dump(
        tmp_path / "val", PSET, out, benchmark="tiny", model="run-7", sampling={"n": 2}, template="dapo_answer"
    )
    assert summary["problems"] == {"q0": 2, "q1": 2} and summary["skipped_rows"] == 2
    samples = read_samples(out)
    grouped = check_samples(bench, PSET, samples, 2)
    assert [r["completion"] for r in grouped["q1"]] == ["step 0: \\boxed{5}", "step 1: \\boxed{0}"]
    assert samples.header["model"] == {"path": "run-7", "kind": "verl-validation", "step": 10}
    assert samples.header["source"]["verl_dump"].endswith("10.jsonl")


def test_convert_dump_refuses_another_problem_set(tmp_path):
    rows = dump_rows(True)
    rows[0]["gts"] = "3"
    dump = tmp_path / "10.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="line 1: field 'gts' is '3', but q0 has answer '2'"):
        convert_dump(
            dump, PSET, tmp_path / "s.jsonl.gz", benchmark="tiny", model="m", sampling={}, template="dapo_answer"
        )
    with pytest.raises(DataError, match="no validation dump for step 3"):
        dump_path(tmp_path, 3)


def test_a_converted_dump_records_the_benchmarks_template(tmp_path):
    """The dump's prompts were made with the benchmark's template, so offline scoring applies its reasoning rule as
    verl's reward did: for r1_boxed, a completion that never closes its reasoning has no answer."""
    from dppo_bench.eval.score import opens_reasoning

    (tmp_path / "10.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dump_rows(True)))
    out = tmp_path / "s.jsonl.gz"
    convert_dump(tmp_path / "10.jsonl", PSET, out, benchmark="tiny", model="m", sampling={}, template="r1_boxed")
    template = read_samples(out).header["prompt"]["template"]
    assert template == "r1_boxed" and opens_reasoning(template, out) is True
