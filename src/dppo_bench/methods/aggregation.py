"""The loss's aggregation over tokens: verl 0.9.1's ``loss_agg_mode`` modes, without importing verl.

Equal to verl's ``agg_loss`` (verl/trainer/ppo/core_algos.py) operation for operation, which
tests/unit/test_aggregation.py checks on every mode and normaliser. Our own so that the surrogate loss, and the local
trainer that uses it, also run where verl cannot be imported (a GPU image without Ray: benchmarks/gpu_check.sh).

The normalisers are verl's ``global_batch_info``: ``dp_size`` data-parallel ranks, the global batch's valid tokens
(``batch_num_tokens``) and sequences (``global_batch_size``); left out, they are the micro-batch's own (one rank).
"""

from __future__ import annotations

import torch

MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean")


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` holds; a NaN or inf outside the mask does not reach the sum."""
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(dim=dim)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """The scalar loss of ``per_token`` (batch, response_len) over ``mask`` under ``mode``."""
    if mode not in MODES:
        raise ValueError(f"Invalid loss_agg_mode: {mode!r} (one of {', '.join(MODES)})")
    if mode == "token-sum":
        return masked_sum(per_token, mask) * dp_size
    if mode == "token-mean":
        if batch_num_tokens is None:
            _one_rank(dp_size, "batch_num_tokens")
            batch_num_tokens = mask.sum()
        return masked_sum(per_token, mask) / batch_num_tokens * dp_size
    tokens_per_seq = mask.sum(dim=-1)
    seq_loss = (per_token * mask).sum(dim=-1)
    if mode == "seq-mean-token-mean":
        seq_loss = seq_loss / (tokens_per_seq + 1e-8)
    has_tokens = (tokens_per_seq > 0).float()  # a fully masked sequence counts for nothing
    if global_batch_size is None:
        _one_rank(dp_size, "global_batch_size")
        global_batch_size = has_tokens.sum()
    loss = masked_sum(seq_loss, has_tokens) / global_batch_size * dp_size
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss


def _one_rank(dp_size: int, name: str) -> None:
    if dp_size > 1:
        raise ValueError(f"(global) {name} is required when dp_size > 1")
