"""``dppo-bench model``: a model shipped inside a Python package, as the checkpoint directory engines read."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config.models import load_packaged_model


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("model", help="packaged models (recipes/models/): build their checkpoint directory")
    sub = p.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="verify the packaged GGUF and write it as an fp32 HF checkpoint directory")
    build.add_argument("model", help="an id of recipes/models/")
    build.add_argument("--out", required=True, type=Path)
    build.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from dppo_bench.packaged_model import build  # heavy: torch and transformers, which --help skips

    spec = load_packaged_model(args.model)
    source = build(spec, args.out)
    print(f"{args.out}: {spec.title} from {source['file']} (sha256 {source['sha256']})")
    return 0
