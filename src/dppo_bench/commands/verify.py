"""``dppo-bench verify <run directory or experiment>``: check every record the runs hold and name what is damaged
(:mod:`dppo_bench.verify`); exit 1 if anything is. ``--redo`` removes the markers of what the pipeline can make
again, as aggregation does when it meets damage."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config import find_experiment, find_setting
from dppo_bench.rundir import RunDir
from dppo_bench.verify import redo, report, verify_run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("verify", help="check a run's (or an experiment's runs') records; name what is damaged")
    p.add_argument("targets", nargs="+", help="run directories, or experiment ids")
    p.add_argument("--runs", type=Path, default=Path("results/runs"), help="root of an experiment's run directories")
    p.add_argument("--shallow", action="store_true", help="only what aggregation reads (no checkpoints, no samples)")
    p.add_argument("--redo", action="store_true", help="remove the markers of damaged records the pipeline remakes")
    p.set_defaults(func=verify)


def run_dirs(target: str, root: Path) -> list[Path]:
    """A directory is one run; anything else names an experiment, whose runs are under ``root``."""
    if Path(target).is_dir():
        return [Path(target)]

    experiment = find_experiment(target)
    keys = experiment.run_keys(lambda s: find_setting(s).seeds)
    return [RunDir.of(*key, root).path for key in keys]


def verify(args: argparse.Namespace) -> int:
    found = []
    for target in args.targets:
        for path in run_dirs(target, args.runs):
            if not path.exists() and not Path(target).is_dir():
                print(f"{path}: not run yet")
                continue
            damage = verify_run(RunDir(path), deep=not args.shallow)
            print(f"{path}: {'DAMAGED' if damage else 'ok'}")
            found += damage
    if found:
        print(f"{len(found)} damaged record(s):\n{report(found, redo(found) if args.redo else None)}")
    return 1 if found else 0
