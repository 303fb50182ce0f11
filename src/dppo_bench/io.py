"""Small file helpers with one rule each for the suite's records: atomic writes, JSON that names its file when it
cannot be read, JSON lines with a torn last line, and sha256 manifests of checkpoint directories."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from dppo_bench.errors import UserError

CHECKSUMS = "SHA256SUMS"  # `sha256sum -c SHA256SUMS` format: "<hex>  <name>" per file


class CorruptFileError(UserError):
    """A file of a run that is damaged or not what it should be: the message names the file."""


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError of writing ``path`` (a full disk, a read-only directory) names it, as a write() does not."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write`` writes to the binary file it is given, whole or not at all (a kill
    leaves the old file or the new one, never a part): a sibling temporary file, synced, then renamed. A write that
    fails (a full disk) removes its temporary file; one a kill cuts short leaves it, to be replaced by the next."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tmp.open("wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no part behind, and frees what it took
            raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, value: object) -> None:
    """``value`` as indented JSON with a final newline."""
    atomic_write_text(path, json.dumps(value, indent=2) + "\n")


def read_json(path: Path) -> object:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e}); the file is damaged") from None


def read_jsonl(path: Path, *, errors: str = "strict") -> tuple[list[tuple[int, object]], bool]:
    """(line number, value) of every line of a JSON-lines file we append to, and whether its last line was torn.

    A torn line is the last one, without its newline, that is not valid JSON: a write cut short by a kill. It is
    not a row. Any other line that is not valid JSON is damage, and an error naming the file and the line.
    ``errors="replace"`` reads text that is not valid UTF-8 (what a tokenizer decoded) instead of refusing it.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    rows, torn = [], False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line.decode("utf-8", errors=errors))))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if n == len(lines):  # the last line, not ended by a newline
                torn = True
                break
            raise CorruptFileError(f"{path}: line {n} is not valid JSON; the file is damaged") from None
    return rows, torn


def read_complete_jsonl(path: Path, *, errors: str = "strict") -> list:
    """Every value of a JSON-lines file that was written whole (an input: problems, a verl dump); a torn last line
    is damage here too."""
    rows, torn = read_jsonl(path, errors=errors)
    if torn:
        raise CorruptFileError(f"{path}: the last line is not valid JSON (cut short?); the file is damaged")
    return [value for _, value in rows]


def atomic_write_lines(path: Path, rows: Iterable[object]) -> None:
    """Replace ``path`` with one JSON value a line, whole or not at all."""
    atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(directory: Path) -> None:
    """Record the sha256 of every file of ``directory`` (written before the directory is renamed into place)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != CHECKSUMS)
    atomic_write_text(directory / CHECKSUMS, "".join(f"{file_sha256(p)}  {p.name}\n" for p in files))


def verify_checksums(directory: Path) -> None:
    """Every file ``directory/SHA256SUMS`` lists is there with the sha256 it had when it was written."""
    sums = directory / CHECKSUMS
    if not directory.is_dir():
        raise CorruptFileError(f"{directory}: no such checkpoint directory")
    if not sums.is_file():
        raise CorruptFileError(f"{sums}: missing; {directory} is not a complete checkpoint of this suite")
    for n, line in enumerate(sums.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or "/" in name:
            raise CorruptFileError(f"{sums}: line {n} is not '<sha256>  <file>'; the file is damaged")
        path = directory / name
        if not path.is_file():
            raise CorruptFileError(f"{path}: missing from the checkpoint ({sums} lists it)")
        if file_sha256(path) != digest:
            raise CorruptFileError(
                f"{path}: damaged (its sha256 differs from the one {sums} recorded when the checkpoint was written)"
            )
