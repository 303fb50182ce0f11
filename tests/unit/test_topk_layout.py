"""mu's per-response-token rows -> the packed sequence layout of the logits, and Ulysses slicing."""

import pytest
import torch
from tensordict import TensorDict
from verl.utils import ulysses
from verl.workers.utils.padding import no_padding_2_padding

from dppo_bench.divergence import LOG_FLOOR
from dppo_bench.verl_plugin.topk.fields import TOPK_IDS, TOPK_LOGPROBS
from dppo_bench.verl_plugin.topk.layout import (
    packed_kept_set,
    response_rows,
    rows_to_sequence,
    sequence_parallel_slice,
)

PROMPTS, RESPONSES, K = [3, 1, 2], [2, 3, 0], 2


def nested(rows_per_sample):
    return torch.nested.as_nested_tensor(rows_per_sample, layout=torch.jagged)


def micro_batch():
    """Three samples like the v1 trainer's: nested prompts/responses/input_ids and kept-set rows."""
    ids = [torch.arange(n * K, dtype=torch.int32).reshape(n, K) + 100 * (i + 1) for i, n in enumerate(RESPONSES)]
    lps = [-(torch.arange(n * K, dtype=torch.float32).reshape(n, K) + 1) / 10 for n in RESPONSES]
    data = TensorDict(
        {
            "prompts": nested([torch.zeros(p, dtype=torch.long) for p in PROMPTS]),
            "responses": nested([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
            "input_ids": nested(
                [torch.zeros(p + r, dtype=torch.long) for p, r in zip(PROMPTS, RESPONSES, strict=True)]
            ),
            TOPK_IDS: nested(ids),
            TOPK_LOGPROBS: nested(lps),
        },
        batch_size=[3],
    )
    return data, ids, lps


def test_response_token_j_is_scored_at_row_p_minus_1_plus_j():
    rows = torch.tensor([[1], [2], [3], [4], [5]])
    out = rows_to_sequence(rows, torch.tensor(PROMPTS), torch.tensor(RESPONSES), fill=-1)
    # sample 0: 3 prompt + 2 response -> rows 2, 3; sample 1 starts at 5: 1 + 3 -> rows 5, 6, 7; sample 2: none
    assert out.squeeze(-1).tolist() == [-1, -1, 1, 2, -1, 3, 4, 5, -1, -1, -1]


def test_packed_rows_come_back_through_verls_own_response_slicing():
    data, ids, lps = micro_batch()
    packed_ids, packed_lps = packed_kept_set(data)
    assert packed_ids.shape == (sum(PROMPTS) + sum(RESPONSES), K) and packed_ids.dtype == torch.long
    back_ids = no_padding_2_padding(packed_ids, data)  # what ppo_loss does to log_probs
    back_lps = no_padding_2_padding(packed_lps, data)
    for i, n in enumerate(RESPONSES):
        assert torch.equal(back_ids[i, :n], ids[i].long())
        assert torch.equal(back_lps[i, :n], lps[i])
    filler = torch.ones(packed_ids.shape[0], dtype=torch.bool)
    filler[[2, 3, 5, 6, 7]] = False
    assert (packed_ids[filler] == 0).all() and (packed_lps[filler] == LOG_FLOOR).all()


def test_dense_right_padded_rows_are_accepted():
    dense = torch.arange(3 * 3 * K).reshape(3, 3, K)
    rows = response_rows(dense, torch.tensor(RESPONSES), "x")
    assert torch.equal(rows, torch.cat([dense[0, :2], dense[1, :3]]))


def test_misaligned_rows_name_the_field():
    data, ids, lps = micro_batch()
    data[TOPK_IDS] = nested([torch.zeros(n + 1, K, dtype=torch.int32) for n in RESPONSES])
    with pytest.raises(ValueError, match="rollout_topk_ids has \\[3, 4, 1\\] rows per sample"):
        packed_kept_set(data)


def test_a_sample_without_prompt_is_refused():
    with pytest.raises(ValueError, match="prompt token"):
        rows_to_sequence(torch.zeros(2, 1), torch.tensor([0]), torch.tensor([2]), fill=0)


@pytest.mark.parametrize("sp_size", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [7, 8, 12])
def test_sequence_parallel_slice_follows_verls_ulysses_rule(monkeypatch, sp_size, length):
    rows = torch.arange(length * 2).reshape(length, 2) + 1
    monkeypatch.setattr(ulysses.dist, "get_world_size", lambda group=None: sp_size)
    monkeypatch.setattr(ulysses, "get_ulysses_sequence_parallel_group", lambda: None)
    for rank in range(sp_size):
        monkeypatch.setattr(ulysses, "get_ulysses_sequence_parallel_rank", lambda group=None, r=rank: r)
        for col in range(2):  # verl slices (1, nnz) token rows; do it per column
            theirs, _, _ = ulysses.ulysses_pad_and_slice_inputs(rows[:, col][None], sp_size=sp_size)
            ours = sequence_parallel_slice(rows, sp_size, rank)[:, col]
            assert torch.equal(ours, theirs[0])
    shards = torch.cat([sequence_parallel_slice(rows, sp_size, r) for r in range(sp_size)])
    assert torch.equal(shards[:length], rows) and (shards[length:] == 0).all()
