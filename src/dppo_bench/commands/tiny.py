"""``dppo-bench tiny``: the tiny task's data splits and the pretrained base model (local settings)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config import SETTINGS_DIR, ConfigError, find_setting
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.problem_sets.load import problems_sha256
from dppo_bench.problem_sets.pins import all_specs, check_digest


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tiny", help="tiny arithmetic task: data splits and base-model pretraining")
    sub = p.add_subparsers(dest="action", required=True)
    data = sub.add_parser("data", help="write the train and held-out splits (normalized jsonl)")
    data.add_argument("--setting", required=True)
    data.add_argument("--out", required=True, type=Path, help="directory for train.jsonl and heldout.jsonl")
    data.set_defaults(func=write_data)
    pre = sub.add_parser("pretrain", help="pretrain the base model (an HF checkpoint dir)")
    pre.add_argument("--setting", required=True)
    pre.add_argument("--out", required=True, type=Path)
    pre.add_argument("--threads", type=int, help="torch threads (default: the setting's local.threads)")
    pre.add_argument("--no-progress", action="store_true")
    pre.set_defaults(func=run_pretrain)


def _local_setting(setting_id: str):
    setting = find_setting(setting_id)
    if setting.local is None:
        raise ConfigError(SETTINGS_DIR / f"{setting_id}.yaml", "local", "not a local-backend setting")
    return setting


def write_data(args: argparse.Namespace) -> int:
    from dppo_bench.local.pretrain import task_config  # heavy: torch and transformers, which --help skips

    local = _local_setting(args.setting).local
    train, heldout = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
    splits = {args.out / "train.jsonl": train, args.out / "heldout.jsonl": heldout}
    specs = all_specs()
    for path, split in splits.items():  # a split a spec pins (tiny_sanity's) is checked before anything is written
        digest = problems_sha256([e.problem() for e in split])
        for spec in specs:
            check_digest(spec, path, digest)
    for path, split in splits.items():
        write_jsonl(split, path)
    print(f"{args.out}: {len(train)} train, {len(heldout)} held-out problems")
    return 0


def run_pretrain(args: argparse.Namespace) -> int:
    from dppo_bench.local.pretrain import pretrain  # heavy: torch and transformers, which --help skips

    local = _local_setting(args.setting).local
    report = pretrain(local, args.out, threads=args.threads or local.threads, progress=not args.no_progress)
    print(f"{args.out}: {report}")
    return 0
