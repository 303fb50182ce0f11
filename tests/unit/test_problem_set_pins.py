"""A spec's pinned sha256 is checked wherever its problems are read or written: the spec's own file given with
--data, a prepared file (its manifest names the source), the start checks, `tiny data` and `train`; a mismatch
names the file, the spec, the field and both hashes. A file that is none of the spec's sources is read unpinned."""

import json
import subprocess
import sys

import pytest
from snakemake_fixtures import ENV, recipe_root

from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.roots import ROOT_VARIABLE
from dppo_bench.config.specs import load_benchmark
from dppo_bench.problem_sets.load import HashMismatch, load_problem_set
from dppo_bench.problem_sets.pins import check_file, check_present_sources, pin_of, problems_for
from dppo_bench.problem_sets.prepare import prepare

WRONG = "ab" * 32


def write_problems(path, answers=(2, 4, 6)):
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"t{i}", "problem": f"{a // 2}+{a // 2}=?", "answer": str(a)} for i, a in enumerate(answers)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def spec_pinning(tmp_path, data, sha256, name="pinned"):
    eval_dir = tmp_path / f"eval_{name}"
    eval_dir.mkdir(exist_ok=True)
    (eval_dir / "tiny.yaml").write_text(
        "title: tiny\ndata_source: tiny\nanswer_type: integer\nprompt: as_is\nn: 2\n"
        "sampling: {temperature: 1.0, top_p: 1.0, max_tokens: 8}\n"
        f"sources:\n  local: {{path: {data}, sha256: {sha256}}}\n"
    )
    return load_benchmark("tiny", eval_dir)


@pytest.fixture
def data(tmp_path):
    """A problems file and its true sha256 (that of its normalized rows)."""
    path = write_problems(tmp_path / "problems.jsonl")
    unpinned = spec_pinning(tmp_path, path, "null", "unpinned")
    return path, load_problem_set(unpinned).sha256


def assert_names_the_mismatch(error, path, spec, field, actual):
    message = str(error.value)
    assert message.startswith(f"{path}: ") and str(spec.path) in message and f"field '{field}'" in message
    assert actual in message and WRONG in message


def test_the_spec_s_own_file_given_as_data_is_checked(tmp_path, data):
    path, actual = data
    wrong = spec_pinning(tmp_path, path, WRONG)
    with pytest.raises(HashMismatch) as error:
        problems_for(wrong, path)
    assert_names_the_mismatch(error, path, wrong, "sources.local.sha256", actual)
    assert problems_for(spec_pinning(tmp_path, path, actual, "right"), path).sha256 == actual


def test_a_relative_source_is_the_file_under_the_working_directory(tmp_path, monkeypatch, data):
    """The pipeline writes results/ under its working directory (snakemake --directory), not the checkout."""
    _, actual = data
    monkeypatch.chdir(tmp_path)
    relative = write_problems(tmp_path / "results" / "heldout.jsonl").relative_to(tmp_path)
    with pytest.raises(HashMismatch) as error:
        problems_for(spec_pinning(tmp_path, relative, WRONG), relative)
    assert_names_the_mismatch(error, relative, spec_pinning(tmp_path, relative, WRONG), "sources.local.sha256", actual)


def test_a_file_that_is_none_of_the_spec_s_sources_is_read_unpinned(tmp_path, data):
    path, actual = data
    other = write_problems(tmp_path / "other.jsonl", answers=(8, 10))
    problems = problems_for(spec_pinning(tmp_path, path, actual), other)
    assert problems.pinned_sha256 is None and problems.sha256 != actual


def test_prepared_files_are_checked_against_the_pin_of_the_source_they_were_made_from(tmp_path, data):
    path, actual = data
    right = spec_pinning(tmp_path, path, actual, "right")
    out = tmp_path / "prepared"
    prepare(right, load_problem_set(right), load_prompt("as_is"), out)
    manifest = json.loads((out / "tiny.manifest.json").read_text())
    assert set(manifest["files"]) == {"tiny.parquet", "tiny.problems.jsonl"}
    check_file(out / "tiny.parquet", [right])
    assert problems_for(right, out / "tiny.problems.jsonl").sha256 == actual

    wrong = spec_pinning(tmp_path, path, WRONG)  # the pin edited after the data was prepared
    with pytest.raises(HashMismatch) as error:
        problems_for(wrong, out / "tiny.problems.jsonl")
    assert_names_the_mismatch(error, out / "tiny.problems.jsonl", wrong, "sources.local.sha256", actual)
    with pytest.raises(HashMismatch) as error:
        check_file(out / "tiny.parquet", [wrong])
    assert_names_the_mismatch(error, out / "tiny.parquet", wrong, "sources.local.sha256", actual)

    parquet = bytearray((out / "tiny.parquet").read_bytes())
    parquet[len(parquet) // 2] ^= 1
    (out / "tiny.parquet").write_bytes(bytes(parquet))
    with pytest.raises(HashMismatch, match=r"tiny\.parquet: its sha256 differs .* 'files\.tiny\.parquet'"):
        check_file(out / "tiny.parquet", [right])


def test_the_start_checks_refuse_a_present_source_with_another_hash(tmp_path, data):
    path, actual = data
    wrong = spec_pinning(tmp_path, path, WRONG)
    with pytest.raises(HashMismatch) as error:
        check_present_sources([wrong])
    assert_names_the_mismatch(error, path, wrong, "sources.local.sha256", actual)
    check_present_sources([spec_pinning(tmp_path, path, actual, "right")])
    check_present_sources([spec_pinning(tmp_path, tmp_path / "absent.jsonl", WRONG, "absent")])  # nothing to read


def test_the_tiny_task_s_pinned_splits_match_their_specs(tmp_path, monkeypatch):
    """The pins of eval/tiny_arith.yaml and recipes/datasets/tiny_arith_train.yaml are those `tiny data` writes."""
    from dppo_bench.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results/data/tiny/tiny_sanity"
    assert main(["tiny", "data", "--setting", "tiny_sanity", "--out", str(out)]) == 0
    check_file(out / "heldout.jsonl")
    check_file(out / "train.jsonl")
    assert pin_of(load_benchmark("tiny_arith"), out / "heldout.jsonl") == (
        "sources.local.sha256",
        load_benchmark("tiny_arith").sources.local.sha256,
    )


def test_tiny_data_refuses_a_wrong_pin_before_writing_and_so_do_the_start_checks(tmp_path):
    root = recipe_root(tmp_path)
    spec = root / "eval" / "tiny_arith.yaml"
    text = spec.read_text()
    pinned = text.split("sha256: ")[1].split()[0]
    spec.write_text(text.replace(pinned, WRONG))
    env = {**ENV, ROOT_VARIABLE: str(root)}
    out = "results/data/tiny/tiny_sanity"
    cmd = [sys.executable, "-m", "dppo_bench", "tiny", "data", "--setting", "tiny_sanity", "--out", out]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert f"{out}/heldout.jsonl: the normalized problem set has sha256 {pinned}" in proc.stderr
    assert f"{spec} field 'sources.local.sha256' pins {WRONG}" in proc.stderr
    assert not (tmp_path / out).exists()

    # the data as the right pin made it, then the pin edited: every start refuses, naming the same
    spec.write_text(text)
    assert subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True).returncode == 0
    spec.write_text(text.replace(pinned, WRONG))
    check = [sys.executable, "-c", "from dppo_bench.start_checks import load_suite; load_suite()"]
    proc = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and f"field 'sources.local.sha256' pins {WRONG}" in proc.stderr, proc.stderr
