"""``dppo-bench data prepare``: a benchmark's or training set's problems -> verl parquet, hash-verified."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_any
from dppo_bench.problem_sets.load import load_problem_set
from dppo_bench.problem_sets.prepare import prepare as write_prepared


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="prepare benchmark and training data (verl parquet)")
    sub = p.add_subparsers(dest="action", required=True)
    prep = sub.add_parser("prepare", help="load, normalize, verify the sha256, write <out>/<id>.parquet")
    prep.add_argument("id", help="a benchmark (eval/<id>.yaml) or a training set (recipes/datasets/<id>.yaml)")
    where = prep.add_mutually_exclusive_group()
    where.add_argument("--source", type=Path, help="a local file, or a directory holding it (e.g. ../shared/data)")
    where.add_argument(
        "--hub",
        nargs="?",
        const=True,
        default=False,
        metavar="REPO_OR_DIR",
        help="load from the Hugging Face hub (optionally another repo id or a local mirror directory)",
    )
    prep.add_argument("--out", type=Path, required=True, help="output directory")
    prep.set_defaults(func=prepare)


def prepare(args: argparse.Namespace) -> int:
    spec = load_any(args.id)
    problems = load_problem_set(spec, source=args.source, hub=args.hub)
    manifest = write_prepared(spec, problems, load_prompt(spec.prompt), args.out)
    print(f"{spec.id}: {manifest['rows']} problems from {problems.origin}")
    if problems.dropped_duplicates:
        print(f"  dropped {problems.dropped_duplicates} duplicate rows (dedupe)")
    if problems.filtered_out:
        print(f"  left out {problems.filtered_out} rows by the source's where filters")
    field = f"sources.{problems.source_kind}.sha256"
    if problems.pinned_sha256 is None:
        print(f"  sha256 {problems.sha256}  NOT PINNED: {spec.path} field '{field}' is null; pin this value")
    else:
        print(f"  sha256 {problems.sha256}  verified against {spec.path} field '{field}'")
    hub = spec.sources.hub
    if problems.source_kind == "hub" and hub is not None and hub.revision is None:
        print(f"  hub revision UNPINNED ({spec.path} field 'sources.hub.revision' is null)")
    print(f"  wrote {args.out / (spec.id + '.parquet')}, {spec.id}.problems.jsonl, {spec.id}.manifest.json")
    return 0
