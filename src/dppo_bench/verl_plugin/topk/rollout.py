"""mu's top-K log-probs from verl 0.9.1's vLLM server.

verl asks vLLM for the sampled token's log-prob only (``logprobs=0``). With Top-K on (K in
``actor_rollout_ref.rollout.custom.dppo_topk_k``), three names of
``verl.workers.rollout.vllm_rollout.vllm_async_server`` are patched, each used once, in
``vLLMHttpServer.generate``:

* ``vLLMHttpServer.generate``: reads K from the server's rollout config, checks it against
  vLLM's ``max_logprobs`` and marks the request (a context variable, so concurrent requests
  of one server never see each other's state);
* ``SamplingParams``: for a marked request, built with ``logprobs=K``: vLLM then returns, per
  generated token, its K most likely tokens plus the sampled one when it is not among them;
* ``extract_prompt_logprobs`` (called with the final ``RequestOutput`` and the request's
  ``extra_fields``): after verl's own work, converts the response's log-probs to the paper's
  kept set (:func:`kept_set_from_completion`) and stores it in ``extra_fields``, which reach
  the agent loop inside the ``TokenOutput``.

verl still reads the sampled token's log-prob from the same per-position dicts, so
``rollout_log_probs`` is unchanged. vLLM is imported by verl's module, never here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import numpy as np
import torch

from dppo_bench.divergence import kept_token_set
from dppo_bench.verl_plugin.contract import TOPK_K_KEY, VLLM_DEFAULT_MAX_LOGPROBS
from dppo_bench.verl_plugin.topk.fields import RAW_KEY, rollout_topk_k
from dppo_bench.verl_plugin.topk.hooks import wrap

# Reached only through the two functions below, never named in a wrapper: a wrapper serialised by value (Ray
# serialises actor classes) would take a ContextVar with it, and ContextVars cannot be pickled.
_REQUEST_K: ContextVar[int | None] = ContextVar("dppo_bench_topk_request", default=None)


def requested_k() -> int | None:
    """K of the Top-K request this context serves (None: not a Top-K request)."""
    return _REQUEST_K.get()


@contextlib.contextmanager
def requesting(k: int):
    """Mark the requests made in this context as Top-K requests with this K."""
    token = _REQUEST_K.set(k)
    try:
        yield
    finally:
        _REQUEST_K.reset(token)


def _ranked(position: Mapping[int, Any]) -> list[tuple[int, Any]]:
    """A position's (token id, Logprob) entries, most likely first (vLLM's rank, then log-prob)."""
    return sorted(
        position.items(),
        key=lambda item: (item[1].rank if item[1].rank is not None else float("inf"), -item[1].logprob),
    )


def kept_set_from_completion(token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]], k: int) -> dict:
    """The paper's kept set for every generated token of one vLLM ``CompletionOutput``.

    ``logprobs`` holds one ``{token_id: Logprob(logprob, rank, ...)}`` per generated token, as
    vLLM returns for ``SamplingParams(logprobs=K)``. Returns numpy arrays: ``token_ids`` (R,),
    ``ids`` int32 (R, K) and ``logprobs`` float32 (R, K), mu's top-K by rank with the sampled
    token replacing the K-th entry when it is not among them (``kept_token_set``).
    """
    if logprobs is None or len(logprobs) != len(token_ids):
        raise ValueError(
            f"top-K: vLLM returned log-probs for {0 if logprobs is None else len(logprobs)} of "
            f"{len(token_ids)} generated tokens"
        )
    n = len(token_ids)
    top_ids, top_lp, sampled_lp = np.zeros((n, k), np.int64), np.zeros((n, k), np.float32), np.zeros(n, np.float32)
    for row, (token, position) in enumerate(zip(token_ids, logprobs, strict=True)):
        ranked = _ranked(position)
        if len(ranked) < k or token not in position:
            raise ValueError(
                f"top-K: generated token {row} has {len(ranked)} log-probs (need {k} and the sampled token); "
                f"vLLM was not asked for logprobs={k}"
            )
        top_ids[row] = [token_id for token_id, _ in ranked[:k]]
        top_lp[row] = [entry.logprob for _, entry in ranked[:k]]
        sampled_lp[row] = position[token].logprob
    sampled = np.asarray(token_ids, dtype=np.int64)
    ids, lps = kept_token_set(
        torch.from_numpy(top_ids), torch.from_numpy(top_lp), torch.from_numpy(sampled), torch.from_numpy(sampled_lp)
    )
    return {"token_ids": sampled, "ids": ids.numpy().astype(np.int32), "logprobs": lps.numpy()}


def check_request(k: int, rollout_config: Mapping, sampling_params: Mapping) -> None:
    """Refuse a Top-K request vLLM would reject or verl could not use."""
    max_logprobs = (rollout_config.get("engine_kwargs") or {}).get("vllm", {}).get("max_logprobs")
    limit = VLLM_DEFAULT_MAX_LOGPROBS if max_logprobs is None else int(max_logprobs)
    if k > limit:
        raise ValueError(
            f"top-K: custom.{TOPK_K_KEY}={k} exceeds vLLM's max_logprobs={limit}; set "
            f"++actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs={k}"
        )
    if not sampling_params.get("logprobs"):
        raise ValueError("top-K: mu's log-probs are needed; set actor_rollout_ref.rollout.calculate_log_probs=True")


def patch_vllm_server(module: ModuleType) -> None:
    """Patch verl's vLLM server module (see the module docstring)."""
    wrap(module.vLLMHttpServer, "generate", ("self", "prompt_ids", "sampling_params", "request_id"), marking_requests)
    wrap(module, "SamplingParams", (), asking_for_top_k)
    wrap(module, "extract_prompt_logprobs", ("output", "num_prompt_logprobs", "result_dict"), recording_kept_set)


def marking_requests(original):
    async def generate(self, prompt_ids, sampling_params, request_id, *args, **kwargs):
        k = rollout_topk_k(self.config)
        if k is None:
            return await original(self, prompt_ids, sampling_params, request_id, *args, **kwargs)
        check_request(k, self.config, sampling_params)
        with requesting(k):
            return await original(self, prompt_ids, sampling_params, request_id, *args, **kwargs)

    return generate


def asking_for_top_k(sampling_params_cls):
    def sampling_params(*args, **kwargs):
        k = requested_k()
        if k is not None:
            kwargs["logprobs"] = k
        return sampling_params_cls(*args, **kwargs)

    return sampling_params


def recording_kept_set(original):
    def extract_prompt_logprobs(output, num_prompt_logprobs, result_dict):
        original(output=output, num_prompt_logprobs=num_prompt_logprobs, result_dict=result_dict)
        k = requested_k()
        if k is not None and output.outputs:
            completion = output.outputs[0]
            result_dict[RAW_KEY] = kept_set_from_completion(completion.token_ids, completion.logprobs, k)

    return extract_prompt_logprobs
