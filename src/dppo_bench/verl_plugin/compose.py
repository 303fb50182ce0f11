"""Compose verl 0.9.1's own Hydra config with our overrides, on any machine.

This is what ``python -m verl.trainer.main_ppo`` does before it starts Ray: composing the
``ppo_trainer`` config rejects unknown keys and bad override syntax, and converting the
sections to verl's dataclasses runs their type and consistency checks. Doing it here catches
a broken recipe on a laptop instead of on a cluster after a queue wait.
"""

from __future__ import annotations

from pathlib import Path

import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.utils.config import omega_conf_to_dataclass

VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


def compose_ppo_config(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def to_dataclasses(cfg: DictConfig) -> dict[str, object]:
    """The typed sections verl builds in its workers and driver (raises on invalid values)."""
    return {
        "actor": omega_conf_to_dataclass(cfg.actor_rollout_ref.actor),
        "rollout": omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout),
        "algorithm": omega_conf_to_dataclass(cfg.algorithm),
        # its yaml has no _target_, so verl keeps it a dict inside AlgoConfig; type it here
        "rollout_correction": omega_conf_to_dataclass(cfg.algorithm.rollout_correction, RolloutCorrectionConfig),
    }
