"""The hyperparameter channel read inside verl's processes (its format: :mod:`dppo_bench.verl_plugin.contract`).

A loss of ours reads its rule's values from this process's environment, where Ray put the launcher's channel; the
plugin's entry point first imports the user's rule module the channel names, if any
(:mod:`dppo_bench.verl_plugin.entry`), so the rule is registered wherever verl looks its loss mode up.
"""

from __future__ import annotations

import os

from dppo_bench.methods import MaskRule, Values, load_rule_file
from dppo_bench.verl_plugin.contract import LOSS_ENV, decode, rule_module


def current_values(rule: MaskRule) -> Values:
    """The values of this process's channel for ``rule`` (what a loss reads in verl's workers)."""
    return decode(rule, os.environ.get(LOSS_ENV))


def load_channel_module() -> None:
    """Import the rule module the channel names, if any (a user's rule, registered before verl needs it)."""
    text = os.environ.get(LOSS_ENV)
    module = rule_module(text) if text else None
    if module:
        load_rule_file(module)
