"""``dppo-bench``: the suite's command line. One module per command in dppo_bench.commands.

Each command module defines ``register(subparsers)``, which adds its parser and sets
``func`` (called with the parsed args). Heavy imports (torch, verl) stay inside the handlers,
so ``dppo-bench --help`` and the pipeline's dry runs stay fast.

A user's mistake (:class:`dppo_bench.errors.UserError`, a missing file, a write the disk refused, a run another
process holds) is one line on stderr and exit status 2; anything else is a bug of ours and keeps its traceback.
``--debug`` shows the traceback of a user's mistake too.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
import traceback
from pathlib import Path

from dppo_bench.errors import UserError
from dppo_bench.runlock import RunLockedError

COMMAND_MODULES = [
    "methods",
    "data",
    "eval",
    "score",
    "tiny",
    "model",
    "train",
    "evaluate",
    "aggregate",
    "experiments",
    "plan",
    "probe",
    "verify",
    "publish",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dppo-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show the traceback of an input error too")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"dppo_bench.commands.{name}").register(subparsers)
    return parser


def unwritable(path: Path) -> Path:
    """The directory that refused a write to ``path``: its nearest existing ancestor."""
    path = path.absolute().parent
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def write_error(e: OSError) -> str | None:
    """What a failed write means and what the user can do, naming the place; None for other OS errors."""
    if e.filename is None:
        return None
    target = Path(e.filename)
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        where = unwritable(target)
        return (
            f"{target}: cannot be written ({e.strerror}): {where} is read-only for this process. Make it writable "
            f"(chmod -R u+w {where}, or remount it read-write), or run in a writable copy (snakemake --directory DIR "
            "with the results there, or this command's --out elsewhere); no file was left half-written"
        )
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"{target}: cannot be written ({e.strerror}). No file was left half-written: free space on "
            f"{unwritable(target)} and rerun the same command, which resumes where this one stopped"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (UserError, RunLockedError, OSError) as e:
        message = write_error(e) if isinstance(e, OSError) and not isinstance(e, FileNotFoundError) else e
        if message is None:
            raise  # an OSError that is not about what the user gave or where the output goes
        if args.debug:
            traceback.print_exc()
        print(f"dppo-bench {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
