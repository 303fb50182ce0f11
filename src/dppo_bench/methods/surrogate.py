"""The one loss every method shares (paper Eq. 23):

    loss_t = -A_t * sg(min(pi_t / mu_t, C)) * M_t * log pi_t

aggregated by one of verl's modes (``token-mean``, ``seq-mean-token-sum``, ...) with verl's own
``agg_loss``, so both training backends normalise exactly as verl does. The IS weight always
uses the rollout policy mu; the mask M uses the rule's anchor (mu, or the recomputed pi_old).
The gradient flows only through log pi.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from dppo_bench.methods.registry import MaskRule, Tokens

LOG_RATIO_BOUND = 20.0  # as verl and Stable-RL: exp(20) ~ 4.9e8 keeps the weight finite
BAD_UPDATE_DELTA = 0.5  # Fig. 5: a bad update is A < 0 with mu - pi >= 0.5

STAT_NAMES = (
    "mask_frac",  # masked tokens / response tokens
    "mask_frac_pos",  # masked / tokens with A > 0
    "mask_frac_neg",  # masked / tokens with A < 0
    "mask_frac_nonzero_adv",  # masked / tokens with A != 0: Stable-RL's pg_clipfrac
    "mask_frac_pos_nonzero_adv",  # (masked and A > 0) / tokens with A != 0
    "mask_frac_neg_nonzero_adv",  # (masked and A < 0) / tokens with A != 0: Stable-RL's pg_clipfrac_lower
    "masked_mu_mean",  # rollout probability mu of the masked tokens (Fig. 6); NaN when none is masked
    "masked_entropy_mean",  # entropy of pi at the masked tokens (Fig. 6); NaN when none or no entropy given
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
    alpha: float | None = None,
    loss_agg_mode: str = "token-mean",
    topk_divergence: torch.Tensor | None = None,
    batch_info: dict | None = None,
    entropy: torch.Tensor | None = None,
    on_masked: Callable[[torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss and the per-step statistics of :data:`STAT_NAMES` (python floats).

    All tensors are (batch, response_len); ``response_mask`` is boolean. ``batch_info`` is
    verl's ``global_batch_info`` (dp_size, batch_num_tokens, ...) forwarded to ``agg_loss``.
    Pass the same tensor as ``mu_log_prob`` and ``anchor_log_prob`` for the rollout anchor.
    ``entropy``: pi's per-token entropy, when the caller's forward computed it. ``on_masked`` is
    given the boolean mask of dropped response tokens (e.g. to count their ids).
    """
    from verl.trainer.ppo.core_algos import agg_loss  # here, so importing the rules stays light

    with torch.no_grad():
        log_pi = log_prob.detach().float()
        log_mu = mu_log_prob.float()
        log_anchor = log_mu if anchor_log_prob is mu_log_prob else anchor_log_prob.float()
        tokens = Tokens(log_pi, log_anchor, advantages.float(), topk_divergence)
        ratio = log_ratio(log_pi, log_mu).clamp_(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp_()
        weight = ratio if is_cap is None else ratio.clamp(max=is_cap)
        masked = rule(tokens, low, high, alpha) & response_mask
        if on_masked is not None:
            on_masked(masked)
        coef = (advantages * weight).mul_((~masked).to(weight.dtype)).to(log_prob.dtype)
    # A token the policy gives probability 0 (log pi = -inf) adds nothing and gets no gradient, as its clamped
    # ratio gets none in verl's vanilla loss; left in, its value would make the loss -inf * coef (inf or nan).
    log_prob = log_prob.masked_fill(torch.isneginf(log_prob), 0.0)
    loss = agg_loss(-coef * log_prob, response_mask, loss_agg_mode, **(batch_info or {}))
    mu = tokens.anchor if log_anchor is log_mu else log_mu.exp()
    return loss, token_stats(tokens, mu, ratio, masked, response_mask, is_cap, entropy)


def log_ratio(log_pi: torch.Tensor, log_mu: torch.Tensor) -> torch.Tensor:
    """log(pi / mu) per token; 0 where both policies give the token probability 0 (log pi = log mu = -inf, as a padded
    or impossible token can give): -inf - -inf would be NaN, and the NaN would reach the loss through its weight even
    though the token gets no gradient. Equal (zero) probabilities are a ratio of 1, as for any unmoved token."""
    both_impossible = torch.isneginf(log_pi) & torch.isneginf(log_mu)
    return (log_pi - log_mu).masked_fill_(both_impossible, 0.0)


@torch.no_grad()
def token_stats(
    tokens: Tokens,
    mu: torch.Tensor,
    ratio: torch.Tensor,
    masked: torch.Tensor,
    response_mask: torch.Tensor,
    is_cap: float | None,
    entropy: torch.Tensor | None = None,
) -> dict[str, float]:
    """The statistics of :data:`STAT_NAMES` over the response tokens, with one host sync.

    Written for speed on the loss's hot path: counts use count_nonzero, float reductions
    multiply by the 0/1 mask, and padding is kept out of min/max by filling it with the mean
    of the valid tokens (which lies between their min and max).
    """
    if response_mask.numel() == 0:  # no response tokens at all: every count and mean is zero, as with all masked
        return dict.fromkeys(STAT_NAMES, 0.0)
    valid = response_mask
    pos, neg = tokens.up & valid, tokens.down & valid
    diff = tokens.pi - mu
    bool_counts = [valid, pos, neg, masked, masked & pos, masked & neg, neg & (diff <= -BAD_UPDATE_DELTA)]
    if is_cap is not None:
        bool_counts.append(valid & (ratio > is_cap))
    counts = torch.stack([torch.count_nonzero(b) for b in bool_counts])
    valid_f = valid.to(diff.dtype)
    diff_v, ratio_v = diff * valid_f, ratio * valid_f
    n = counts[0].clamp(min=1)
    abs_mean, diff_mean = diff_v.abs().sum() / n, diff_v.sum() / n
    lo, hi = torch.aminmax(diff_v.add_((1.0 - valid_f).mul_(diff_mean)))  # padding := mean
    masked_f = masked.to(diff.dtype)
    masked_entropy = (entropy.float() * masked_f).sum() if entropy is not None else masked_f.new_zeros(())
    floats = torch.stack([abs_mean, lo, hi, ratio_v.sum() / n, ratio_v.max(), (mu * masked_f).sum(), masked_entropy])
    counts, floats = counts.tolist(), floats.tolist()
    n_valid, n_pos, n_neg, m, m_pos, m_neg, bad = (max(c, 1) if i < 3 else c for i, c in enumerate(counts[:7]))
    n_nonzero = max(counts[1] + counts[2], 1)
    abs_mean, lo, hi, r_mean, r_max, masked_mu, masked_entropy = floats
    return {
        "mask_frac": m / n_valid,
        "mask_frac_pos": m_pos / n_pos,
        "mask_frac_neg": m_neg / n_neg,
        "mask_frac_nonzero_adv": m / n_nonzero,  # masked tokens all have A != 0 (rules never mask A = 0)
        "mask_frac_pos_nonzero_adv": m_pos / n_nonzero,
        "mask_frac_neg_nonzero_adv": m_neg / n_nonzero,
        "masked_mu_mean": masked_mu / m if m else math.nan,
        "masked_entropy_mean": masked_entropy / m if m and entropy is not None else math.nan,
        "pi_mu_abs_diff_mean": abs_mean,
        "pi_mu_abs_diff_max": max(-lo, hi),
        "pi_mu_diff_min": lo,
        "pi_mu_diff_max": hi,
        "bad_update_frac": bad / n_valid,
        "is_ratio_mean": r_mean,
        "is_ratio_max": r_max,
        "is_capped_frac": (counts[7] if is_cap is not None else 0) / n_valid,
    }
