"""Edges of the shared surrogate: tokens of probability 0 (under pi, or under both policies), non-finite entries in
mu's top-K, and a batch without response tokens."""

import math

import pytest
import torch

from dppo_bench import divergence
from dppo_bench.methods import get_mask, mask_names, surrogate_loss
from dppo_bench.methods.surrogate import STAT_NAMES

RULE = get_mask("dppo_binary_tv")


def loss_and_grad(log_prob_values, mask, mode="token-mean"):
    log_prob = torch.tensor(log_prob_values, requires_grad=True)
    mu = torch.full_like(log_prob, -1.0)
    loss, stats = surrogate_loss(
        RULE,
        RULE.values(delta=0.15, is_cap=None),
        log_prob=log_prob,
        mu_log_prob=mu,
        anchor_log_prob=mu,
        advantages=torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]),
        response_mask=mask,
        loss_agg_mode=mode,
    )
    loss.backward()
    return loss, log_prob.grad, stats


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("row", [0, 1])
def test_a_token_of_probability_zero_keeps_the_loss_finite(mode, row):
    mask = torch.ones(2, 3, dtype=torch.bool)
    values = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    values[row][0] = -math.inf
    loss, grad, stats = loss_and_grad(values, mask, mode)
    assert math.isfinite(loss.item()) and torch.isfinite(grad).all()
    assert grad[row, 0] == 0  # no gradient through it, as verl's clamped ratio gives none
    values[row][0] = -1.0  # the other tokens' gradient is the one they have without it
    _, reference, _ = loss_and_grad(values, mask, mode)
    keep = torch.ones(2, 3, dtype=torch.bool)
    keep[row, 0] = False
    assert torch.equal(grad[keep], reference[keep])
    assert stats["pi_mu_diff_min"] == pytest.approx(-math.exp(-1.0))  # pi = 0 against mu = e^-1


def test_a_batch_without_response_tokens_gives_zero_token_statistics():
    for shape in [(2, 0), (0, 3)]:
        empty = torch.zeros(shape)
        _, stats = surrogate_loss(
            RULE,
            RULE.values(delta=0.15, is_cap=2.0),
            log_prob=empty.requires_grad_(),
            mu_log_prob=empty,
            anchor_log_prob=empty,
            advantages=empty,
            response_mask=torch.zeros(shape, dtype=torch.bool),
        )
        assert stats == dict.fromkeys(STAT_NAMES, 0.0)


AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
HP = {"delta": 0.15, "eps_low": 0.2, "eps_high": 0.28, "alpha": 0.3}


def every_rule_loss(name, log_pi_values, log_mu_values, mode, padded, mu_topk=None):
    """Loss, gradient and statistics of rule ``name`` on one batch; the Top-K rules read the divergence of mu's kept
    set ``mu_topk`` (default: each token's own mu, one entry) against pi at the same ids (pi's own log-prob)."""
    rule = get_mask(name)
    log_pi = torch.tensor(log_pi_values, requires_grad=True)
    log_mu = torch.tensor(log_mu_values)
    mask = torch.ones_like(log_mu, dtype=torch.bool)
    if padded:
        mask[0, 0] = False
    topk = None
    if rule.needs_topk:
        mu_kept = log_mu[..., None] if mu_topk is None else mu_topk
        pi_kept = log_pi.detach()[..., None].expand_as(mu_kept)
        topk = divergence.topk_divergence(mu_kept, pi_kept, rule.topk_kind)
    declared = {p.name for p in rule.params}
    loss, stats = surrogate_loss(
        rule,
        rule.values(**{k: v for k, v in HP.items() if k in declared}, is_cap=None),
        log_prob=log_pi,
        mu_log_prob=log_mu,
        anchor_log_prob=log_mu,
        advantages=torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]),
        response_mask=mask,
        loss_agg_mode=mode,
        topk_divergence=topk,
        batch_info={"loss_scale_factor": 3} if mode.endswith("-norm") else None,
    )
    loss.backward()
    return loss, log_pi.grad, stats


def finite_stats(stats):
    """Every statistic is finite, but the means over masked tokens, which are NaN by definition when none is."""
    return all(math.isfinite(v) for k, v in stats.items() if not (k.startswith("masked_") and math.isnan(v)))


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("name", mask_names())
@pytest.mark.parametrize("padded", [False, True], ids=["response token", "padding"])
def test_a_token_both_policies_give_probability_zero_keeps_every_mode_finite(name, mode, padded):
    """log mu = log pi = -inf on one token (an impossible or padded token): the loss, its gradient and the step's
    statistics stay finite in every mode and aggregation, the token gets no gradient, and every other token's gradient
    is the one it has when that token is an ordinary one. (verl's own vanilla gives a NaN loss here.)"""
    log_pi = [[-0.5, -1.2, -0.1], [-0.7, -2.0, -0.3]]
    log_mu = [[-0.6, -1.0, -0.2], [-0.5, -2.2, -0.4]]
    log_pi[0][0] = log_mu[0][0]  # an unmoved token (ratio 1), as the impossible one is (sequence means count it)
    _, reference, _ = every_rule_loss(name, log_pi, log_mu, mode, padded)
    log_pi[0][0] = log_mu[0][0] = -math.inf
    loss, grad, stats = every_rule_loss(name, log_pi, log_mu, mode, padded)
    assert math.isfinite(loss.item()) and torch.isfinite(grad).all() and finite_stats(stats)
    assert grad[0, 0] == 0
    others = torch.ones(2, 3, dtype=torch.bool)
    others[0, 0] = False
    assert torch.equal(grad[others], reference[others])


@pytest.mark.parametrize("name", [n for n in mask_names() if get_mask(n).needs_topk])
@pytest.mark.parametrize("bad", [-math.inf, math.nan], ids=["-inf", "nan"])
def test_non_finite_entries_in_mus_top_k_count_as_no_mass(name, bad):
    """-inf or NaN among mu's top-K log-probs (an engine's unfilled slot): the divergence, loss, gradient and
    statistics stay finite, and the divergence is the one with that entry's mass at zero."""
    log_pi = [[-0.5, -1.2, -0.1], [-0.7, -2.0, -0.3]]
    log_mu = [[-0.6, -1.0, -0.2], [-0.5, -2.2, -0.4]]
    mu_topk = torch.tensor(log_mu)[..., None].expand(2, 3, 3).clone()
    mu_topk[..., 1:] = -3.0
    zero_mass = mu_topk.clone()
    zero_mass[0, :, 2] = -1e30  # as good as no mass
    mu_topk[0, :, 2] = bad
    loss, grad, stats = every_rule_loss(name, log_pi, log_mu, "token-mean", False, mu_topk)
    assert math.isfinite(loss.item()) and torch.isfinite(grad).all() and finite_stats(stats)
    kind = get_mask(name).topk_kind
    pi_kept = torch.tensor(log_pi)[..., None].expand(2, 3, 3)
    got = divergence.topk_divergence(mu_topk, pi_kept, kind)
    assert torch.isfinite(got).all() and torch.equal(got, divergence.topk_divergence(zero_mass, pi_kept, kind))
