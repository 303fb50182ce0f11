"""The one loss every method shares (paper Eq. 23):

    loss_t = -A_t * sg(min(pi_t / mu_t, C)) * M_t * log pi_t

aggregated by one of verl's modes (``token-mean``, ``seq-mean-token-sum``, ...) with verl's own
``agg_loss``, so both training backends normalise exactly as verl does. The IS weight always
uses the rollout policy mu; the mask M uses the rule's anchor (mu, or the recomputed pi_old).
The gradient flows only through log pi.
"""

from __future__ import annotations

import torch
from verl.trainer.ppo.core_algos import agg_loss

from dppo_bench.methods.registry import MaskRule, Tokens

LOG_RATIO_BOUND = 20.0  # as verl and Stable-RL: exp(20) ~ 4.9e8 keeps the weight finite
BAD_UPDATE_DELTA = 0.5  # Fig. 5: a bad update is A < 0 with mu - pi >= 0.5

STAT_NAMES = (
    "mask_frac",  # masked tokens / response tokens
    "mask_frac_pos",  # masked / tokens with A > 0
    "mask_frac_neg",  # masked / tokens with A < 0
    "pi_mu_abs_diff_mean",  # |pi - mu| of the sampled token (pi = the current policy)
    "pi_mu_abs_diff_max",
    "pi_mu_diff_min",  # signed pi - mu
    "pi_mu_diff_max",
    "bad_update_frac",  # (A < 0 and mu - pi >= 0.5) / response tokens
    "is_ratio_mean",  # pi / mu before the cap
    "is_ratio_max",
    "is_capped_frac",  # tokens whose weight the cap C truncated / response tokens
)


def surrogate_loss(
    rule: MaskRule,
    *,
    log_prob: torch.Tensor,
    mu_log_prob: torch.Tensor,
    anchor_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    low: float,
    high: float,
    is_cap: float | None,
    loss_agg_mode: str = "token-mean",
    topk_divergence: torch.Tensor | None = None,
    batch_info: dict | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss and the per-step statistics of :data:`STAT_NAMES` (python floats).

    All tensors are (batch, response_len); ``response_mask`` is boolean. ``batch_info`` is
    verl's ``global_batch_info`` (dp_size, batch_num_tokens, ...) forwarded to ``agg_loss``.
    """
    with torch.no_grad():
        log_pi = log_prob.detach().float()
        log_mu = mu_log_prob.float()
        tokens = Tokens(log_pi, anchor_log_prob.float(), advantages.float(), topk_divergence)
        log_ratio = (log_pi - log_mu).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
        ratio = log_ratio.exp()
        weight = ratio if is_cap is None else ratio.clamp(max=is_cap)
        masked = rule(tokens, low, high) & response_mask
        coef = (advantages * weight).masked_fill(masked, 0.0).to(log_prob.dtype)
    loss_mat = -coef * log_prob
    loss = agg_loss(loss_mat, response_mask, loss_agg_mode, **(batch_info or {}))
    stats = token_stats(tokens, log_mu, ratio, masked, response_mask, is_cap)
    return loss, stats


@torch.no_grad()
def token_stats(
    tokens: Tokens,
    log_mu: torch.Tensor,
    ratio: torch.Tensor,
    masked: torch.Tensor,
    response_mask: torch.Tensor,
    is_cap: float | None,
) -> dict[str, float]:
    """The statistics of :data:`STAT_NAMES` over the response tokens, with one host sync."""
    valid = response_mask
    adv = tokens.advantages
    pos, neg = valid & (adv > 0), valid & (adv < 0)
    diff = (tokens.pi - log_mu.exp())[valid]
    ratio_v = ratio[valid]
    capped = ratio_v > is_cap if is_cap is not None else torch.zeros_like(ratio_v, dtype=torch.bool)
    counts = torch.stack([valid.sum(), pos.sum(), neg.sum()]).clamp(min=1).float()
    sums = torch.stack(
        [
            masked.sum(),
            (masked & pos).sum(),
            (masked & neg).sum(),
            (neg & (log_mu.exp() - tokens.pi >= BAD_UPDATE_DELTA)).sum(),
            capped.sum(),
        ]
    ).float()
    empty = diff.numel() == 0
    extremes = (
        torch.zeros(6)
        if empty
        else torch.stack(
            [diff.abs().mean(), diff.abs().max(), diff.min(), diff.max(), ratio_v.mean(), ratio_v.max()]
        )
    )
    n, n_pos, n_neg = counts.tolist()
    m, m_pos, m_neg, bad, n_capped = sums.tolist()
    abs_mean, abs_max, dmin, dmax, r_mean, r_max = extremes.tolist()
    return {
        "mask_frac": m / n,
        "mask_frac_pos": m_pos / n_pos,
        "mask_frac_neg": m_neg / n_neg,
        "pi_mu_abs_diff_mean": abs_mean,
        "pi_mu_abs_diff_max": abs_max,
        "pi_mu_diff_min": dmin,
        "pi_mu_diff_max": dmax,
        "bad_update_frac": bad / n,
        "is_ratio_mean": r_mean,
        "is_ratio_max": r_max,
        "is_capped_frac": n_capped / n,
    }
