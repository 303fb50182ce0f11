"""Typed, validated models of the suite's yaml files, and their loaders, one module per concept:

``roots`` (where the yaml is read from), ``yaml_io`` (strict reading, errors naming file and field),
``loader`` (id = file name; an unknown id lists the known ones), ``identity`` (content hashes), ``methods``,
``settings``, ``experiments``, ``specs`` (benchmarks and training datasets), ``prompts`` (prompt templates),
``runs`` (one run's facts, resolved once); ``suite`` checks them against each other.
"""

from dppo_bench.config.experiments import (
    TABLE_STATS,
    Column,
    Experiment,
    MaskedTokenTable,
    Panel,
    RunGroup,
    experiment_paths,
    find_experiment,
    load_experiment,
    load_experiments,
)
from dppo_bench.config.identity import canonical_sha256, identity_sha256
from dppo_bench.config.loader import entry_paths, load_model, locate
from dppo_bench.config.methods import (
    MethodRecipe,
    find_method,
    load_method,
    load_methods,
)
from dppo_bench.config.roots import (
    CONFIG_ROOT,
    DATASETS_DIR,
    EVAL_DIR,
    EXPERIMENTS_DIR,
    METHODS_DIR,
    PROMPTS_DIR,
    REPO_ROOT,
    RULES_DIR,
    SETTINGS_DIR,
)
from dppo_bench.config.settings import (
    LocalSpec,
    RolloutFormat,
    Setting,
    base_setting_id,
    find_setting,
    load_setting,
    setting_data,
    setting_paths,
)
from dppo_bench.config.yaml_io import ID_PATTERN, ConfigError, Strict, read_yaml, validate

__all__ = [
    "CONFIG_ROOT",
    "DATASETS_DIR",
    "EVAL_DIR",
    "EXPERIMENTS_DIR",
    "ID_PATTERN",
    "METHODS_DIR",
    "PROMPTS_DIR",
    "REPO_ROOT",
    "RULES_DIR",
    "SETTINGS_DIR",
    "TABLE_STATS",
    "Column",
    "ConfigError",
    "Experiment",
    "LocalSpec",
    "MaskedTokenTable",
    "MethodRecipe",
    "Panel",
    "RolloutFormat",
    "RunGroup",
    "Setting",
    "Strict",
    "base_setting_id",
    "canonical_sha256",
    "entry_paths",
    "experiment_paths",
    "find_experiment",
    "find_method",
    "find_setting",
    "identity_sha256",
    "load_experiment",
    "load_experiments",
    "load_method",
    "load_methods",
    "load_model",
    "load_setting",
    "locate",
    "read_yaml",
    "setting_data",
    "setting_paths",
    "validate",
]
