"""``dppo-bench train``: one training run (setting x method x seed) into its run directory.

The setting's backend decides how: ``local`` trains in this process (dppo_bench.local), ``verl`` runs verl's
trainer with the run's overrides (dppo_bench.verl_launch.launch). Either resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from dppo_bench.config.runs import resolve_run
from dppo_bench.errors import UserError
from dppo_bench.io import file_sha256
from dppo_bench.problem_sets.pins import check_file
from dppo_bench.provenance import now
from dppo_bench.rundir import WANDB_PROJECT, RunDir, experiment_name
from dppo_bench.runlock import run_lock


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="train one run; resumes from its last checkpoint when rerun")
    p.add_argument("--setting", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", required=True, type=int)
    p.add_argument("--out", required=True, type=Path, help="the run directory")
    p.add_argument("--base-model", type=Path, help="local backend: the pretrained base model dir")
    p.add_argument(
        "--train-data",
        type=Path,
        help="the training set: local backend, the normalized jsonl split; verl, the prepared parquet",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--wandb",
        action="store_true",
        default=os.environ.get("DPPO_BENCH_WANDB", "").lower() in ("1", "true", "yes"),
        help="also log every metrics row to wandb, offline unless WANDB_MODE says otherwise; metrics.jsonl stays "
        "the record (default: $DPPO_BENCH_WANDB; snakemake: --config wandb=true)",
    )
    verl = p.add_argument_group("verl backend")
    verl.add_argument(
        "--val-data",
        nargs="+",
        default=[],
        help="prepared parquet files of the online benchmarks (space- or comma-separated), in the order of the "
        "setting's eval.online",
    )
    verl.add_argument(
        "--verl-command",
        default=os.environ.get("DPPO_BENCH_VERL_COMMAND"),
        help="the command that starts verl's trainer, e.g. inside a container (default: $DPPO_BENCH_VERL_COMMAND, "
        "else this Python's -m verl.trainer.main_ppo)",
    )
    p.set_defaults(func=train)


def wandb_run(run_dir, setting, recipe, seed: int):
    """A wandb run inside the run directory, named as the verl backend names its runs; offline unless WANDB_MODE
    says otherwise (the verl launcher does the same)."""
    import wandb

    return wandb.init(
        project=WANDB_PROJECT,
        group=setting.id,
        name=experiment_name(setting.id, recipe.id, seed),
        dir=run_dir.path,
        mode=os.environ.get("WANDB_MODE", "offline"),
        config={"setting": setting.id, "method": recipe.id, "seed": seed, **run_dir.read_run()["hyperparameters"]},
    )


def log_rows_to(run):
    """The trainer's sink for committed metrics rows: each row at its step."""

    def log(rows: list[dict]) -> None:
        for row in rows:
            run.log({k: v for k, v in row.items() if k != "step"}, step=row["step"])

    return log


def train(args: argparse.Namespace) -> int:
    # fails now, not mid-run or after training, on a missing profile or a bad (or unevaluable) eval spec
    run = resolve_run(args.setting, args.method, args.seed)
    val_data = [p for arg in args.val_data for p in arg.split(",") if p]
    for data in [args.train_data, *val_data] if args.train_data else val_data:  # against what a spec pins for it
        check_file(Path(data))
    if run.setting.backend == "verl":
        return train_verl(args, run)
    if args.base_model is None or args.train_data is None:
        raise UserError("a local-backend run needs --base-model and --train-data")
    with run_lock(args.out), terminate_as_exit():
        return train_local(args, run)


@contextmanager
def terminate_as_exit():
    """SIGTERM (a scheduler's time limit, ``kill``) ends the process as Ctrl-C would: through the handlers that
    record the run as interrupted, instead of leaving run.json at "running"."""

    def exit_(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_local(args: argparse.Namespace, resolved) -> int:
    from dppo_bench.local.trainer import LocalRun, LocalTrainer  # heavy: torch and verl, for this backend only

    setting, recipe = resolved.setting, resolved.recipe
    run_dir = RunDir(args.out).create()
    inputs = {
        "base_model": str(args.base_model),
        "base_model_sha256": file_sha256(args.base_model / "model.safetensors"),
        "train_data": str(args.train_data),
        "train_data_sha256": file_sha256(args.train_data),
    }
    run_dir.start(setting, recipe, args.seed, inputs)
    run = LocalRun(resolved, args.base_model, args.train_data)
    wb = wandb_run(run_dir, setting, recipe, args.seed) if args.wandb else None
    try:
        log_rows = log_rows_to(wb) if wb is not None else None
        outcome = LocalTrainer(run, run_dir, progress=not args.no_progress, log_rows=log_rows).fit()
    except BaseException as e:
        with suppress(OSError):  # a full disk may refuse this record too: the error to report is the first one
            run_dir.update_run(
                status="failed" if isinstance(e, Exception) else "interrupted", error=repr(e), finished_at=now()
            )
        raise
    finally:
        if wb is not None:
            wb.finish()
    run_dir.update_run(**outcome, finished_at=now())
    run_dir.mark_done(outcome)
    return 0


def train_verl(args: argparse.Namespace, resolved) -> int:
    from dppo_bench.verl_launch.launch import VerlRun, launch, parse_command  # heavy: torch, for this backend only

    if args.train_data is None or not args.val_data:
        raise UserError(
            "a verl-backend run needs --train-data (parquet) and --val-data (one parquet per online benchmark)"
        )
    run = VerlRun(
        resolved=resolved,
        run_dir=RunDir(args.out),
        train_data=args.train_data,
        val_data=tuple(Path(p) for arg in args.val_data for p in arg.split(",") if p),
        wandb=args.wandb,
        command=parse_command(args.verl_command),
    )
    outcome = launch(run)
    if outcome["status"] != "completed":
        print(f"dppo-bench train: {args.out}: {outcome['error']}", file=sys.stderr)
        return 1
    return 0
