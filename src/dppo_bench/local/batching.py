"""Token-id batches for the tiny task: prompts, full sequences, per-token masks."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerFast


def prompt_ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """<bos> + the problem, exactly what the chat template renders for a one-message chat."""
    return [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False).input_ids]


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = True
    return ids, mask


def decode_responses(tokenizer: PreTrainedTokenizerFast, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    return [tokenizer.decode(row[m].tolist(), skip_special_tokens=True) for row, m in zip(ids, mask, strict=True)]
