"""Filesystems a test mounts for itself: a small tmpfs to fill up, and read-only views of a directory.

Mounting needs root; without it (or where the kernel refuses) the test is skipped with the reason. Every mount is
undone when its ``with`` block ends, however the test ends.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a test filesystem needs root")
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"mount {' '.join(args)}: {proc.stderr.strip()}")


@contextmanager
def small_fs(where: Path, size: str = "32m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``where`` for the ``with`` block."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextmanager
def full_disk(mount: Path, leave: int, name: str = ".filler") -> Iterator[None]:
    """The filesystem at ``mount`` with only ``leave`` bytes free for the ``with`` block (the filler file ``name``
    takes the rest, and is removed after it)."""
    filler = mount / name
    size = free_bytes(mount) - leave
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if size > 0:
            os.posix_fallocate(fd, 0, size)
        yield
    finally:
        os.close(fd)
        filler.unlink()


@contextmanager
def read_only(directory: Path) -> Iterator[Path]:
    """``directory`` made read-only in place (a read-only bind mount of itself) for the ``with`` block: even root
    cannot write it, as on a read-only share."""
    _mount("--bind", str(directory), str(directory))
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True, capture_output=True)
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)
