"""``dppo-bench``: the suite's command line. One module per command in dppo_bench.commands.

Each command module defines ``register(subparsers)``, which adds its parser and sets
``func`` (called with the parsed args). Heavy imports (torch, verl) stay inside the handlers,
so ``dppo-bench --help`` and the pipeline's dry runs stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from dppo_bench.config import ConfigError
from dppo_bench.runlock import RunLockedError

COMMAND_MODULES = [
    "methods",
    "data",
    "eval",
    "score",
    "tiny",
    "train",
    "evaluate",
    "aggregate",
    "experiments",
    "plan",
    "probe",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dppo-bench", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"dppo_bench.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (ConfigError, FileNotFoundError, KeyError, ValueError, RunLockedError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"dppo-bench {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
