"""Trainer-side top-K divergence: pi's log-probs on mu's kept ids, from the trainer's logits.

The trainer already normalises its logits once to get log pi of the sampled tokens; pass that
log-normaliser (logsumexp over the vocabulary) and the top-K divergence costs one gather of K
logits per token: nothing of vocabulary size is materialised.
"""

from __future__ import annotations

import torch

from dppo_bench.divergence import Kind, topk_divergence


@torch.no_grad()
def topk_divergence_from_logits(
    logits: torch.Tensor,
    ids: torch.Tensor,
    mu_logprobs: torch.Tensor,
    kind: Kind,
    *,
    log_normalizer: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token TV or KL(mu || pi) on the kept set ``ids`` (..., K) plus the other bucket.

    ``logits`` (..., V) are the trainer's (temperature already applied); ``mu_logprobs`` (..., K)
    are the rollout's on the same ids. ``log_normalizer`` (...) is logsumexp(logits) when the
    caller has it; otherwise it is computed here (one extra pass over the vocabulary).
    """
    if log_normalizer is None:
        log_normalizer = torch.logsumexp(logits.float(), dim=-1)
    pi_logprobs = logits.gather(-1, ids.long()).float() - log_normalizer.unsqueeze(-1)
    return topk_divergence(mu_logprobs, pi_logprobs, kind)
