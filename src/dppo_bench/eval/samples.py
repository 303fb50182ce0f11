"""``samples.jsonl.gz``: a header line, then one row ``{"problem_id", "sample", "completion"}`` per completion.

Files made by other tools (their own vLLM script, another harness) are read without a header: plain rows, as
``.jsonl`` or ``.jsonl.gz``. Their model, sampling and prompt are unknown, and the scorer says so.

Append-only and resumable. Every append (one problem's samples) is written as its own gzip member and fsynced,
so an interrupted write can only leave a truncated *last* member: the writer cuts it off when it reopens the file,
keeps every complete problem and the generator continues with what is missing. (Plain ``.jsonl`` is read, e.g.
from other tools, but never written: lines give no such all-or-nothing unit, so its last line may lack a newline.)
A line with bytes that are not UTF-8 is read with replacement characters and its sample is marked: the scorer
grades such a corrupt completion wrong instead of crashing the run or guessing what it said.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dppo_bench.errors import UserError
from dppo_bench.io import atomic_write_bytes, naming

FORMAT = "dppo-bench-samples/1"
_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip file
VOLATILE_HEADER_KEYS = ("created",)  # differ between the runs of one resumed generation


class SamplesError(UserError):
    """A samples file that cannot be read or extended: the message names the file (and line and field)."""


@dataclass
class SamplesFile:
    path: Path
    header: dict  # empty for a file without a header (made by another tool)
    rows: list[dict]
    invalid_utf8_lines: int = 0  # lines with bytes that were not UTF-8 (replaced by U+FFFD)
    invalid_utf8: set[tuple[str, int]] = field(default_factory=set)  # (problem_id, sample) of those rows
    truncated_bytes: int = 0  # bytes of an interrupted last write (not read)
    valid_bytes: int = 0  # where the last complete write ends
    keys: set[tuple[str, int]] = field(default_factory=set)

    @property
    def has_header(self) -> bool:
        return bool(self.header)


def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def _gzip_members(f) -> Iterator[tuple[bytes, int]]:
    """(content, end offset) of each complete gzip member; stops before a truncated last one."""
    d = zlib.decompressobj(wbits=31)
    parts: list[bytes] = []
    consumed = member_in = 0
    pending = b""
    while True:
        chunk = pending or f.read(_CHUNK)
        pending = b""
        if not chunk:
            return
        parts.append(d.decompress(chunk))
        if d.eof:
            used = len(chunk) - len(d.unused_data)
            consumed += member_in + used
            yield b"".join(parts), consumed
            parts, member_in, pending = [], 0, d.unused_data
            d = zlib.decompressobj(wbits=31)
        else:
            member_in += len(chunk)


def _text_blocks(f) -> Iterator[tuple[bytes, int]]:
    """The whole of a plain jsonl file (other tools often end it without a newline; a cut line is invalid JSON)."""
    data = f.read()
    yield data, len(data)


def read_samples(path: Path, *, rows_required: bool = True) -> SamplesFile:
    """Header, rows and integrity counts of a samples file (.jsonl.gz or .jsonl); ``rows_required=False`` accepts
    a file with its header only (a generation to resume that wrote no problem yet)."""
    path = Path(path)
    if not path.is_file():
        raise SamplesError(f"{path}: file not found")
    out = SamplesFile(path, {}, [])
    size = path.stat().st_size
    line_no = 0
    with open(path, "rb") as f:
        _check_compression(path, f.read(len(GZIP_MAGIC)), size)
        f.seek(0)
        try:
            for content, end in _gzip_members(f) if _is_gzip(path) else _text_blocks(f):
                lines = content.split(b"\n")
                for i, raw in enumerate(lines):
                    if not raw.strip():
                        continue
                    line_no += 1
                    _add_line(out, raw, line_no, unterminated=i == len(lines) - 1)
                out.valid_bytes = end
        except zlib.error as e:
            raise SamplesError(f"{path}: corrupt gzip data after line {line_no}: {e}") from None
    out.truncated_bytes = size - out.valid_bytes
    if rows_required and not out.rows and not out.truncated_bytes:
        raise SamplesError(f"{path}: no samples (expected rows of {{problem_id, sample, completion}})")
    return out


def _check_compression(path: Path, start: bytes, size: int) -> None:
    """A file whose name says gzip and whose bytes do not, or the other way round, is named for what it is."""
    if _is_gzip(path) and size and start != GZIP_MAGIC[: len(start)]:
        raise SamplesError(
            f"{path}: not gzip data (it does not start with gzip's magic bytes 1f 8b), but its name ends in .gz: "
            f"if it is plain JSON lines, rename it to {path.with_suffix('').name}"
        )
    if not _is_gzip(path) and start == GZIP_MAGIC:
        raise SamplesError(
            f"{path}: gzip-compressed (it starts with gzip's magic bytes 1f 8b), but its name does not end in .gz: "
            f"rename it to {path.name}.gz"
        )


def truncation_message(samples: SamplesFile) -> str:
    """What a samples file that ends in an incomplete gzip member is, and what to do about it."""
    if samples.has_header:  # ours: every append is one member, and the generator cuts off an interrupted one
        return (
            f"{samples.path}: ends in {samples.truncated_bytes} bytes of an interrupted write (the last problem's "
            "samples); rerun the generation that wrote it: it resumes from the last complete problem"
        )
    return (
        f"{samples.path}: truncated: its last {samples.truncated_bytes} bytes begin a gzip stream that stops "
        f"before its end ({len(samples.rows)} complete rows before them), as when a write or copy stops early "
        "(`gzip -t` says 'unexpected end of file'); copy the file again from where it was made, or make it again"
    )


def _add_line(out: SamplesFile, raw: bytes, line_no: int, unterminated: bool = False) -> None:
    invalid = False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        out.invalid_utf8_lines += 1
        invalid = True
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if unterminated:  # the last line, with no newline after it
            raise SamplesError(
                f"{out.path}: line {line_no}, the last, is not valid JSON and has no newline at its end: the file "
                "looks cut off, as when a write or copy stops early; write or copy it again"
            ) from None
        raise SamplesError(f"{out.path}: line {line_no}: not valid JSON: {e}") from None
    if line_no == 1 and isinstance(obj, dict) and "format" in obj:
        if obj["format"] != FORMAT:
            raise SamplesError(f"{out.path}: line 1: field 'format': expected {FORMAT!r}, got {obj['format']!r}")
        out.header = obj
        return
    out.rows.append(_check_row(obj, out.path, line_no))
    out.keys.add((obj["problem_id"], obj["sample"]))
    if invalid:
        out.invalid_utf8.add((obj["problem_id"], obj["sample"]))


def _check_row(obj: object, path: Path, line_no: int) -> dict:
    if not isinstance(obj, dict):
        raise SamplesError(f"{path}: line {line_no}: expected an object")
    for name, kind in (("problem_id", str), ("sample", int), ("completion", str)):
        value = obj.get(name)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            raise SamplesError(f"{path}: line {line_no}: field '{name}': expected {kind.__name__}, got {value!r}")
    return obj


def comparable(header: dict) -> dict:
    return {k: v for k, v in header.items() if k not in VOLATILE_HEADER_KEYS}


class SamplesWriter:
    """Append problems' samples to a new or existing file with the same header (anything else is refused)."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.header = {"format": FORMAT, **header}
        self.keys: set[tuple[str, int]] = set()
        self.dropped_bytes = 0
        if not _is_gzip(self.path):
            raise SamplesError(f"{self.path}: samples are written as .jsonl.gz (one gzip member per problem)")
        if self.path.exists():
            self._resume()
        else:  # created whole with its header, or not at all: a full disk leaves no empty file to resume from
            atomic_write_bytes(self.path, self._member([self.header]))

    def _resume(self) -> None:
        existing = read_samples(self.path, rows_required=False)
        old, new = comparable(existing.header), comparable(self.header)
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                raise SamplesError(
                    f"{self.path}: header field '{key}' is {old.get(key)!r} in the file but {new.get(key)!r} for this "
                    "generation: refusing to mix samples (use another output path)"
                )
        if existing.truncated_bytes:
            os.truncate(self.path, existing.valid_bytes)  # an interrupted last write: drop it, keep the rest
            self.dropped_bytes = existing.truncated_bytes
        self.keys = existing.keys

    def complete(self, problem_id: str, n: int) -> bool:
        return all((problem_id, s) in self.keys for s in range(n))

    def append(self, problem_id: str, completions: list[str], first_sample: int = 0) -> None:
        rows = [
            {"problem_id": problem_id, "sample": first_sample + i, "completion": c} for i, c in enumerate(completions)
        ]
        for row in rows:
            key = (problem_id, row["sample"])
            if key in self.keys:
                raise SamplesError(f"{self.path}: sample {row['sample']} of problem {problem_id!r} is already written")
        self._write(rows)
        self.keys.update((problem_id, r["sample"]) for r in rows)

    @staticmethod
    def _member(objs: list[dict]) -> bytes:
        return gzip.compress("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs).encode(), mtime=0)

    def _write(self, objs: list[dict]) -> None:
        with naming(self.path), open(self.path, "ab") as f:
            f.write(self._member(objs))
            f.flush()
            os.fsync(f.fileno())


def write_samples(path: Path, header: dict, rows_by_problem: dict[str, list[str]]) -> None:
    """A complete samples file in one go (converters); refuses to overwrite an existing file."""
    if Path(path).exists():
        raise SamplesError(f"{path}: already exists (nothing was overwritten)")
    writer = SamplesWriter(path, header)
    for problem_id, completions in rows_by_problem.items():
        writer.append(problem_id, completions)
