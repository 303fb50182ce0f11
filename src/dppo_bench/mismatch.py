"""The training-inference mismatch at equal parameters, measured the same way by both backends.

Over every response token of a rollout batch: the trainer's probability pi(theta') of the sampled token against
the rollout engine's mu, at the parameters theta' the rollout was generated with (before any update of the step),
and the token-mean entropy of pi(theta'). The local trainer measures it with one no-grad pass over the whole batch;
verl with its actor's log-prob pass (dppo_bench.verl_plugin.mismatch).
"""

from __future__ import annotations

import math

import torch

from dppo_bench.canonical import ENTROPY_MEAN, MISMATCH_STATS


@torch.no_grad()
def mismatch_stats(pi_log_probs: torch.Tensor, mu_log_probs: torch.Tensor, response_mask: torch.Tensor) -> dict:
    """|pi - mu| (mean, max) and pi - mu (min, max) in probability over the response tokens (padded tensors),
    under their canonical names; NaN for a batch without response tokens."""
    mask = response_mask.bool()
    if not mask.any():
        return dict.fromkeys(MISMATCH_STATS, math.nan)
    diff = pi_log_probs.float()[mask].exp() - mu_log_probs.float()[mask].exp()
    absolute = diff.abs()
    values = torch.stack([absolute.mean(), absolute.max(), diff.min(), diff.max()]).tolist()
    return dict(zip(MISMATCH_STATS, values, strict=True))


@torch.no_grad()
def entropy_mean(entropy: torch.Tensor, response_mask: torch.Tensor) -> dict:
    """The token-mean entropy of pi(theta') over the response tokens."""
    mask = response_mask.bool()
    return {ENTROPY_MEAN: entropy.float()[mask].mean().item() if mask.any() else math.nan}
