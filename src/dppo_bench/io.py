"""Small file helpers with one rule each for the suite's records: atomic writes, JSON that names its file when it
cannot be read, JSON lines with a torn last line, and sha256 manifests of checkpoint directories."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHECKSUMS = "SHA256SUMS"  # `sha256sum -c SHA256SUMS` format: "<hex>  <name>" per file


class CorruptFileError(ValueError):
    """A file of a run that is damaged or not what it should be: the message names the file."""


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole or not at all (a kill leaves the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> object:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e}); the file is damaged") from None


def read_jsonl(path: Path) -> tuple[list[tuple[int, object]], bool]:
    """(line number, value) of every line of a JSON-lines file, and whether its last line was torn.

    A torn line is the last one, without its newline, that is not valid JSON: a write cut short by a kill. It is
    not a row. Any other line that is not valid JSON is damage, and an error naming the file and the line.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    rows, torn = [], False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if n == len(lines):  # the last line, not ended by a newline
                torn = True
                break
            raise CorruptFileError(f"{path}: line {n} is not valid JSON; the file is damaged") from None
    return rows, torn


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
