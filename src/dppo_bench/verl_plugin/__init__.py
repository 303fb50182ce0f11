"""dppo-bench as a verl 0.9.1 plugin: every mask rule becomes a verl policy-loss mode.

Loaded in every process that imports verl, through the ``verl.plugins`` entry point declared
in pyproject.toml (verl 0.9.1 loads that group in ``verl/__init__.py`` unless
``VERL_USE_EXTERNAL_PLUGINS=none``). verl logs a failed plugin load only at debug level, so
:func:`ensure_registered` checks the registry instead of trusting the import.

Fallback where entry points are disabled or the package is not installed in the workers'
environment: ``VERL_USE_EXTERNAL_MODULES=dppo_bench.verl_plugin`` (verl imports the listed
modules on ``import verl``), forwarded to Ray workers with
``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=dppo_bench.verl_plugin``.

Importing the plugin also installs the Top-K patches (:mod:`dppo_bench.verl_plugin.topk`) and the
bypass-mode mismatch measurement (:mod:`dppo_bench.verl_plugin.mismatch`), after checking that the
installed verl is the pinned one; on any other version the import fails.
"""

from __future__ import annotations

import logging

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from dppo_bench.methods import get_mask, mask_names
from dppo_bench.verl_plugin import masked_tokens, mismatch
from dppo_bench.verl_plugin.losses import make_verl_loss
from dppo_bench.verl_plugin.topk.install import VerlVersionError, install


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


register_all()
try:  # the Top-K plumbing and the mismatch pass: patches of verl 0.9.1 applied as their modules are imported
    install()
    mismatch.install()
    masked_tokens.install()  # App. D's counts of masked token ids, in runs that set their directory
except VerlVersionError as err:  # verl logs a failed plugin import at debug level only: say it louder
    logging.getLogger(__name__).error("%s", err)
    raise
