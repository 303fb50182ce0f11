"""``dppo-bench methods``: list the method recipes, show one's verl overrides, check the plugin."""

from __future__ import annotations

import argparse

from dppo_bench.config import find_method, load_methods
from dppo_bench.methods import mask_names
from dppo_bench.verl_plugin.overrides import method_overrides


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
