"""The one loss every method shares (paper Eq. 23), with named parts:

    loss_t = -A_t * sg(w_t * g_t) * log pi_t + penalty_t

* the weight ``w_t = min(ratio, C)``: the importance ratio pi/mu of the token (the paper's), or GSPO's
  length-normalised sequence ratio ``exp(mean_t log pi_t/mu_t)`` (the rule's ``ratio`` level), capped at C
  (``is_cap``, null = none);
* the gate ``g_t``: ``1 - M_t`` for a hard mask M (the paper's rules, IcePop, KPop, VACO, GSPO's sequence clip) or
  a soft weight (SAPO's);
* the penalty: a per-token function of log pi/mu with its own gradient (prime-rl's ``tau * (log pi/mu)^2``), or
  none.

It is aggregated by one of verl's modes (``token-mean``, ``seq-mean-token-sum``, ...) as verl's ``agg_loss`` does
(:mod:`dppo_bench.methods.aggregation`, tested equal to it), so both training backends normalise exactly as verl does
and the loss also runs where verl cannot be imported. The IS weight always uses the rollout policy mu; the
gate uses the rule's anchor (mu, or the recomputed pi_old). The gradient flows through log pi (and the penalty).
With a token ratio, a hard mask and no penalty (the paper's methods) the loss is computed exactly as before the
parts were named, operation for operation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dppo_bench.divergence import LOG_FLOOR
from dppo_bench.methods.aggregation import aggregate
from dppo_bench.methods.params import Values
from dppo_bench.methods.registry import MaskRule, Tokens, log_ratio

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
    "masked_pi_mean",  # the current policy's pi of the masked tokens; NaN when none is masked
    "masked_entropy_mean",  # entropy of pi at the masked tokens (Fig. 6); NaN when none or no entropy given
    "pi_mu_abs_diff_mean",  # |pi - mu| of the sampled token (pi = the current policy)
    "pi_mu_abs_diff_max",
    "pi_mu_diff_min",  # signed pi - mu
    "pi_mu_diff_max",
    "bad_update_frac",  # (A < 0 and mu - pi >= 0.5) / response tokens
    "is_ratio_mean",  # the importance ratio (token or sequence level) before the cap
    "is_ratio_max",
    "is_capped_frac",  # tokens whose weight the cap C truncated / response tokens
)
# What a rule's parts add (MaskRule.extra_stats): a soft gate its mean, a penalty its mean, over response tokens
PART_STAT_NAMES = ("gate_mean", "penalty_mean")


def importance_ratio(rule: MaskRule, tokens: Tokens, log_pi: torch.Tensor, log_mu: torch.Tensor) -> torch.Tensor:
    """pi/mu per token, or the sequence's length-normalised ratio at each of its tokens; log bounded at +-20."""
    if rule.ratio == "token":
        return log_ratio(log_pi, log_mu).clamp_(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp_()
    return tokens.sequence_mean(log_ratio(log_pi, log_mu)).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()


@dataclass(frozen=True)
class Parts:
    """The surrogate's named parts per token, (batch, response_len): what the loss aggregates."""

    tokens: Tokens
    ratio: torch.Tensor  # the importance ratio (token or sequence level), before the cap
    weight: torch.Tensor  # min(ratio, C)
    gate: torch.Tensor  # 1 - M for a hard mask, the soft weight otherwise
    masked: torch.Tensor  # the dropped response tokens (a soft gate's zeros)
    coef: torch.Tensor  # A * weight * gate, detached
    per_token: torch.Tensor  # -coef * log pi (+ penalty): the loss before aggregation, with its gradient
    penalty: torch.Tensor | None  # the rule's per-token penalty, with its gradient


def surrogate_parts(
    rule: MaskRule,
    values: Values,
    *,
    log_prob: torch.Tensor,
    mu_log_prob: torch.Tensor,
    anchor_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    topk_divergence: torch.Tensor | None = None,
) -> Parts:
    """The named parts of ``rule`` at ``values`` (arguments as :func:`surrogate_loss`)."""
    with torch.no_grad():
        log_pi = log_prob.detach().float()
        log_mu = mu_log_prob.float()
        log_anchor = log_mu if anchor_log_prob is mu_log_prob else anchor_log_prob.float()
        tokens = Tokens(log_pi, log_anchor, advantages.float(), topk_divergence, response_mask,
                        None if log_anchor is log_mu else log_mu)  # fmt: skip
        ratio = importance_ratio(rule, tokens, log_pi, log_mu)
        is_cap = values.is_cap
        weight = ratio if is_cap is None else ratio.clamp(max=is_cap)
        out = rule(tokens, *rule.args(values))
        if rule.gate == "mask":
            masked = out & response_mask
            gate = (~masked).to(weight.dtype)
        else:
            gate = out.to(weight.dtype)
            masked = (gate == 0) & response_mask
        coef = (advantages * weight).mul_(gate).to(log_prob.dtype)
    # A token the policy gives probability 0 (log pi = -inf) adds nothing and gets no gradient, as its clamped
    # ratio gets none in verl's vanilla loss; left in, its value would make the loss -inf * coef (inf or nan).
    zero_prob = torch.isneginf(log_prob)
    log_prob = log_prob.masked_fill(zero_prob, 0.0)
    per_token = -coef * log_prob
    penalty = None
    if rule.penalty is not None:  # of log pi/mu with its gradient, bounded as the weight's; 0 where pi = 0, as its term
        log_mu_floored = tokens.log_rollout.clamp(min=LOG_FLOOR)  # mu = 0: a large but finite log ratio
        log_r = (log_prob - log_mu_floored).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).masked_fill(zero_prob, 0.0)
        penalty = rule.penalty(log_r, tokens, values)
        per_token = per_token + penalty
    return Parts(tokens, ratio, weight, gate, masked, coef, per_token, penalty)


def surrogate_loss(
    rule: MaskRule,
    values: Values,
    *,
    log_prob: torch.Tensor,
    mu_log_prob: torch.Tensor,
    anchor_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    topk_divergence: torch.Tensor | None = None,
    batch_info: dict | None = None,
    entropy: torch.Tensor | None = None,
    on_masked: Callable[[torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss and the per-step statistics of :data:`STAT_NAMES` and the rule's ``extra_stats`` (python floats).

    ``values``: the rule's hyperparameters (``rule.values(...)``, or a recipe profile). All tensors are
    (batch, response_len); ``response_mask`` is boolean. ``batch_info`` is
    verl's ``global_batch_info`` (dp_size, batch_num_tokens, ...) that the aggregation reads.
    Pass the same tensor as ``mu_log_prob`` and ``anchor_log_prob`` for the rollout anchor.
    ``entropy``: pi's per-token entropy, when the caller's forward computed it. ``on_masked`` is
    given the boolean mask of dropped response tokens (e.g. to count their ids).
    """
    parts = surrogate_parts(
        rule,
        values,
        log_prob=log_prob,
        mu_log_prob=mu_log_prob,
        anchor_log_prob=anchor_log_prob,
        advantages=advantages,
        response_mask=response_mask,
        topk_divergence=topk_divergence,
    )
    if on_masked is not None:
        on_masked(parts.masked)
    loss = aggregate(parts.per_token, response_mask, loss_agg_mode, **(batch_info or {}))
    t = parts.tokens
    mu = t.anchor if t.log_mu is None else t.log_mu.exp()
    stats = token_stats(t, mu, parts.ratio, parts.masked, response_mask, values.is_cap, entropy)
    if rule.extra_stats:
        stats.update(part_stats(response_mask, parts.gate if rule.gate == "soft" else None, parts.penalty))
    return loss, stats


@torch.no_grad()
def part_stats(response_mask: torch.Tensor, gate: torch.Tensor | None, penalty: torch.Tensor | None) -> dict:
    """Means over the response tokens of a soft gate and of a penalty (the parts a rule has)."""
    n = response_mask.sum().clamp(min=1)
    parts = {"gate_mean": gate, "penalty_mean": penalty}
    return {name: ((v.detach().float() * response_mask).sum() / n).item() for name, v in parts.items() if v is not None}


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
    masked_mu, masked_pi = (mu * masked_f).sum(), (tokens.pi * masked_f).sum()
    floats = torch.stack([abs_mean, lo, hi, ratio_v.sum() / n, ratio_v.max(), masked_mu, masked_pi, masked_entropy])
    counts, floats = counts.tolist(), floats.tolist()
    n_valid, n_pos, n_neg, m, m_pos, m_neg, bad = (max(c, 1) if i < 3 else c for i, c in enumerate(counts[:7]))
    n_nonzero = max(counts[1] + counts[2], 1)
    abs_mean, lo, hi, r_mean, r_max, masked_mu, masked_pi, masked_entropy = floats
    return {
        "mask_frac": m / n_valid,
        "mask_frac_pos": m_pos / n_pos,
        "mask_frac_neg": m_neg / n_neg,
        "mask_frac_nonzero_adv": m / n_nonzero,  # masked tokens all have A != 0 (rules never mask A = 0)
        "mask_frac_pos_nonzero_adv": m_pos / n_nonzero,
        "mask_frac_neg_nonzero_adv": m_neg / n_nonzero,
        "masked_mu_mean": masked_mu / m if m else math.nan,
        "masked_pi_mean": masked_pi / m if m else math.nan,
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
