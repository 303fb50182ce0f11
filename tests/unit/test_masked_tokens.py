"""Counting the ids of masked tokens per advantage sign (App. D)."""

import torch

from dppo_bench.methods.masked_tokens import MaskedTokenCounts, top_tokens


def test_counts_by_advantage_sign_and_only_masked_tokens():
    ids = torch.tensor([[5, 7, 5, 9], [7, 7, 3, 5]])
    masked = torch.tensor([[True, True, True, False], [True, True, False, True]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 0.0]])
    counts = MaskedTokenCounts()
    counts.add(ids, masked, adv)
    counts.add(ids[:1], masked[:1], adv[:1])  # a second mini-batch accumulates
    assert counts.as_record() == {"pos": {"5": 4, "7": 2}, "neg": {"7": 2}}  # A = 0 is neither side


def test_top_tokens_sums_steps_and_breaks_ties_by_id():
    records = [{"pos": {"5": 2, "9": 1}, "neg": {}}, {"pos": {"9": 1, "2": 2}, "neg": {"4": 1}}]
    assert top_tokens(records, "pos", 2) == [(2, 2), (5, 2)]
    assert top_tokens(records, "pos", 10) == [(2, 2), (5, 2), (9, 2)]
    assert top_tokens(records, "neg", 10) == [(4, 1)]
