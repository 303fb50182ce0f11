"""mu's kept set through verl's agent loop: aligned like rollout_log_probs, then into the batch.

Runs verl 0.9.1's own ``SingleTurnAgentLoop.run`` (patched on import) with a fake server
client and a Continuous Token builder, then ``AgentLoopOutput.as_dict`` and verl's
``list_of_dict_to_tensordict``, the two steps the v1 agent-loop worker uses to fill
TransferQueue.
"""

import asyncio
import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.trainer.ppo import padding_utils
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult
from verl.workers.rollout.replica import TokenOutput

from dppo_bench.divergence import LOG_FLOOR
from dppo_bench.verl_plugin.topk.agent_loop import align_to_response
from dppo_bench.verl_plugin.topk.fields import RAW_KEY, TOPK_IDS, TOPK_LOGPROBS
from dppo_bench.verl_plugin.topk.hooks import original_of

K = 3
PROMPT = [5, 6, 7]
BOUNDARY = 99  # a token the builder inserts itself (mask 0, no log-prob)


def raw_rows(tokens):
    n = len(tokens)
    ids = (np.arange(n * K, dtype=np.int32).reshape(n, K) + 10) * 10
    ids[:, 0] = tokens  # the sampled token is in its kept set
    return {
        "token_ids": np.asarray(tokens, np.int64),
        "ids": ids,
        "logprobs": -np.arange(1, n * K + 1, dtype=np.float32).reshape(n, K) / 4,
    }


class Builder(ContinuousTokenBuilder):
    """verl's base builder; optionally inserts a boundary token before the assistant tokens."""

    def __init__(self, insert: bool):
        super().__init__(tokenizer=None)
        self.insert = insert

    def build_initial_tokens(self, messages, **kwargs):
        return list(PROMPT)

    def merge_assistant_tokens(self, runtime_token_ids, assistant_token_ids):
        if not self.insert:
            return super().merge_assistant_tokens(runtime_token_ids, assistant_token_ids)
        return MergeResult(
            token_ids=list(runtime_token_ids) + [BOUNDARY] + list(assistant_token_ids),
            appended_token_count=len(assistant_token_ids),
            kind="assistant",
            inserted_token_ids=[BOUNDARY],
        )


class Server:
    def __init__(self, output: TokenOutput):
        self.output = output

    async def generate(self, **kwargs):
        return self.output


def agent_loop(output: TokenOutput, *, k=K, insert=False, response_length=8) -> SingleTurnAgentLoop:
    loop = object.__new__(SingleTurnAgentLoop)  # the attributes run() reads, without a tokenizer
    custom = None if k is None else {"dppo_topk_k": k}
    loop.rollout_config = OmegaConf.create({"prompt_length": 16, "response_length": response_length, "custom": custom})
    loop.prompt_length, loop.response_length = 16, response_length
    loop.server_manager, loop.processor = Server(output), None
    loop.mm_processor_kwargs, loop.continuous_token_builder = {}, Builder(insert)
    return loop


def run(loop: SingleTurnAgentLoop) -> AgentLoopOutput:
    async def go():
        loop.loop = asyncio.get_running_loop()
        return await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=[{"role": "user", "content": "x"}])

    return asyncio.run(go())


def token_output(tokens, raw=True):
    extra = {"global_steps": 1, RAW_KEY: raw_rows(tokens)} if raw else {"global_steps": 1}
    return TokenOutput(token_ids=tokens, log_probs=[-0.25 * (i + 1) for i in range(len(tokens))], extra_fields=extra)


def test_rows_follow_the_generated_tokens_and_the_inserted_one_gets_filler():
    tokens = [11, 12, 13, 14]
    out = run(agent_loop(token_output(tokens), insert=True))
    assert out.response_ids == [BOUNDARY, *tokens] and out.response_mask == [0, 1, 1, 1, 1]
    ids, logprobs = out.extra_fields[TOPK_IDS], out.extra_fields[TOPK_LOGPROBS]
    raw = raw_rows(tokens)
    assert ids.shape == (5, K) and RAW_KEY not in out.extra_fields
    assert (ids[0] == 0).all() and (logprobs[0] == LOG_FLOOR).all()
    np.testing.assert_array_equal(ids[1:], raw["ids"])
    np.testing.assert_array_equal(logprobs[1:], raw["logprobs"])
    assert out.response_logprobs == [0.0, -0.25, -0.5, -0.75, -1.0]  # verl's own alignment, same positions


def test_rows_are_truncated_with_the_response():
    tokens = [21, 22, 23, 24, 25]
    out = run(agent_loop(token_output(tokens), response_length=3))
    assert out.response_ids == tokens[:3]
    np.testing.assert_array_equal(out.extra_fields[TOPK_IDS], raw_rows(tokens)["ids"][:3])


def test_into_the_batch_like_rollout_log_probs():
    outs = [run(agent_loop(token_output(t))) for t in ([31, 32], [41, 42, 43])]
    fields = [o.as_dict() for o in outs]
    assert fields[0][TOPK_IDS].dtype == torch.int32 and fields[0][TOPK_LOGPROBS].dtype == torch.float32
    assert TOPK_IDS not in fields[0]["extra_fields"]
    batch = list_of_dict_to_tensordict(fields)  # what agent_loop_tq puts in TransferQueue
    for key in (TOPK_IDS, TOPK_LOGPROBS, "rollout_log_probs", "responses"):
        assert batch[key].is_nested, key
    assert batch[TOPK_IDS].offsets().tolist() == batch["rollout_log_probs"].offsets().tolist() == [0, 2, 5]
    assert batch[TOPK_IDS].values()[2:].tolist() == raw_rows([41, 42, 43])["ids"].tolist()


def test_without_k_the_loop_is_verls():
    out = run(agent_loop(token_output([1, 2], raw=False), k=None))
    assert TOPK_IDS not in out.extra_fields and TOPK_IDS not in out.as_dict()


def test_missing_rows_fail_loudly():
    with pytest.raises(RuntimeError, match="no top-K log-probs"):
        run(agent_loop(token_output([1, 2], raw=False)))


def test_an_empty_response_gets_empty_rows():
    out = run(agent_loop(TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields={})))
    assert out.extra_fields[TOPK_IDS].shape == (0, K)


def test_rows_for_other_tokens_are_refused():
    raw = raw_rows([1, 2, 3])
    with pytest.raises(ValueError, match="not the tokens vLLM returned"):
        align_to_response(raw, response_ids=[1, 9, 3], response_mask=[1, 1, 1])


def test_an_agent_loop_that_does_not_align_is_refused():
    out = AgentLoopOutput(
        prompt_ids=[1],
        response_ids=[2],
        response_mask=[1],
        metrics=AgentLoopMetrics(),
        extra_fields={RAW_KEY: raw_rows([2])},
    )
    with pytest.raises(RuntimeError, match="single_turn_agent"):
        out.as_dict()


def test_padding_samples_get_rows_for_their_one_token_response():
    source = {
        "prompts": torch.tensor([1, 2]),
        "responses": torch.tensor([3, 4, 5]),
        "position_ids": torch.arange(5),
        TOPK_IDS: torch.ones(3, K, dtype=torch.int32),
        TOPK_LOGPROBS: torch.zeros(3, K),
    }
    sample, _ = padding_utils.construct_minimal_padding_template(source, {"seq_len": 5}, eos_token_id=0)
    assert sample[TOPK_IDS].shape == (1, K) == sample[TOPK_LOGPROBS].shape
    assert sample[TOPK_IDS].dtype == torch.int32 and (sample[TOPK_LOGPROBS] == LOG_FLOOR).all()
    assert sample["responses"].shape == (1,)


def test_the_patches_are_in_place():
    for fn in (SingleTurnAgentLoop.run, AgentLoopOutput.as_dict, padding_utils.construct_minimal_padding_template):
        assert hasattr(fn, "__dppo_bench_patched__"), fn
    assert isinstance(original_of(SingleTurnAgentLoop.run), types.FunctionType)
