"""Problem sets: normalization, hashes verified (and a tampered copy refused), hub mappings, verl parquet."""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from dppo_bench.cli import main
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import Fields, load_benchmark, load_dataset_spec
from dppo_bench.problem_sets.load import DataError, HashMismatch, load_problem_set, normalize
from dppo_bench.problem_sets.pins import problems_for
from dppo_bench.problem_sets.prepare import prepare

pytestmark = pytest.mark.shared_data

ORIGINALS = {  # benchmark -> (original file in ../shared/data, the split name of the hub dataset)
    "aime24": ("aime24/orig/aime24_test.jsonl", "train"),
    "aime25": ("aime25/orig/aime25_test.jsonl", "test"),
    "math500": ("math500/orig/math500_test.jsonl", "test"),
}


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.mark.parametrize("name", ["aime24", "aime25", "math500"])
def test_shared_data_hashes_are_verified(shared_data, name):
    spec = load_benchmark(name)
    problems = load_problem_set(spec, source=shared_data)
    assert problems.sha256 == spec.sources.local.sha256 == problems.pinned_sha256
    assert len(problems.problems) == {"aime24": 30, "aime25": 30, "math500": 500}[name]


def test_aime_ids_and_integer_answers(shared_data):
    problems = load_problem_set(load_benchmark("aime24"), source=shared_data).by_id()
    assert (problems["aime2024-I-01"].answer, problems["aime2024-I-02"].answer) == ("204", "25")
    assert sorted(problems)[-1] == "aime2024-II-15"


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_hub_mapping_reproduces_the_local_set(shared_data, tmp_path, name):
    """The hub loader (datasets.load_dataset) on a local mirror of each copy's *original* file."""
    original, split = ORIGINALS[name]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(shared_data / original, mirror / f"{split}.jsonl")
    spec = load_benchmark(name)
    from_hub = load_problem_set(spec, hub=str(mirror))
    assert from_hub.source_kind == "hub" and from_hub.pinned_sha256 is None
    assert from_hub.sha256 == spec.sources.local.sha256


def test_an_unreachable_hub_is_a_clear_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/aime_2024' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match=r"HuggingFaceH4/aime_2024@UNPINNED: cannot load split 'train': .*--hub DIR"):
        load_problem_set(load_benchmark("aime24"), hub=True)


def test_a_tampered_copy_is_a_clear_error(shared_data, tmp_path, capsys):
    rows = (shared_data / "aime24" / "aime24.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    rows[0] = json.dumps({**first, "answer": "205"})
    copy = tmp_path / "aime24.jsonl"
    copy.write_text("\n".join(rows) + "\n")
    spec = load_benchmark("aime24")
    with pytest.raises(HashMismatch, match=f"{copy}: the normalized problem set has sha256 .* field "):
        load_problem_set(spec, source=copy)
    assert main(["data", "prepare", "aime24", "--source", str(copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(copy) in err and "'sources.local.sha256' pins 6cde5276" in err
    assert not (tmp_path / "out").exists()


def test_data_prepare_end_to_end(shared_data, tmp_path, capsys):
    out = tmp_path / "prepared"
    assert main(["data", "prepare", "aime25", "--source", str(shared_data), "--out", str(out)]) == 0
    assert "verified against" in capsys.readouterr().out
    rows = pq.read_table(out / "aime25.parquet").to_pylist()
    spec = load_benchmark("aime25")
    problems = load_problem_set(spec, source=shared_data)
    assert len(rows) == 30
    first = problems.problems[0]
    assert rows[0] == {
        "data_source": "aime25",
        "prompt": load_prompt("dapo_answer").messages(first.problem),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": first.answer},
        "extra_info": {
            "split": "test",
            "index": 0,
            "problem_id": first.id,
            "answer_type": "integer",
            "dataset": "aime25",
        },
    }
    manifest = json.loads((out / "aime25.manifest.json").read_text())
    assert manifest["verified"] and manifest["data_sha256"] == spec.sources.local.sha256
    normalized = problems_for(spec, out / "aime25.problems.jsonl")
    assert normalized.sha256 == problems.sha256
    # the same set again is fine; another set under the same id and directory is refused
    assert main(["data", "prepare", "aime25", "--source", str(shared_data), "--out", str(out)]) == 0
    small = tmp_path / "small.jsonl"
    small.write_text((shared_data / "aime25" / "aime25.jsonl").read_text().splitlines()[0] + "\n")
    other = load_problem_set(load_dataset_spec("sanity_r1d_1p5b"), source=small, verify=False)  # pins MATH train
    with pytest.raises(DataError, match="already holds aime25 with data_sha256"):
        prepare(spec, other, load_prompt("as_is"), out)


def test_sanity_evaluation_prepares_with_the_boxed_template(shared_data, tmp_path):
    assert main(["data", "prepare", "aime24_sanity", "--source", str(shared_data), "--out", str(tmp_path)]) == 0
    content = pq.read_table(tmp_path / "aime24_sanity.parquet").to_pylist()[0]["prompt"][0]["content"]
    assert content.endswith("\nPlease reason step by step, and put your final answer within \\boxed{}.")


def test_dapo_hub_mapping_on_a_verl_format_mirror(shared_data, tmp_path, capsys):
    """DAPO-Math-17k's hub rows carry the template in the prompt and repeat problems: strip and dedupe."""
    sample = [json.loads(line) for line in (shared_data / "dapo_math_17k_sample/dapo_math_17k_sample.jsonl").open()]
    template = load_prompt("dapo_answer")
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": template.messages(r["problem"]),
            "ability": "MATH",
            "reward_model": {"ground_truth": r["answer"], "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"uuid-{i}-{copy}"},
        }
        for copy in range(3)
        for i, r in enumerate(sample)
    ]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = load_dataset_spec("dapo_math_17k")
    problems = load_problem_set(spec, hub=str(mirror))
    assert problems.dropped_duplicates == 2 * len(sample)
    assert [p.problem for p in problems.problems] == [r["problem"] for r in sample]
    assert problems.problems[0].id == "dapo-math-17k-uuid-0-0"
    assert main(["data", "prepare", "dapo_math_17k", "--hub", str(mirror), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"dropped {2 * len(sample)} duplicate rows" in out and "NOT PINNED" in out
    prompts = [r["prompt"] for r in pq.read_table(tmp_path / "o" / "dapo_math_17k.parquet").to_pylist()]
    assert prompts == [r["prompt"] for r in rows[: len(sample)]]  # the same prompt text verl trains on


def test_the_dapo_sample_is_pinned_but_not_the_default(shared_data):
    spec = load_dataset_spec("dapo_math_17k")
    assert load_problem_set(spec, source=shared_data).sha256 == spec.sources.local.sha256
    assert spec.default_source() == "hub"


@pytest.mark.parametrize(
    "row, fields, message",
    [
        ({"q": "x", "a": "1"}, {"id": "id", "problem": "q", "answer": "a"}, "row 0: field 'id': no column 'id'"),
        ({"id": 1, "q": "", "a": "1"}, {"id": "id", "problem": "q", "answer": "a"}, "row 0: field 'problem' is empty"),
        (
            {"id": 1, "q": "Solve: x", "a": "1"},
            {"id": "id", "problem": {"column": "q", "strip_prefix": "Find"}, "answer": "a"},
            "row 0: field 'problem': does not start with strip_prefix 'Find'",
        ),
        (
            {"id": 1, "q": "x", "a": "1/2"},
            {"id": "id", "problem": "q", "answer": {"column": "a", "integer": True}},
            "row 0: field 'answer': value '1/2' is not an integer",
        ),
        (
            {"id": "7", "q": "x", "a": "1"},
            {"id": {"column": "id", "map": {"0": "a"}}, "problem": "q", "answer": "a"},
            "row 0: field 'id': value '7' of column 'id' is not in the map",
        ),
    ],
)
def test_bad_rows_name_the_row_and_field(row, fields, message):
    with pytest.raises(DataError, match=message):
        normalize([row], Fields.model_validate(fields), "src.jsonl")


def test_duplicate_ids_are_an_error():
    fields = Fields.model_validate({"id": "id", "problem": "q", "answer": "a"})
    with pytest.raises(DataError, match="row 1: field 'id': 'p' repeats row 0"):
        normalize([{"id": "p", "q": "x", "a": "1"}, {"id": "p", "q": "y", "a": "2"}], fields, "src.jsonl")


def test_a_benchmark_on_a_file_the_pipeline_generates(tmp_path, capsys):
    """Like the CPU miniature's tiny_arith: a local jsonl written by the pipeline, integer answers, no pinned hash."""
    data = tmp_path / "results" / "tiny_arith.jsonl"
    data.parent.mkdir()
    data.write_text(
        "".join(json.dumps({"id": f"t{i}", "problem": f"{i}+{i}=?", "answer": str(2 * i)}) + "\n" for i in range(5))
    )
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "tiny_arith.yaml").write_text(
        "title: tiny\ndata_source: tiny_arith\nanswer_type: integer\nprompt: r1_boxed\nn: 4\n"
        "sampling: {temperature: 1.0, top_p: 1.0, max_tokens: 16}\n"
        f"sources:\n  local: {{path: {data}, sha256: null}}\n"
    )
    spec = load_benchmark("tiny_arith", tmp_path / "eval")
    problems = load_problem_set(spec)
    assert (len(problems.problems), problems.pinned_sha256, problems.source_kind) == (5, None, "local")
    manifest = prepare(spec, problems, load_prompt(spec.prompt), tmp_path / "prepared")
    assert manifest["verified"] is False and manifest["data_sha256"] == problems.sha256


def test_missing_local_file_and_directory_layouts(tmp_path):
    spec = load_benchmark("aime24")
    with pytest.raises(DataError, match="holds neither aime24.jsonl nor aime24/aime24.jsonl"):
        load_problem_set(spec, source=tmp_path)
    with pytest.raises(DataError, match="file not found"):
        load_problem_set(spec, source=tmp_path / "none.jsonl")
