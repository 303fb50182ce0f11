"""Small Llama-style causal LMs built from a config (nothing is downloaded), saved as HF dirs."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from dppo_bench.io import naming, write_checksums


def build_model(arch: dict, tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    """A randomly initialised model; ``arch`` holds LlamaConfig fields (hidden_size, ...)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
        **arch,
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without leaking into the global RNG
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def load_model(path: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def save_model(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, path: Path, extra: dict[str, bytes] | None = None
) -> None:
    """Write an HF checkpoint dir (plus ``extra`` files) atomically: it appears whole or not at all, with the sha256
    of every file in its SHA256SUMS."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with naming(path):
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            for name, data in (extra or {}).items():
                (tmp / name).write_bytes(data)
            write_checksums(tmp)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed save (a full disk) leaves no part behind
        code = None if isinstance(e, OSError) else re.search(r"os error (\d+)", str(e))
        if code:  # safetensors reports the OS error in its own exception: make it one naming the checkpoint
            raise OSError(int(code[1]), os.strerror(int(code[1])), str(path)) from e
        raise
    if path.exists():
        shutil.rmtree(path)
    tmp.replace(path)


def response_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int
) -> torch.Tensor:
    """Float32 logits at the positions that predict the response tokens: (B, len - prompt_len, V).

    Prompts are left-padded to ``prompt_len`` and responses right-padded after them.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask.long(), position_ids=position_ids)
    return out.logits[:, prompt_len - 1 : -1].float()
