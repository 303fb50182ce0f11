"""``dppo-bench publish``: an experiment's results as a page of the documentation (docs/results/<id>.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.aggregate.publish import publish
from dppo_bench.config import find_experiment, find_setting
from dppo_bench.rundir import RUNS_ROOT


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "publish", help="write an experiment's aggregated table, figure and provenance as docs/results/<id>.md"
    )
    p.add_argument("experiment")
    p.add_argument("--results", type=Path, default=Path("results"), help="where aggregation wrote results/<id>/")
    p.add_argument("--runs", type=Path, default=RUNS_ROOT, help="root of the run directories")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    experiment = find_experiment(args.experiment)
    settings = {g.setting: find_setting(g.setting) for g in experiment.runs}
    print(publish(experiment, settings, args.results, args.runs, args.out))
    return 0
