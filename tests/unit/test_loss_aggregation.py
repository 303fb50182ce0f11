"""Our aggregation of the per-token loss equals verl 0.9.1's ``agg_loss`` bit for bit, value and gradient."""

import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss

from dppo_bench.methods.aggregation import MODES, aggregate

NORMALISERS = [
    {},
    {"dp_size": 2, "batch_num_tokens": 37, "global_batch_size": 11},
    {"batch_num_tokens": 9, "global_batch_size": 3, "loss_scale_factor": 128},
    {"loss_scale_factor": 7.5},
]


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    per_token = torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = torch.rand(6, 9, generator=g) < 0.6
    mask[2] = False  # a fully masked sequence
    per_token[~mask & (torch.rand(6, 9, generator=g) < 0.3)] = float("nan")  # padding's garbage: as verl treats it
    return per_token, mask


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("info", NORMALISERS)
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_equals_verl(mode, info, mask_dtype):
    if info.get("dp_size", 1) > 1 and mode == "token-sum":
        info = {"dp_size": 2}
    per_token, mask = batch(0)
    mask = mask.to(mask_dtype)
    ours_in, verl_in = per_token.clone().requires_grad_(), per_token.clone().requires_grad_()
    ours, theirs = aggregate(ours_in, mask, mode, **info), agg_loss(verl_in, mask, mode, **info)
    exactly = {"rtol": 0, "atol": 0, "equal_nan": True}  # the token modes keep NaN out; the sequence modes do not
    torch.testing.assert_close(ours, theirs, **exactly)
    assert torch.isfinite(ours) == mode.startswith("token")
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, verl_in.grad, **exactly)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_several_ranks_need_the_global_normaliser(mode):
    per_token, mask = batch(1)
    with pytest.raises(ValueError, match="required when dp_size > 1"):
        aggregate(per_token, mask, mode, dp_size=2)


def test_an_unknown_mode_is_named():
    per_token, mask = batch(2)
    with pytest.raises(ValueError, match="'token-average'"):
        aggregate(per_token, mask, "token-average")
