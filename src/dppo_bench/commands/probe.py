"""``dppo-bench probe mismatch``: Fig. 2's probe of one rollout batch at identical parameters (no update)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dppo_bench.config import find_setting
from dppo_bench.errors import UserError
from dppo_bench.probe.tokens import write_tokens


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("probe", help="measurements of one rollout batch, without training")
    sub = p.add_subparsers(dest="action", required=True)
    m = sub.add_parser("mismatch", help="mu, pi and TV of every generated token of one batch at equal parameters")
    m.add_argument("--setting", required=True)
    m.add_argument("--out", required=True, type=Path, help="the record to write (mismatch.npz)")
    m.add_argument("--seed", type=int, default=0, help="which batch: the seed of the prompts and the sampling")
    m.add_argument("--base-model", type=Path, help="local backend: the pretrained base model dir")
    m.add_argument(
        "--train-data", type=Path, help="local: the normalized jsonl split of training problems; verl: the parquet"
    )
    m.add_argument("--val-data", nargs="+", default=[], help="verl: the prepared parquet files verl loads (unused)")
    m.add_argument(
        "--verl-command",
        default=os.environ.get("DPPO_BENCH_VERL_COMMAND"),
        help="the command that starts verl's trainer (default: $DPPO_BENCH_VERL_COMMAND, else verl's main_ppo)",
    )
    m.set_defaults(func=probe_mismatch)


def probe_mismatch(args: argparse.Namespace) -> int:
    setting = find_setting(args.setting)
    if setting.probe is not None:
        return probe_engine(args, setting)
    if setting.backend == "verl":
        return probe_verl(args, setting)
    if args.base_model is None or args.train_data is None:
        raise UserError("a local-backend probe needs --base-model and --train-data")
    from dppo_bench.probe.local import probe_mismatch as probe  # heavy: torch and verl, for this command only

    record = probe(setting, args.base_model, args.train_data, args.seed)
    write_tokens(args.out, record["mu"], record["pi"], record["tv"], record["meta"])
    print(f"{args.out}: {len(record['mu'])} tokens of {record['meta']['sequences']} sequences")
    return 0


def probe_engine(args: argparse.Namespace, setting) -> int:
    """The setting's model through its probe's engine (dppo_bench.probe.engines), on its training parquet."""
    if args.train_data is None:
        raise UserError("an engine probe needs --train-data (the setting's training parquet)")
    from dppo_bench.probe.engines import probe_engine as probe  # heavy: torch, transformers and the engine

    record = probe(setting, Path(setting.verl.model.path), args.train_data, args.seed)
    write_tokens(args.out, record["mu"], record["pi"], record["tv"], record["meta"])
    meta = record["meta"]
    print(f"{args.out}: {len(record['mu'])} tokens of {meta['sequences']} sequences from {meta['rollout']}")
    return 0


def probe_verl(args: argparse.Namespace, setting, *, trainer=None) -> int:
    """One-step probe run of verl's trainer (dppo_bench.verl_launch.probe) in ``<out>.work/``, then the record."""
    import shutil

    # heavy: the verl launcher and its run config import torch, which the CLI's other commands skip
    from dppo_bench.verl_launch.launch import parse_command, run_trainer
    from dppo_bench.verl_launch.probe import PROBE_METHOD, collect, probe_overrides, probe_setting
    from dppo_bench.verl_launch.run_config import RunPaths

    if args.train_data is None or not args.val_data:
        raise UserError("a verl-backend probe needs --train-data (parquet) and --val-data (the setting's parquets)")
    work = args.out.with_name(args.out.name + ".work").resolve()
    if work.exists():  # a killed probe's dumps: the batch is drawn again from the start
        shutil.rmtree(work)
    dumps = work / "tokens"
    paths = RunPaths(
        run_dir=work,
        train_file=args.train_data.resolve(),
        val_files=tuple(Path(p).resolve() for arg in args.val_data for p in arg.split(",") if p),
        metrics_log=work / "verl_log.jsonl",
    )
    argv = [*parse_command(args.verl_command), *probe_overrides(setting, paths, dumps, args.seed)]
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(paths.metrics_log), "PYTHONUNBUFFERED": "1"}
    v = setting.verl
    returncode, _ = (trainer or run_trainer)(argv, env, v.nodes, v.gpus_per_node)
    if returncode != 0:
        raise RuntimeError(f"verl's trainer exited with {returncode} in the probe run; its files are in {work}")
    tokens = collect(dumps)
    meta = {
        "setting": setting.id,
        "setting_sha256": setting.sha256(),
        "setting_config": setting.model_dump(mode="json"),  # judged by today's identity rule
        "backend": "verl",
        "seed": args.seed,
        "sequences": probe_setting(setting).train.prompts_per_step * setting.train.responses_per_prompt,
        "tv_over": f"mu's top-{v.topk} plus the rest (the Top-K reduction; a lower bound of the full TV)",
        "rollout": f"vLLM, {v.precision}; loss mode {PROBE_METHOD} in bypass mode, one mini-batch",
        "model": v.model.path,
    }
    write_tokens(args.out, tokens["mu"], tokens["pi"], tokens["tv"], meta)
    shutil.rmtree(work)
    print(f"{args.out}: {len(tokens['mu'])} tokens")
    return 0
