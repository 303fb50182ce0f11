"""``dppo-bench probe mismatch``: Fig. 2's probe of one rollout batch at identical parameters (no update)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("probe", help="measurements of one rollout batch, without training")
    sub = p.add_subparsers(dest="action", required=True)
    m = sub.add_parser("mismatch", help="mu, pi and TV of every generated token of one batch at equal parameters")
    m.add_argument("--setting", required=True)
    m.add_argument("--out", required=True, type=Path, help="the record to write (mismatch.npz)")
    m.add_argument("--seed", type=int, default=0, help="which batch: the seed of the prompts and the sampling")
    m.add_argument("--base-model", type=Path, help="local backend: the pretrained base model dir")
    m.add_argument("--train-data", type=Path, help="local backend: the normalized jsonl split of training problems")
    m.set_defaults(func=probe_mismatch)


def probe_mismatch(args: argparse.Namespace) -> int:
    from dppo_bench.config import SETTINGS_DIR, ConfigError, find_setting
    from dppo_bench.probe.tokens import write_tokens

    setting = find_setting(args.setting)
    if setting.backend != "local":
        raise ConfigError(
            SETTINGS_DIR / f"{setting.id}.yaml",
            "backend",
            "the mismatch probe of a verl setting runs inside verl's trainer (see README, Fig. 2); this command "
            "probes local settings",
        )
    if args.base_model is None or args.train_data is None:
        raise ValueError("a local-backend probe needs --base-model and --train-data")
    from dppo_bench.probe.local import probe_mismatch as probe

    record = probe(setting, args.base_model, args.train_data, args.seed)
    write_tokens(args.out, record["mu"], record["pi"], record["tv"], record["meta"])
    print(f"{args.out}: {len(record['mu'])} tokens of {record['meta']['sequences']} sequences")
    return 0
