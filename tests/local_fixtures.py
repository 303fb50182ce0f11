"""A tiny local run built in a temporary directory: base model, train split and a setting file."""

from __future__ import annotations

from pathlib import Path

import yaml

from dppo_bench.config import SETTINGS_DIR, load_setting, setting_data
from dppo_bench.local.model import build_model, save_model
from dppo_bench.local.pretrain import task_config
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.local.tokenizer import build_tokenizer

# A two-layer model of the local backend's architecture, for tests that need a policy but no pretraining
TINY_ARCH = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def write_setting(tmp: Path, name: str = "tiny_test", **train_overrides) -> Path:
    """tiny_smoke's values, written out as one self-contained setting file."""
    data = setting_data(SETTINGS_DIR / "tiny_smoke.yaml")
    data["train"].update(train_overrides)
    data["eval"]["every"] = data["train"]["save_every"]
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def build_run_inputs(tmp: Path, setting_path: Path) -> tuple[Path, Path]:
    """(base model dir, train.jsonl): a randomly initialised model stands in for the pretrained one."""
    local = load_setting(setting_path).local
    tok = build_tokenizer()
    base = tmp / "base"
    save_model(build_model(local.model.model_dump(), tok, seed=0), tok, base)
    train, _ = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
    write_jsonl(train, tmp / "train.jsonl")
    return base, tmp / "train.jsonl"
