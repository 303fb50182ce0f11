"""Carrying mu's kept set from the vLLM server to the training batch (verl 0.9.1, v1 trainer).

Patched:

* ``SingleTurnAgentLoop.run``: the server's per-generated-token rows (in the ``TokenOutput``'s
  ``extra_fields``) are aligned to the response exactly as verl aligns ``rollout_log_probs``.
  verl's Continuous Token merge gives model-generated tokens mask 1 and the tokens it inserts
  itself mask 0, in order, and then truncates to ``response_length``; so the i-th mask-1
  position is the i-th generated token. That is checked token for token, and other positions
  get filler rows.
* ``AgentLoopOutput.as_dict``: the aligned rows become the tensors ``rollout_topk_ids`` and
  ``rollout_topk_logprobs`` (response_len, K) next to ``rollout_log_probs``; the v1 agent-loop
  worker (``agent_loop_tq``) puts every key of that dict into TransferQueue, and the actor
  update receives them with the rest of the sample. Rows left unaligned (a loop other than the
  single-turn one) are an error, not silently dropped.
* ``padding_utils.construct_minimal_padding_template``: the no-op samples verl appends to make
  the batch divisible get kept-set rows matching their one-token response.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch

from dppo_bench.divergence import LOG_FLOOR
from dppo_bench.verl_plugin.topk.fields import RAW_KEY, TOPK_IDS, TOPK_LOGPROBS, rollout_topk_k
from dppo_bench.verl_plugin.topk.hooks import wrap


def filler_rows(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of positions that are not model-generated: id 0, log-prob ``LOG_FLOOR``."""
    return np.zeros((n, k), np.int32), np.full((n, k), LOG_FLOOR, np.float32)


def align_to_response(raw: dict, response_ids: list[int], response_mask: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Response-aligned (ids, log-probs) from the server's per-generated-token rows."""
    k = raw["ids"].shape[1]
    generated = np.flatnonzero(np.asarray(response_mask, dtype=np.int64) == 1)
    if len(generated) > len(raw["token_ids"]) or not np.array_equal(
        np.asarray(response_ids, dtype=np.int64)[generated], raw["token_ids"][: len(generated)]
    ):
        raise ValueError(
            "top-K: the response's model-generated tokens are not the tokens vLLM returned top-K log-probs "
            "for; the agent loop changed them, which dppo-bench cannot align"
        )
    ids, logprobs = filler_rows(len(response_ids), k)
    ids[generated], logprobs[generated] = raw["ids"][: len(generated)], raw["logprobs"][: len(generated)]
    return ids, logprobs


def patch_single_turn(module: ModuleType) -> None:
    """Wrap ``SingleTurnAgentLoop.run`` of verl's single-turn agent loop module."""
    wrap(module.SingleTurnAgentLoop, "run", ("self", "sampling_params"), aligning_kept_set)


def patch_output(module: ModuleType) -> None:
    """Wrap ``AgentLoopOutput.as_dict`` of verl's agent loop module."""
    wrap(module.AgentLoopOutput, "as_dict", ("self",), with_kept_set_tensors)


def patch_padding_template(module: ModuleType) -> None:
    """Wrap ``construct_minimal_padding_template`` of verl's ``padding_utils``."""
    wrap(module, "construct_minimal_padding_template", ("source_td", "source_tag", "eos_token_id"), with_filler_rows)


def aligning_kept_set(original):
    async def run(self, sampling_params, *args, **kwargs):
        output = await original(self, sampling_params, *args, **kwargs)
        k = rollout_topk_k(self.rollout_config)
        raw = output.extra_fields.pop(RAW_KEY, None)
        if k is None:
            return output
        if raw is None:
            if any(output.response_mask):
                raise RuntimeError(
                    "top-K: the rollout returned no top-K log-probs although custom.dppo_topk_k is set; "
                    "partial-rollout clients (trainer.v1.trainer_mode=*_async) drop them"
                )
            ids, logprobs = filler_rows(len(output.response_ids), k)
        else:
            ids, logprobs = align_to_response(raw, output.response_ids, output.response_mask)
        output.extra_fields[TOPK_IDS], output.extra_fields[TOPK_LOGPROBS] = ids, logprobs
        return output

    return run


def with_kept_set_tensors(original):
    def as_dict(self):
        output = original(self)
        extra = output["extra_fields"]
        if RAW_KEY in extra:
            raise RuntimeError(
                "top-K: this agent loop returned top-K log-probs it did not align to the response; "
                "dppo-bench supports Top-K with the single_turn_agent loop only"
            )
        if TOPK_IDS in extra:
            output[TOPK_IDS] = torch.from_numpy(np.ascontiguousarray(extra.pop(TOPK_IDS)))
            output[TOPK_LOGPROBS] = torch.from_numpy(np.ascontiguousarray(extra.pop(TOPK_LOGPROBS)))
        return output

    return as_dict


def with_filler_rows(original):
    def construct_minimal_padding_template(source_td, source_tag, eos_token_id):
        sample, tag = original(source_td, source_tag, eos_token_id)
        if TOPK_IDS in sample:
            ids, logprobs = filler_rows(sample["responses"].shape[0], sample[TOPK_IDS].shape[-1])
            sample[TOPK_IDS], sample[TOPK_LOGPROBS] = torch.from_numpy(ids), torch.from_numpy(logprobs)
        return sample, tag

    return construct_minimal_padding_template
