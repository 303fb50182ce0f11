"""``dppo-bench methods``: list the method recipes, show one's verl overrides, check the plugin."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config import find_method, find_setting, load_methods
from dppo_bench.config.runs import resolve_run
from dppo_bench.errors import UserError
from dppo_bench.methods import mask_names
from dppo_bench.verl_launch.overrides import method_overrides


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("methods", help="list method recipes; show verl overrides; check the verl plugin")
    sub = p.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="every recipe with its rule or verl loss, anchor and profiles")
    listing.set_defaults(func=list_methods)
    ov = sub.add_parser("overrides", help="the verl overrides of one method and profile")
    ov.add_argument("method")
    ov.add_argument("--profile", default="sanity")
    ov.set_defaults(func=show_overrides)
    sub.add_parser("check-verl", help="import verl and check every loss mode is registered").set_defaults(
        func=check_verl
    )
    config = sub.add_parser(
        "check-config",
        help="compose and validate verl's config of a setting's runs, as verl's trainer does before it starts Ray: "
        "a broken recipe or setting fails here, on a laptop, not on a cluster after a queue wait",
    )
    config.add_argument("--setting", required=True, help="a verl-backend setting")
    config.add_argument("methods", nargs="*", help="method recipes (default: every recipe)")
    config.set_defaults(func=check_config)


def list_methods(args: argparse.Namespace) -> int:
    for rid, recipe in load_methods().items():
        profiles = ", ".join(f"{name} {recipe.profile(name).values()}" for name in recipe.hyperparameters)
        kind = f"mask={recipe.mask}" if recipe.rule is not None else f"verl_loss={recipe.verl_loss}"
        print(f"{rid:28s} {recipe.display_name:26s} {kind} anchor={recipe.anchor}  {profiles}")
    return 0


def show_overrides(args: argparse.Namespace) -> int:
    print("\n".join(method_overrides(find_method(args.method), args.profile)))
    return 0


def check_verl(args: argparse.Namespace) -> int:
    import verl  # noqa: F401  (loads the verl.plugins entry point)

    from dppo_bench.verl_plugin.entry import ensure_registered  # heavy: verl and torch, for this command only

    ensure_registered()
    print(f"verl {verl.__version__}: {len(mask_names())} dppo-bench loss modes registered: {', '.join(mask_names())}")
    return 0


def check_config(args: argparse.Namespace) -> int:
    # heavy: verl's Hydra config and the run config (torch), for this command only
    from dppo_bench.verl_launch.compose import compose_ppo_config, validate
    from dppo_bench.verl_launch.run_config import RunPaths, run_overrides

    setting = find_setting(args.setting)
    if setting.backend != "verl":
        raise UserError(f"setting {setting.id!r} trains with the local backend: it has no verl config to check")
    recipes = load_methods()
    unknown = sorted(set(args.methods) - set(recipes))
    if unknown:
        raise UserError(f"no method recipe {', '.join(unknown)} (known: {', '.join(recipes)})")
    # placeholder paths: what is checked is the config, not the files (the launcher checks those when it starts)
    paths = RunPaths(
        run_dir=Path("/run"),
        train_file=Path("/data/train.parquet"),
        val_files=tuple(Path(f"/data/{b}.parquet") for b in setting.eval.online),
        metrics_log=Path("/run/verl_logs/attempt-001.jsonl"),
    )
    failed = 0
    for method in args.methods or list(recipes):
        recipe = recipes[method]
        if setting.hyperparameter_profile not in recipe.hyperparameters:
            print(f"{setting.id} x {method}: skipped (no {setting.hyperparameter_profile!r} profile)")
            continue
        try:
            validate(compose_ppo_config(run_overrides(resolve_run(setting, recipe, 0), paths)))
        except Exception as e:  # every verl check raises its own type: report each, check the rest
            failed += 1
            print(f"{setting.id} x {method}: FAILED: {type(e).__name__}: {e}")
        else:
            print(f"{setting.id} x {method}: verl config OK")
    return 1 if failed else 0
