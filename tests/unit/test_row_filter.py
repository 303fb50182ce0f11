"""A source's ``where`` filters: a problem set that is a selection of a file's rows (MATH level 1 of MATH train)."""

import json

import pytest

from dppo_bench.config.specs import load_dataset_spec
from dppo_bench.config.yaml_io import ConfigError
from dppo_bench.problem_sets.load import DataError, load_problem_set, problems_sha256

ROWS = [
    {"id": "a", "problem": "1+1", "answer": "2", "level": 1, "meta": {"kind": "sum"}},
    {"id": "b", "problem": "2+2", "answer": "4", "level": 2, "meta": {"kind": "sum"}},
    {"id": "c", "problem": "x/2", "answer": "\\frac{x}{2}", "level": 1, "meta": {"kind": "frac"}},
    {"id": "d", "problem": "3+3", "answer": "6", "level": True, "meta": {"kind": "sum"}},
    {"id": "e", "problem": "4+4", "answer": "8", "level": "1", "meta": {"kind": "sum"}},
]


def spec(tmp_path, where: str, rows=ROWS):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d").mkdir(exist_ok=True)
    (tmp_path / "d" / "sel.yaml").write_text(
        "title: sel\ndata_source: sel\nanswer_type: auto\nprompt: as_is\n"
        f"sources:\n  local:\n    path: {data}\n    sha256: null\n    where: {where}\n"
    )
    return load_dataset_spec("sel", tmp_path / "d")


@pytest.mark.parametrize(
    ("where", "ids"),
    [
        ("[{column: level, one_of: [1]}]", ["a", "c"]),  # 1 is not True, nor "1"
        ("[{column: level, one_of: ['1']}]", ["e"]),
        ("[{column: level, one_of: [1, 2]}, {column: answer, pattern: '-?\\d+'}]", ["a", "b"]),  # every filter holds
        ("[{column: meta.kind, one_of: [frac]}]", ["c"]),  # a dotted path, as a field rule's column
        ("[{column: answer, pattern: '\\d'}]", ["a", "b", "d", "e"]),  # a full match, not a search
    ],
)
def test_where_keeps_the_rows_every_filter_accepts_and_the_hash_pins_them(tmp_path, where, ids):
    problems = load_problem_set(spec(tmp_path, where))
    assert [p.id for p in problems.problems] == ids
    assert problems.filtered_out == len(ROWS) - len(ids)
    assert problems.sha256 == problems_sha256(problems.problems)  # the selected set's hash, which a spec pins


def test_a_filter_on_a_missing_column_or_keeping_nothing_is_an_error(tmp_path):
    with pytest.raises(DataError, match="row 0: where: no column 'grade'"):
        load_problem_set(spec(tmp_path, "[{column: grade, one_of: [1]}]"))
    with pytest.raises(DataError, match="keep none of its 5 rows"):
        load_problem_set(spec(tmp_path, "[{column: level, one_of: [9]}]"))


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("[{column: level}]", "give one_of or pattern"),
        ("[{column: level, pattern: '('}]", "not a valid regex"),
        ("[{column: level, one_of: []}]", "at least 1"),
        ("[{column: level, equals: 1}]", "equals"),
    ],
)
def test_a_bad_filter_is_refused_when_the_spec_loads(tmp_path, where, message):
    with pytest.raises(ConfigError, match=message):
        spec(tmp_path, where)
