"""Pi's log-probs on mu's kept ids from logits whose vocabulary may be split over ranks: the one way every trainer
gets them (the local backend's update, verl's FSDP and Megatron engines).

Megatron keeps the logits vocabulary-parallel: tensor-parallel rank r holds columns
``[r * V_r, (r + 1) * V_r)`` of every token's logits. Everything here is written against an
abstract all-reduce over that group, so one code path serves any TP size, and FSDP (full
logits) is the case of one shard with :func:`no_reduce`:

* logits at global ids: each rank gathers the ids that fall in its shard, zero elsewhere,
  and a SUM all-reduce assembles them (exactly one rank owns each id);
* log-normaliser (logsumexp over the vocabulary): a MAX all-reduce of the shard maxima, then
  a SUM all-reduce of each shard's sum of exp(x - max), streamed over tokens so that no
  temporary bigger than ``chunk`` rows of the shard is made;
* or, in the engines, the normaliser the trainer already paid for: the engine computes log pi
  of the sampled token, so ``lse = logit[sampled] - log pi(sampled)`` costs one more gathered
  id instead of a pass over the vocabulary (:func:`divergences_from_gathered`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from dppo_bench.divergence import topk_divergence

ReduceOp = Literal["sum", "max"]
AllReduce = Callable[[torch.Tensor, ReduceOp], torch.Tensor]  # reduces over the group, returns the result
NORMALIZER_CHUNK = 1024  # tokens per step of the streamed logsumexp


def no_reduce(tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
    """The all-reduce of a group of one (unsharded logits)."""
    return tensor


def torch_all_reduce(group) -> AllReduce:
    """An :data:`AllReduce` over a ``torch.distributed`` process group."""
    ops = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX}

    def all_reduce(tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        torch.distributed.all_reduce(tensor, op=ops[op], group=group)
        return tensor

    return all_reduce


@torch.no_grad()
def logits_at(
    local_logits: torch.Tensor, ids: torch.Tensor, *, vocab_start: int = 0, all_reduce: AllReduce = no_reduce
) -> torch.Tensor:
    """float32 logits at global vocabulary ``ids`` (..., M) from this rank's shard (..., V_r)."""
    shard = local_logits.shape[-1]
    local = ids.long() - vocab_start
    mine = (local >= 0) & (local < shard)
    picked = local_logits.gather(-1, local.clamp(0, shard - 1)).float()
    return all_reduce(torch.where(mine, picked, torch.zeros_like(picked)), "sum")


@torch.no_grad()
def log_normalizer(
    local_logits: torch.Tensor, *, all_reduce: AllReduce = no_reduce, chunk: int = NORMALIZER_CHUNK
) -> torch.Tensor:
    """logsumexp over the whole vocabulary (...), float32, from this rank's shard (..., V_r)."""
    rows = local_logits.reshape(-1, local_logits.shape[-1])
    peak = all_reduce(rows.amax(dim=-1).float(), "max")
    total = torch.empty_like(peak)
    for start in range(0, rows.shape[0], chunk):
        block = rows[start : start + chunk].float() - peak[start : start + chunk, None]  # a copy: logits stay intact
        total[start : start + chunk] = block.exp_().sum(dim=-1)
    total = all_reduce(total, "sum")
    return (total.log() + peak).reshape(local_logits.shape[:-1])


@torch.no_grad()
def topk_log_probs(
    local_logits: torch.Tensor,
    ids: torch.Tensor,
    *,
    vocab_start: int = 0,
    all_reduce: AllReduce = no_reduce,
    normalizer: torch.Tensor | None = None,
) -> torch.Tensor:
    """log pi at global ``ids`` (..., M); the normaliser is reduced over the group unless given."""
    if normalizer is None:
        normalizer = log_normalizer(local_logits, all_reduce=all_reduce)
    gathered = logits_at(local_logits, ids, vocab_start=vocab_start, all_reduce=all_reduce)
    return gathered - normalizer.float().unsqueeze(-1)


@torch.no_grad()
def divergences_from_gathered(
    gathered: torch.Tensor, sampled_log_prob: torch.Tensor, mu_logprobs: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per-token top-K TV and KL(mu || pi), reusing the engine's log-normaliser.

    ``gathered`` (..., K + 1) holds the logits at mu's K kept ids followed by the logit of the
    token the engine scored (the sampled one); ``sampled_log_prob`` (...) is the engine's log pi
    of that token, so ``logit - log pi`` is the engine's own log-normaliser.
    """
    normalizer = gathered[..., -1] - sampled_log_prob.float()
    pi_logprobs = gathered[..., :-1] - normalizer.unsqueeze(-1)
    return {kind: topk_divergence(mu_logprobs, pi_logprobs, kind) for kind in ("tv", "kl")}
