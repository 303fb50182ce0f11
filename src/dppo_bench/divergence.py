"""Divergences between the rollout policy mu and the training policy pi at one state.

Every function takes log-probabilities (any float dtype; computed in float32) and returns one
value per token. All are KL(mu || pi), rollout distribution first, as in the paper (Sec. 4).

Three reductions of the vocabulary, each a coarse-graining of the next, so that
binary <= top-K <= exact (data-processing inequality, paper App. B):

* binary: {sampled token, everything else} (Eqs. 13-14);
* top-K: the kept set A' = top-K of mu with the sampled token forced in, plus one "other"
  bucket holding the rest of the mass (Eqs. 15-16);
* exact: the full vocabulary (reference only; the trainer never needs it).

Numerical safety: probabilities of exactly 0 or 1, ``-inf`` or NaN log-probs and bf16 inputs all give
finite results. Log-probabilities are floored at ``LOG_FLOOR`` and bucket masses at
``MASS_FLOOR`` (the paper's code clamps rest masses at 1e-12 too), so a divergence against a
token that pi gives zero mass is large but finite. A NaN log-prob (an engine's unfilled top-K slot) counts as no
mass, like ``-inf``: left in, it would make the divergence NaN (TV) or silently 0 (KL), and the mask's comparisons
with it always false.

The module calls tensor methods only and imports torch just for type hints, so that the config
layer (which validates mask rules) loads without torch: ``snakemake -n`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

Kind = Literal["tv", "kl"]

LOG_FLOOR = -100.0  # exp(-100) underflows float32 to a subnormal; keeps log-space finite
MASS_FLOOR = 1e-12  # floor of a bucket's mass inside a log


def _logp(x: torch.Tensor) -> torch.Tensor:
    return x.float().nan_to_num(nan=LOG_FLOOR).clamp(LOG_FLOOR, 0.0)  # -inf and NaN -> floor: no mass


def _rest(logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mass of the "other" bucket, 1 - sum_k p_k over the last dim, and its floored log.

    Computed from logsumexp with expm1, so it stays accurate when the kept mass is close to 1.
    """
    log_kept = logp.logsumexp(dim=-1).clamp(max=0.0)
    rest = -log_kept.expm1()
    return rest, rest.clamp(min=MASS_FLOOR).log()


def _kl_terms(p: torch.Tensor, logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """p * (log p - log q), with 0 * log 0 = 0."""
    return (p * (logp - logq)).where(p > 0, 0.0)


def binary_tv(mu_logprob: torch.Tensor, pi_logprob: torch.Tensor) -> torch.Tensor:
    """|mu(a) - pi(a)| of the sampled token: both halves of the binary TV sum are equal."""
    return (_logp(mu_logprob).exp() - _logp(pi_logprob).exp()).abs()


def binary_kl(
    mu_logprob: torch.Tensor,
    pi_logprob: torch.Tensor,
    *,
    p: torch.Tensor | None = None,
) -> torch.Tensor:
    """KL(Bernoulli(mu(a)) || Bernoulli(pi(a))) of the sampled token a.

    ``p`` may pass exp() of mu's log-prob when the caller already has it. The
    "other" side's masses 1 - p and 1 - q come from the log-probs with expm1: ``1.0 - exp(lp)`` rounds
    to 0 once a probability is within float32 rounding of 1 (log pi = -1e-9), which floors the mass
    and inflates the KL of exactly the confident tokens the mask must keep.
    """
    mu_lp, pi_lp = _logp(mu_logprob), _logp(pi_logprob)
    p = mu_lp.exp() if p is None else p.float()
    p_rest, q_rest = -mu_lp.expm1(), -pi_lp.expm1()
    log_ratio_rest = p_rest.clamp(min=MASS_FLOOR).log() - q_rest.clamp(min=MASS_FLOOR).log()
    return (p * (mu_lp - pi_lp) + p_rest * log_ratio_rest).clamp(min=0.0)


def topk_divergence(mu_logprobs: torch.Tensor, pi_logprobs: torch.Tensor, kind: Kind) -> torch.Tensor:
    """TV or KL(mu || pi) on the kept token set plus an "other" bucket.

    ``mu_logprobs`` and ``pi_logprobs`` hold the log-probabilities of the same kept tokens under
    mu and pi (last dim K; build the set with :func:`kept_token_set`). Returns one value per
    token position (the last dim reduced). K = 1 with the sampled token gives the binary
    divergence; K = V gives the exact one.
    """
    if mu_logprobs.shape != pi_logprobs.shape:
        raise ValueError(
            f"mu and pi log-probs differ in shape: {tuple(mu_logprobs.shape)} vs {tuple(pi_logprobs.shape)}"
        )
    mu_lp, pi_lp = _logp(mu_logprobs), _logp(pi_logprobs)
    mu_p, pi_p = mu_lp.exp(), pi_lp.exp()
    (mu_rest, mu_rest_lp), (pi_rest, pi_rest_lp) = _rest(mu_lp), _rest(pi_lp)
    if kind == "tv":
        return 0.5 * ((mu_p - pi_p).abs().sum(-1) + (mu_rest - pi_rest).abs())
    if kind == "kl":
        kept = _kl_terms(mu_p, mu_lp, pi_lp).sum(-1)
        return (kept + _kl_terms(mu_rest, mu_rest_lp, pi_rest_lp)).clamp(min=0.0)
    raise ValueError(f"unknown divergence kind {kind!r}; expected 'tv' or 'kl'")


def exact_divergence(mu_logprobs: torch.Tensor, pi_logprobs: torch.Tensor, kind: Kind) -> torch.Tensor:
    """TV or KL(mu || pi) over the full vocabulary (last dim V), for reference and tests."""
    mu_lp, pi_lp = _logp(mu_logprobs), _logp(pi_logprobs)
    mu_p, pi_p = mu_lp.exp(), pi_lp.exp()
    if kind == "tv":
        return 0.5 * (mu_p - pi_p).abs().sum(-1)
    if kind == "kl":
        return _kl_terms(mu_p, mu_lp, pi_lp).sum(-1).clamp(min=0.0)
    raise ValueError(f"unknown divergence kind {kind!r}; expected 'tv' or 'kl'")


def kept_token_set(
    topk_ids: torch.Tensor,
    topk_logprobs: torch.Tensor,
    sampled_ids: torch.Tensor,
    sampled_logprobs: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's code's kept set: mu's top-K (sorted by rank), sampled token forced in.

    When the sampled token is not among the K most likely tokens of mu, it replaces the K-th
    (least likely) entry, so the set keeps size K: top-(K-1) of mu plus the sampled token
    (Stable-RL's vLLM/SGLang servers do exactly this). The paper writes A' = TopK(mu) U {a},
    of size K+1 in that case; both are coarse-grainings that contain the sampled token, so the
    lower-bound property holds either way.

    Shapes: ``topk_*`` (..., K) sorted by descending mu; ``sampled_*`` (...).
    """
    hit = (topk_ids == sampled_ids.unsqueeze(-1)).any(-1, keepdim=True)
    last = topk_ids.new_zeros(topk_ids.shape, dtype=hit.dtype)
    last[..., -1] = True
    keep = ~last | hit
    ids = topk_ids.where(keep, sampled_ids.unsqueeze(-1).to(topk_ids.dtype))
    logprobs = topk_logprobs.where(keep, sampled_logprobs.unsqueeze(-1).to(topk_logprobs.dtype))
    return ids, logprobs


def topk_of_log_probs(log_probs: torch.Tensor, k: int, sampled_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mu's kept set from its full log-probs (..., V) (local rollout engine): ids and log-probs, (..., K)."""
    top_lp, top_ids = log_probs.topk(k, dim=-1)
    sampled_lp = log_probs.gather(-1, sampled_ids.unsqueeze(-1)).squeeze(-1)
    return kept_token_set(top_ids, top_lp, sampled_ids, sampled_lp)
