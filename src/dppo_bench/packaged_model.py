"""A packaged model (:mod:`dppo_bench.config.models`) as the HF checkpoint directory every engine reads.

transformers reads the GGUF (with the ``gguf`` package) and dequantises its weights to fp32; the directory written
holds those fp32 weights as safetensors, the tokenizer with its chat template, the sha256 of every file and a
``source.json`` naming the GGUF it came from. Two corrections are made on the way, both from the GGUF's own
metadata, so the directory describes the model the GGUF describes:

- the special tokens: transformers' GGUF tokenizer takes its eos (and bos) from the vocabulary's first control
  token, so SmolLM2's reads ``<|im_start|>`` where the GGUF says eos is ``<|im_end|>``; an engine stopping on the
  wrong token would never stop (or stop at once). The tokenizer and the model's configs get the GGUF's ids;
- the model class: a GGUF-loaded model refuses ``save_pretrained``, so its weights move into a fresh model built
  from its config (every key matches).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dppo_bench.config.models import PackagedModel
from dppo_bench.errors import UserError
from dppo_bench.io import file_sha256
from dppo_bench.local.model import save_model

SOURCE_FILE = "source.json"
# token roles, by their GGUF metadata names (tokenizer.ggml.<name>_token_id)
SPECIAL_TOKENS = {"bos": "bos", "eos": "eos", "pad": "padding", "unk": "unknown"}


def gguf_special_ids(path: Path) -> dict[str, int]:
    """The special-token ids a GGUF's metadata declares, by role."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    ids = {}
    for role, name in SPECIAL_TOKENS.items():
        field = fields.get(f"tokenizer.ggml.{name}_token_id")
        if field is not None:
            ids[role] = int(field.contents())
    return ids


def build(spec: PackagedModel, out: Path) -> dict:
    """Verify the GGUF against the spec's sha256, convert it, and write ``out`` atomically; returns source.json."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = spec.gguf_path()
    digest = file_sha256(gguf)
    if digest != spec.sha256:
        raise UserError(
            f"{spec.path}: field 'sha256': {gguf} has sha256 {digest}, not the pinned {spec.sha256} "
            f"(another version of {spec.package}? install it with `{spec.install_hint()}`)"
        )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    specials = gguf_special_ids(gguf)
    for role, token_id in specials.items():
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
        for config in (loaded.config, loaded.generation_config):
            if role != "unk":
                setattr(config, f"{role}_token_id", token_id)
    model = type(loaded)(loaded.config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    source = {
        "model": spec.id,
        "package": spec.package,
        "version": spec.version,
        "file": spec.file,
        "sha256": digest,
        "special_token_ids": specials,
        "dtype": "float32 (dequantised from the GGUF)",
    }
    save_model(model.eval(), tokenizer, out, extra={SOURCE_FILE: json.dumps(source, indent=2).encode() + b"\n"})
    return source
