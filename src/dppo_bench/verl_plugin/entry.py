"""What ``import verl`` runs in every process: our mask rules as verl loss modes, and our patches of verl.

Loaded through the ``verl.plugins`` entry point declared in pyproject.toml (verl 0.9.1 loads that group in
``verl/__init__.py`` unless ``VERL_USE_EXTERNAL_PLUGINS=none``), so it runs in the driver, the TaskRunner and every
Ray worker. verl logs a failed plugin load only at debug level, so :func:`ensure_registered` checks the registry
instead of trusting the import, and a refused verl version is logged at error level here.

A user's rules (modules of a config root's ``recipes/rules/``) are imported first: those of this process's config
root, and the one whose file our hyperparameter channel names
(:func:`dppo_bench.verl_plugin.hyperparameters.load_channel_module`), which Ray gives to every worker of a run, on
every node: the rule is registered wherever verl looks its loss mode up.

Fallback where entry points are disabled or the package is not installed in the workers' environment:
``VERL_USE_EXTERNAL_MODULES=dppo_bench.verl_plugin.entry`` (verl imports the listed modules on ``import verl``),
which the launcher also forwards to Ray workers (:data:`dppo_bench.verl_plugin.contract.PLUGIN_MODULE`).
"""

from __future__ import annotations

import logging

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from dppo_bench.config.roots import RULES_DIR
from dppo_bench.methods import get_mask, load_rule_files, mask_names
from dppo_bench.verl_plugin import patches
from dppo_bench.verl_plugin.hyperparameters import load_channel_module
from dppo_bench.verl_plugin.losses import make_verl_loss


def register_all() -> list[str]:
    """Register every mask rule as a verl loss mode of the same name; returns the names."""
    names = mask_names()
    for name in names:
        register_policy_loss(name)(make_verl_loss(get_mask(name)))
    return names


def ensure_registered() -> None:
    """Raise if any of our loss modes is missing from verl's registry in this process."""
    missing = [n for n in mask_names() if n not in POLICY_LOSS_REGISTRY]
    if missing:
        raise RuntimeError(f"dppo-bench loss modes missing from verl's registry: {', '.join(missing)}")


load_rule_files(RULES_DIR)
load_channel_module()
register_all()
try:
    patches.install()
except patches.VerlVersionError as err:  # verl logs a failed plugin import at debug level only: say it louder
    logging.getLogger(__name__).error("%s", err)
    raise
