"""Edges of the shared surrogate: a response token of probability 0, and a batch without response tokens."""

import math

import pytest
import torch

from dppo_bench.methods import get_mask, surrogate_loss
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
