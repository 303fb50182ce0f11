"""``dppo-bench train``: one training run (setting x method x seed) into its run directory."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="train one run; resumes from its last checkpoint when rerun")
    p.add_argument("--setting", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", required=True, type=int)
    p.add_argument("--out", required=True, type=Path, help="the run directory")
    p.add_argument("--base-model", type=Path, help="local backend: the pretrained base model dir")
    p.add_argument("--train-data", type=Path, help="local backend: the training split (normalized jsonl)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=train)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start_record(run_dir, setting, recipe, seed: int, inputs: dict) -> dict:
    """run.json at start; a rerun must be the same run (same recipe, setting and seed) to resume it."""
    from dppo_bench.provenance import now, provenance

    identity = {
        "setting": setting.id,
        "method": recipe.id,
        "seed": seed,
        "backend": setting.backend,
        "setting_sha256": setting.sha256(),
        "recipe_sha256": recipe.sha256(),
    }
    old = run_dir.read_run()
    if old:
        clash = {k: (old.get(k), v) for k, v in identity.items() if old.get(k) != v}
        if clash:
            raise ValueError(f"{run_dir.run_json}: holds a different run ({clash}); refusing to resume or overwrite it")
    return run_dir.update_run(
        **identity,
        hyperparameters=recipe.profile(setting.hyperparameter_profile).values(),
        hyperparameter_profile=setting.hyperparameter_profile,
        recipe=recipe.model_dump(mode="json"),
        setting_config=setting.model_dump(mode="json"),
        inputs=inputs,
        provenance=provenance(),
        status="running",
        started_at=old.get("started_at", now()),
        resumed_at=[*old.get("resumed_at", []), now()] if old else [],
        finished_at=None,
    )


def train(args: argparse.Namespace) -> int:
    from dppo_bench.config import find_method, find_setting
    from dppo_bench.provenance import now
    from dppo_bench.rundir import RunDir

    setting, recipe = find_setting(args.setting), find_method(args.method)
    recipe.profile(setting.hyperparameter_profile)  # fail now, not mid-run, on a missing profile
    if setting.backend != "local":
        raise ValueError(f"setting {setting.id!r} uses backend {setting.backend!r}, which this command does not run")
    if args.base_model is None or args.train_data is None:
        raise ValueError("a local-backend run needs --base-model and --train-data")
    from dppo_bench.local.trainer import LocalRun, LocalTrainer

    run_dir = RunDir(args.out).create()
    inputs = {
        "base_model": str(args.base_model),
        "base_model_sha256": file_sha256(args.base_model / "model.safetensors"),
        "train_data": str(args.train_data),
        "train_data_sha256": file_sha256(args.train_data),
    }
    start_record(run_dir, setting, recipe, args.seed, inputs)
    run = LocalRun(setting, recipe, args.seed, args.base_model, args.train_data)
    try:
        outcome = LocalTrainer(run, run_dir, progress=not args.no_progress).fit()
    except BaseException as e:
        run_dir.update_run(
            status="failed" if isinstance(e, Exception) else "interrupted", error=repr(e), finished_at=now()
        )
        raise
    run_dir.update_run(**outcome, finished_at=now())
    run_dir.mark_done(outcome)
    return 0
