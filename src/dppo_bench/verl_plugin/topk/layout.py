"""Moving mu's per-response-token rows into the layout of the trainer's logits.

The batch carries the kept set like ``rollout_log_probs``: one row per response token. The
engines compute logits over whole packed sequences (prompt + response, no padding), where the
logits at sequence position t predict token t + 1. So response token j of a sample with a
P-token prompt is scored by the logits at position P - 1 + j of that sample; every other row
(prompt positions, the last token) is filler the loss never reads.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from dppo_bench.divergence import LOG_FLOOR
from dppo_bench.verl_plugin.topk.fields import TOPK_IDS, TOPK_LOGPROBS


def sequence_lengths(data: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt_lens, response_lens) of a micro-batch, read as verl's ``no_padding_2_padding`` does."""
    prompts, responses = data["prompts"], data["responses"]
    if prompts.is_nested:
        return prompts.offsets().diff(), responses.offsets().diff()
    attention_mask = data["attention_mask"]
    width = prompts.shape[1]
    return attention_mask[:, :width].sum(dim=1), attention_mask[:, width:].sum(dim=1)


def response_rows(tensor: torch.Tensor, response_lens: torch.Tensor, name: str) -> torch.Tensor:
    """Rows of every valid response token, concatenated over samples: (sum of lengths, K).

    Accepts the nested (jagged) layout of the v1 trainer and a dense right-padded one.
    """
    if tensor.is_nested:
        lengths = tensor.offsets().diff().to(response_lens.device)
        if not torch.equal(lengths, response_lens):
            raise ValueError(
                f"{name} has {lengths.tolist()} rows per sample but the responses have {response_lens.tolist()} "
                "tokens: the top-K rows must be aligned like rollout_log_probs"
            )
        return tensor.values()
    keep = torch.arange(tensor.shape[1], device=tensor.device) < response_lens.to(tensor.device).unsqueeze(1)
    return tensor[keep]


def rows_to_sequence(
    rows: torch.Tensor, prompt_lens: torch.Tensor, response_lens: torch.Tensor, fill: float
) -> torch.Tensor:
    """Scatter response rows (sum R_i, K) to the packed sequence layout (sum (P_i + R_i), K)."""
    if bool((prompt_lens < 1).any()):
        raise ValueError("every sample needs a prompt token: response token j is scored at row P - 1 + j")
    prompt_lens, response_lens = prompt_lens.to(rows.device), response_lens.to(rows.device)
    seq_lens = prompt_lens + response_lens
    seq_starts = torch.cumsum(seq_lens, 0) - seq_lens
    resp_starts = torch.cumsum(response_lens, 0) - response_lens
    shift = torch.repeat_interleave(seq_starts + prompt_lens - 1 - resp_starts, response_lens)
    dest = shift + torch.arange(rows.shape[0], device=rows.device)
    out = rows.new_full((int(seq_lens.sum()), rows.shape[-1]), fill)
    out[dest] = rows
    return out


def packed_kept_set(data: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """mu's kept ids (int64) and log-probs (float32) for every row of the packed sequences.

    Filler rows hold id 0 with log-prob ``LOG_FLOOR``: finite, and never read by the loss.
    """
    prompt_lens, response_lens = sequence_lengths(data)
    seq_lens = data["input_ids"].offsets().diff().to(prompt_lens.device)
    if not torch.equal(prompt_lens + response_lens, seq_lens):
        raise ValueError("prompt + response lengths differ from the packed input_ids lengths")
    ids = response_rows(data[TOPK_IDS], response_lens, TOPK_IDS).long()
    logprobs = response_rows(data[TOPK_LOGPROBS], response_lens, TOPK_LOGPROBS).float()
    return (
        rows_to_sequence(ids, prompt_lens, response_lens, fill=0),
        rows_to_sequence(logprobs, prompt_lens, response_lens, fill=LOG_FLOOR),
    )


def sequence_parallel_slice(rows: torch.Tensor, sp_size: int, sp_rank: int) -> torch.Tensor:
    """This rank's share of packed rows under Ulysses SP: pad to a multiple of sp_size, then split.

    The rule of verl's ``ulysses_pad_and_slice_inputs``; pad rows are zeros.
    """
    if sp_size <= 1:
        return rows
    pad = (sp_size - rows.shape[0] % sp_size) % sp_size
    if pad:
        rows = torch.cat([rows, rows.new_zeros((pad, *rows.shape[1:]))])
    part = rows.shape[0] // sp_size
    return rows[sp_rank * part : (sp_rank + 1) * part]
