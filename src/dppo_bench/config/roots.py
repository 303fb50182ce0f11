"""Where the suite's yaml files are read from.

Every directory of yaml (method recipes, settings, training datasets, experiments, eval specs and their
prompts) sits under one root: the checkout by default, or the directory ``DPPO_BENCH_CONFIG_ROOT`` names. The
variable is read once, at import, so set it before starting ``snakemake`` or ``dppo-bench``; the pipeline's jobs
inherit it. A tree elsewhere lets tests (and users trying a recipe) plan and run without writing into the
checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout: provenance's git, reference numbers, data paths
ROOT_VARIABLE = "DPPO_BENCH_CONFIG_ROOT"
CONFIG_ROOT = Path(os.environ.get(ROOT_VARIABLE) or REPO_ROOT).resolve()

METHODS_DIR = CONFIG_ROOT / "recipes" / "methods"
RULES_DIR = CONFIG_ROOT / "recipes" / "rules"  # a user's rule modules (*.py), imported before recipes are read
SETTINGS_DIR = CONFIG_ROOT / "recipes" / "settings"
DATASETS_DIR = CONFIG_ROOT / "recipes" / "datasets"
MODELS_DIR = CONFIG_ROOT / "recipes" / "models"  # models shipped inside Python packages
EXPERIMENTS_DIR = CONFIG_ROOT / "experiments"
EVAL_DIR = CONFIG_ROOT / "eval"
PROMPTS_DIR = EVAL_DIR / "prompts"
ROOT_DIRS = (METHODS_DIR, SETTINGS_DIR, DATASETS_DIR, MODELS_DIR, EXPERIMENTS_DIR, EVAL_DIR)  # what a root holds
