"""Scoring: hand-computed avg@n and pass@k end to end, and an error naming whatever is incomplete or unknown."""

import gzip
import hashlib
import json
import os
import subprocess
import sys
from math import comb
from pathlib import Path

import pytest

from dppo_bench.cli import main
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.samples import SamplesError, read_samples, write_samples
from dppo_bench.eval.score import UNKNOWN, check_samples, score_samples, write_scores
from dppo_bench.problem_sets.load import Problem, ProblemSet, load_problem_set, problems_sha256

FORMATS = json.loads((Path(__file__).parents[1] / "cases" / "scoring_formats.json").read_text())


def completion(template: str, answer: str) -> str:
    wrong = str((int(answer) + 1) % 1000)
    return template.replace("{a03}", f"{int(answer):03d}").replace("{a}", answer).replace("{w}", wrong)


def synthetic(problems: list[Problem], n: int, correct_counts: list[int]) -> dict[str, list[str]]:
    """c_i right completions then n - c_i wrong ones, cycling through every format of the cases file."""
    out = {}
    for p, c in zip(problems, correct_counts, strict=True):
        right = [completion(FORMATS["right"][j % len(FORMATS["right"])], p.answer) for j in range(c)]
        wrong = [completion(FORMATS["wrong"][j % len(FORMATS["wrong"])], p.answer) for j in range(n - c)]
        out[p.id] = right + wrong
    return out


def tiny_benchmark(n: int = 4):
    problems = [Problem(f"q{i}", f"problem {i}", str(10 * i + 5)) for i in range(3)]
    bench = load_benchmark("aime24").model_copy(update={"id": "tiny", "n": n})
    return bench, ProblemSet(problems, problems_sha256(problems), "test", "local", None)


def header(bench, problems):
    return {"benchmark": bench.id, "data_sha256": problems.sha256, "model": {"path": "m"}, "sampling": {"n": bench.n}}


def test_hand_computed_metrics(tmp_path):
    bench, problems = tiny_benchmark(4)
    path = tmp_path / "s.jsonl.gz"
    write_samples(path, header(bench, problems), synthetic(problems.problems, 4, [0, 1, 4]))
    scores = score_samples(bench, problems, read_samples(path), workers=1)
    assert scores["avg@4"] == pytest.approx((0 + 1 / 4 + 1) / 3)
    # pass@2: problem 1 has 1 of 4 right: 1 - C(3,2)/C(4,2) = 1/2; pass@4: 2 of 3 problems solved
    assert scores["pass@k"] == pytest.approx({"1": 5 / 12, "2": (0 + 0.5 + 1) / 3, "4": 2 / 3})
    assert [(p["problem_id"], p["n"], p["c"], p["timeouts"]) for p in scores["problems"]] == [
        ("q0", 4, 0, 0),
        ("q1", 4, 1, 0),
        ("q2", 4, 4, 0),
    ]
    assert scores["ci"]["low"] <= scores["avg@4"] <= scores["ci"]["high"]
    assert scores["verifier"]["name"] == "math-verify" and scores["verifier"]["version"] == "0.9.0"
    assert scores["sampling"] == {"n": 4} and scores["timeouts"] == 0


@pytest.mark.shared_data
def test_dppo_bench_score_on_aime24(shared_data, tmp_path, capsys):
    """30 AIME 2024 problems x 32 samples in every format; c_i = (7 i) mod 33 known by construction."""
    bench = load_benchmark("aime24")
    problems = load_problem_set(bench, source=shared_data)
    counts = [(7 * i) % 33 for i in range(30)]
    samples = tmp_path / "samples.jsonl.gz"
    write_samples(samples, header(bench, problems), synthetic(problems.problems, 32, counts))
    data = tmp_path / "aime24.problems.jsonl"
    data.write_text("".join(json.dumps(p.row()) + "\n" for p in problems.problems))
    out = tmp_path / "scores.json"
    args = ["score", "--benchmark", "aime24", "--samples", str(samples), "--out", str(out), "--data", str(data)]
    assert main([*args, "--workers", "2"]) == 0
    scores = json.loads(out.read_text())
    assert scores["avg@32"] == pytest.approx(sum(c / 32 for c in counts) / 30)
    for k in (1, 2, 4, 8, 16, 32):
        expected = sum(1 - comb(32 - c, k) / comb(32, k) for c in counts) / 30
        assert scores["pass@k"][str(k)] == pytest.approx(expected)
    assert [p["c"] for p in scores["problems"]] == counts
    assert scores["data_pinned"] and scores["data_sha256"] == bench.sources.local.sha256
    wrong = FORMATS["wrong"]
    stating_none = sum(wrong[j % len(wrong)] in FORMATS["no_answer"] for c in counts for j in range(32 - c))
    assert scores["no_answer"] == stating_none > 0
    assert "avg@32 = " in capsys.readouterr().out


def rows_file(tmp_path, bench, problems, rows, **header_changes):
    """A samples file with exactly ``rows`` (problem_id, sample) written as they are (even if invalid)."""
    path = tmp_path / "s.jsonl.gz"
    write_samples(path, {**header(bench, problems), **header_changes}, {})
    lines = "".join(json.dumps({"problem_id": p, "sample": s, "completion": "\\boxed{5}"}) + "\n" for p, s in rows)
    with open(path, "ab") as f:
        f.write(gzip.compress(lines.encode()))
    return read_samples(path)


ALL = [(f"q{i}", s) for i in range(3) for s in range(2)]


@pytest.mark.parametrize(
    "rows, message",
    [
        (ALL[:-1], r"fewer than n = 2 samples for 1 problem\(s\): q2 \(1 of 2\)"),
        (ALL[:2], r"for 2 problem\(s\): q1 \(0 of 2\), q2 \(0 of 2\)"),
        ([*ALL, ("q9", 0)], "problem_id 'q9' is not a problem of tiny"),
        ([*ALL, ("q1", 1)], "duplicate sample 1 of problem 'q1'"),
        ([*ALL, ("q1", 2)], r"problem 'q1' has sample 2, but n = 2 \(samples are 0..1\)"),
    ],
)
def test_incomplete_or_unknown_samples_are_errors(tmp_path, rows, message):
    bench, problems = tiny_benchmark(2)
    samples = rows_file(tmp_path, bench, problems, rows)
    with pytest.raises(SamplesError, match=message) as e:
        check_samples(bench, problems, samples, 2)
    assert str(samples.path) in str(e.value)


def test_samples_of_another_benchmark_or_problem_set_are_refused(tmp_path):
    bench, problems = tiny_benchmark(2)
    with pytest.raises(SamplesError, match="header field 'benchmark' is 'aime25', not 'tiny'"):
        check_samples(bench, problems, rows_file(tmp_path, bench, problems, ALL, benchmark="aime25"), 2)
    (tmp_path / "s.jsonl.gz").unlink()
    with pytest.raises(SamplesError, match="header field 'data_sha256' is 0+, but the problems"):
        check_samples(bench, problems, rows_file(tmp_path, bench, problems, ALL, data_sha256="0" * 64), 2)


def test_a_truncated_samples_file_is_an_error(tmp_path):
    """Ours ends in an interrupted append, which the generator resumes; another tool's file was cut short."""
    bench, problems = tiny_benchmark(2)
    samples = rows_file(tmp_path, bench, problems, ALL)
    with open(samples.path, "ab") as f:
        f.write(b"\x1f\x8b\x08\x00partial")
    with pytest.raises(SamplesError, match="ends in 11 bytes of an interrupted write .*; rerun the generation"):
        check_samples(bench, problems, read_samples(samples.path), 2)
    rows = [(p.id, s, "\\boxed{1}") for p in problems.problems for s in range(2)]
    other = headerless(tmp_path / "other.jsonl.gz", rows)
    whole = other.read_bytes()
    other.write_bytes(whole[: len(whole) - 12])  # one gzip stream, as other tools write, cut short
    with pytest.raises(SamplesError, match=r"other.jsonl.gz: truncated: .*copy the file again") as e:
        check_samples(bench, problems, read_samples(other), 2)
    assert "resume" not in str(e.value) and "rerun the generation" not in str(e.value)


def test_pathological_answers_and_corrupt_completions_are_graded_wrong(tmp_path):
    """A tower too large to compute is compared as written (wrong, no timeout); deep nesting scores wrong with a
    timeout; a completion that is merely long is graded on its final answer like any other; one whose bytes are
    not UTF-8 is graded wrong (its text cannot be trusted)."""
    bench, problems = tiny_benchmark(2)
    path = tmp_path / "s.jsonl.gz"
    write_samples(path, header(bench, problems), {})
    bad = [
        ("q0", 0, "\\boxed{9^{9^{9^9}}}"),
        ("q0", 1, "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}"),
        ("q1", 0, "x" * 200_000 + "\\boxed{15}"),
        ("q1", 1, "\\boxed{15}"),
        ("q2", 0, "\\boxed{25} \udcff"),
        ("q2", 1, "\\boxed{\\frac{50}{2}}"),
    ]
    lines = "".join(json.dumps({"problem_id": p, "sample": s, "completion": c}) + "\n" for p, s, c in bad)
    raw = lines.encode("utf-8", errors="surrogateescape").replace(b"\\udcff", b"\xff")
    with open(path, "ab") as f:
        f.write(gzip.compress(raw))
    samples = read_samples(path)
    scores = score_samples(bench, problems, samples, workers=2, timeout_s=0.5)
    assert [(p["c"], p["timeouts"], p["invalid_utf8"]) for p in scores["problems"]] == [(0, 1, 0), (2, 0, 0), (1, 0, 1)]
    assert [v["timeout"] for v in scores["problems"][0]["verdicts"]] == [False, True]
    assert scores["timeouts"] == 1 and scores["invalid_utf8"] == 1 and scores["samples"]["invalid_utf8_lines"] == 1
    q2 = scores["problems"][2]["verdicts"]
    assert [(v["sample"], v["correct"], v["invalid_utf8"]) for v in q2] == [(0, False, True), (1, True, False)]
    assert scores["no_answer"] == 0  # the corrupt sample is counted as corrupt, not as a missing answer


def test_scores_json_holds_counts_and_names_the_per_sample_verdicts(tmp_path):
    bench, problems = tiny_benchmark(2)
    path = tmp_path / "s.jsonl.gz"
    write_samples(path, header(bench, problems), synthetic(problems.problems, 2, [0, 1, 2]))
    out = tmp_path / "step5" / "scores.json"
    write_scores(score_samples(bench, problems, read_samples(path), workers=1), out)
    scores = json.loads(out.read_text())
    assert all("verdicts" not in p for p in scores["problems"])
    verdicts_file = out.parent / scores["verdicts"]["path"]
    assert verdicts_file.name == "scores.verdicts.jsonl.gz"
    data = verdicts_file.read_bytes()
    assert hashlib.sha256(data).hexdigest() == scores["verdicts"]["sha256"]
    rows = [json.loads(line) for line in gzip.decompress(data).decode().splitlines()]
    assert [(r["problem_id"], r["sample"]) for r in rows] == [(f"q{i}", s) for i in range(3) for s in range(2)]
    assert [r["correct"] for r in rows] == [False, False, True, False, True, True]
    # the counts in scores.json are the verdicts summed
    for p in scores["problems"]:
        assert p["c"] == sum(r["correct"] for r in rows if r["problem_id"] == p["problem_id"])
    assert rows[4]["answer"] == "25" and rows[0]["timeout"] is False


def headerless(path: Path, rows: list[tuple[str, int, str]]) -> Path:
    data = "".join(json.dumps({"problem_id": p, "sample": s, "completion": c}) + "\n" for p, s, c in rows).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("name", ["other.jsonl", "other.jsonl.gz"])
def test_completions_of_other_tools_score_with_their_provenance_unknown(tmp_path, name):
    bench, problems = tiny_benchmark(2)
    rows = [
        (p.id, s, f"Answer: ${p.answer}$ (without quotes)" if s else "no idea")
        for p in problems.problems
        for s in range(2)
    ]
    scores = score_samples(bench, problems, read_samples(headerless(tmp_path / name, rows)), workers=1)
    assert scores["avg@2"] == 0.5 and scores["no_answer"] == 3
    assert scores["model"] == scores["sampling"] == scores["prompt"] == UNKNOWN


@pytest.mark.shared_data
def test_dppo_bench_score_takes_a_headerless_file(shared_data, tmp_path, capsys):
    """The command of the README, with the benchmark's own data source (as from a fresh clone beside ../shared)."""
    bench = load_benchmark("aime24")
    if not bench.sources.local.resolve().is_file():
        pytest.skip(f"{bench.sources.local.resolve()} is not beside this checkout")
    problems = load_problem_set(bench)
    rows = [(p.id, s, f"Answer: {p.answer}" if s < 8 else "\\boxed{-1}") for p in problems.problems for s in range(32)]
    samples = headerless(tmp_path / "completions.jsonl", rows)
    out = tmp_path / "scores.json"
    assert main(["score", "--benchmark", "aime24", "--samples", str(samples), "--out", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert scores["avg@32"] == 0.25 and scores["model"] == UNKNOWN and scores["data_pinned"]
    assert "has no header" in capsys.readouterr().out


def test_a_header_naming_an_unknown_prompt_template_is_an_error(tmp_path):
    bench, problems = tiny_benchmark(2)
    samples = rows_file(tmp_path, bench, problems, ALL, prompt={"template": "nope"})
    with pytest.raises(SamplesError, match=r"prompt template: .*unknown prompt template 'nope'"):
        score_samples(bench, problems, samples, workers=1)


def test_the_prompt_template_of_the_header_says_whether_reasoning_was_opened(tmp_path):
    bench, problems = tiny_benchmark(1)
    path = tmp_path / "s.jsonl.gz"
    rows = {p.id: [f"so the answer is \\boxed{{{p.answer}}}"] for p in problems.problems}
    write_samples(path, {**header(bench, problems), "prompt": {"template": "r1_boxed"}}, rows)
    assert score_samples(bench, problems, read_samples(path), workers=1)["avg@1"] == 0.0  # no </think>: unfinished
    other = tmp_path / "t.jsonl.gz"
    write_samples(other, {**header(bench, problems), "prompt": {"template": "dapo_answer"}}, rows)
    assert score_samples(bench, problems, read_samples(other), workers=1)["avg@1"] == 1.0
    with pytest.raises(SamplesError, match="header field 'prompt.template' is 'dapo_answer', not 'r1_boxed'"):
        score_samples(bench, problems, read_samples(other), workers=1, prompt="r1_boxed")


def test_a_headerless_file_may_name_its_prompt_template(tmp_path):
    """Completions of an R1-style model made elsewhere: cut off inside the reasoning, they did not answer."""
    bench, problems = tiny_benchmark(1)
    rows = [(p.id, 0, f"so the answer is {p.answer}, let me verify") for p in problems.problems]
    samples = read_samples(headerless(tmp_path / "r1.jsonl", rows))
    assert score_samples(bench, problems, samples, workers=1)["avg@1"] == 1.0
    declared = score_samples(bench, problems, samples, workers=1, prompt="r1_boxed")
    assert declared["avg@1"] == 0.0 and declared["no_answer"] == 3
    assert declared["prompt"] == {"template": "r1_boxed", "declared": True} and declared["model"] == UNKNOWN


EXPENSIVE = [  # about 0.2 s of CPU each: a wall-clock limit of 0.5 s would flip them on a loaded machine
    (f"\\boxed{{(x+{k})^{{8}}}}", "+".join(f"{comb(8, j) * k ** (8 - j)}x^{{{j}}}" for j in range(9)))
    for k in range(1, 4)
]


@pytest.mark.slow
def test_the_same_samples_give_the_same_verdicts_on_a_busy_machine(tmp_path):
    """Scored idle, then with a busy loop on every core, in worker processes and in this one: the verdict files
    are byte for byte the same (CPU-time limits; a timed-out pair is retried alone with a larger budget)."""
    problems = [Problem(f"e{k}", "expand", gold) for k, (_, gold) in enumerate(EXPENSIVE)]
    problems += [Problem("tower", "t", "7"), Problem("deep", "d", "7")]
    problem_set = ProblemSet(problems, problems_sha256(problems), "test", "local", None)
    bench = load_benchmark("math500").model_copy(update={"id": "load", "n": 2})
    rows = {p.id: [c, "\\boxed{x^8}"] for p, (c, _) in zip(problems, EXPENSIVE, strict=False)}
    rows["tower"] = ["\\boxed{9^{9^{9^9}}}", "\\boxed{7}"]  # too large to compute: compared as written
    rows["deep"] = ["\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}", "\\boxed{7}"]  # math-verify runs out
    path = tmp_path / "s.jsonl.gz"
    write_samples(path, {"benchmark": "load", "data_sha256": problem_set.sha256}, rows)

    def verdicts(name: str, workers: int) -> bytes:
        out = tmp_path / name / "scores.json"
        write_scores(score_samples(bench, problem_set, read_samples(path), workers=workers, timeout_s=0.5), out)
        return (out.parent / "scores.verdicts.jsonl.gz").read_bytes()

    idle = verdicts("idle", 2)
    busy_loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        busy, busy_here = verdicts("busy", 2), verdicts("busy_here", 1)
    finally:
        for p in busy_loops:
            p.kill()
            p.wait()
    assert busy == idle and busy_here == idle
    rows_idle = [json.loads(line) for line in gzip.decompress(idle).decode().splitlines()]
    assert [(r["correct"], r["timeout"]) for r in rows_idle] == [(True, False), (False, False)] * 3 + [
        (False, False),
        (True, False),
        (False, True),
        (True, False),
    ]
