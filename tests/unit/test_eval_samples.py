"""samples.jsonl.gz: round trip, append-only resume after an interrupted write, header checks, bad bytes."""

import gzip
import json

import pytest

from dppo_bench.eval.samples import FORMAT, SamplesError, SamplesWriter, read_samples, write_samples

HEADER = {"benchmark": "aime24", "model": {"path": "m"}, "sampling": {"n": 2}, "created": "t0"}


@pytest.fixture
def path(tmp_path):
    return tmp_path / "samples.jsonl.gz"


def test_round_trip(path):
    write_samples(path, HEADER, {"p1": ["a", "b"], "p2": ["ü\n$x$", ""]})
    s = read_samples(path)
    assert s.header == {"format": FORMAT, **HEADER}
    assert [(r["problem_id"], r["sample"], r["completion"]) for r in s.rows] == [
        ("p1", 0, "a"),
        ("p1", 1, "b"),
        ("p2", 0, "ü\n$x$"),
        ("p2", 1, ""),
    ]
    assert (s.truncated_bytes, s.invalid_utf8_lines) == (0, 0)


def test_plain_jsonl_is_read_but_not_written(tmp_path):
    plain = tmp_path / "s.jsonl"
    rows = [{"format": FORMAT, **HEADER}, {"problem_id": "p1", "sample": 0, "completion": "a"}]
    plain.write_text("\n".join(json.dumps(r) for r in rows))  # other tools often end without a newline
    s = read_samples(plain)
    assert [r["completion"] for r in s.rows] == ["a"] and s.truncated_bytes == 0
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"problem_id": "p1", "sam')  # cut-off line
    cut = r"s.jsonl: line 3, the last, is not valid JSON and has no newline at its end: the file looks cut off"
    with pytest.raises(SamplesError, match=cut):
        read_samples(plain)
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"problem_id": "p1", "sam\n')  # ended: damage
    with pytest.raises(SamplesError, match=r"s.jsonl: line 3: not valid JSON: "):
        read_samples(plain)
    with pytest.raises(SamplesError, match="written as .jsonl.gz"):
        SamplesWriter(tmp_path / "new.jsonl", HEADER)


@pytest.mark.parametrize("name", ["other.jsonl", "other.jsonl.gz"])
def test_files_of_other_tools_are_read_without_a_header(tmp_path, name):
    rows = [{"problem_id": "p1", "sample": s, "completion": f"Answer: {s}"} for s in range(2)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    s = read_samples(path)
    assert (s.header, s.has_header, s.rows, s.truncated_bytes) == ({}, False, rows, 0)
    if name.endswith(".gz"):
        with pytest.raises(SamplesError, match="header field 'benchmark' is None in the file"):
            SamplesWriter(path, HEADER)  # never extended with samples of a known generation


def test_write_samples_never_overwrites(path):
    write_samples(path, HEADER, {"p1": ["a"]})
    with pytest.raises(SamplesError, match="already exists"):
        write_samples(path, HEADER, {"p1": ["b"]})
    assert read_samples(path).rows[0]["completion"] == "a"


def test_resume_after_an_interrupted_write_keeps_complete_problems(path):
    w = SamplesWriter(path, HEADER)
    w.append("p1", ["a", "b"])
    w.append("p2", ["c", "d"])
    complete = path.stat().st_size
    w.append("p3", ["e", "f"])
    with open(path, "r+b") as f:  # the process died in the middle of writing p3
        f.truncate(complete + (path.stat().st_size - complete) // 2)
    s = read_samples(path)
    assert s.truncated_bytes > 0 and {r["problem_id"] for r in s.rows} == {"p1", "p2"}

    resumed = SamplesWriter(path, {**HEADER, "created": "t1"})  # a later run: only 'created' differs
    assert resumed.dropped_bytes == s.truncated_bytes
    assert resumed.complete("p1", 2) and resumed.complete("p2", 2) and not resumed.complete("p3", 2)
    resumed.append("p3", ["e", "f"])
    again = read_samples(path)
    assert again.truncated_bytes == 0
    assert [(r["problem_id"], r["sample"]) for r in again.rows] == [
        (p, i) for p in ("p1", "p2", "p3") for i in range(2)
    ]
    assert again.header["created"] == "t0"


def test_resume_with_another_header_is_refused(path):
    SamplesWriter(path, HEADER).append("p1", ["a", "b"])
    with pytest.raises(SamplesError, match="header field 'sampling' is .* in the file but .* for this generation"):
        SamplesWriter(path, {**HEADER, "sampling": {"n": 4}})


def test_appending_a_sample_twice_is_refused(path):
    w = SamplesWriter(path, HEADER)
    w.append("p1", ["a"])
    with pytest.raises(SamplesError, match="sample 0 of problem 'p1' is already written"):
        w.append("p1", ["b"])


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    header = json.dumps({"format": FORMAT, **HEADER}).encode()
    row = b'{"problem_id": "p1", "sample": 0, "completion": "\\\\boxed{7} \xff\xfe tail"}'
    path.write_bytes(gzip.compress(header + b"\n" + row + b"\n"))
    s = read_samples(path)
    assert s.invalid_utf8_lines == 1 and s.invalid_utf8 == {("p1", 0)}
    assert s.rows[0]["completion"] == "\\boxed{7} \ufffd\ufffd tail"


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"problem_id": "p1", "sample": -1, "completion": "x"}', "field 'sample': expected int, got -1"),
        (b'{"problem_id": 3, "sample": 0, "completion": "x"}', "field 'problem_id': expected str"),
        (b'{"problem_id": "p1", "sample": true, "completion": "x"}', "field 'sample': expected int"),
        (b'{"problem_id": "p1", "sample": 0}', "field 'completion': expected str, got None"),
        (b"{not json", "line 2: not valid JSON"),
    ],
)
def test_bad_rows_name_the_line_and_field(tmp_path, line, message):
    path = tmp_path / "s.jsonl"
    path.write_bytes(json.dumps({"format": FORMAT}).encode() + b"\n" + line + b"\n")
    with pytest.raises(SamplesError, match=message):
        read_samples(path)


def test_not_a_samples_file(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"problem_id": "p1"}\n')  # no header, so a row: one without its fields
    with pytest.raises(SamplesError, match="line 1: field 'sample': expected int, got None"):
        read_samples(path)
    path.write_text('{"format": "other-tool/2"}\n')
    with pytest.raises(SamplesError, match="line 1: field 'format': expected 'dppo-bench-samples/1', got 'other"):
        read_samples(path)
    path.write_text("\n")
    with pytest.raises(SamplesError, match="no samples"):
        read_samples(path)
    garbage = tmp_path / "g.jsonl.gz"
    garbage.write_bytes(b"\x1f\x8b this starts like gzip and is not")
    with pytest.raises(SamplesError, match="corrupt gzip data"):
        read_samples(garbage)


def test_a_name_that_says_gzip_or_not_is_checked_against_the_bytes(tmp_path):
    """Another tool's file, compressed and named .jsonl, or plain and named .jsonl.gz, is named for what it is."""
    row = json.dumps({"problem_id": "p1", "sample": 0, "completion": "a"}).encode() + b"\n"
    compressed = tmp_path / "other.jsonl"
    compressed.write_bytes(gzip.compress(row))
    with pytest.raises(
        SamplesError,
        match=r"other.jsonl: gzip-compressed \(it starts with gzip's magic bytes 1f 8b\), "
        r"but its name does not end in .gz: rename it to other.jsonl.gz",
    ):
        read_samples(compressed)
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(row)
    with pytest.raises(SamplesError, match=r"plain.jsonl.gz: not gzip data .* rename it to plain.jsonl$"):
        read_samples(plain)
