"""mu's kept set from vLLM-shaped outputs, and verl's own vLLM server ``generate`` with the patch.

vLLM cannot be installed here. The conversion is tested on objects shaped like vLLM's
``CompletionOutput`` / ``Logprob``; the server test imports verl's real
``vllm_async_server`` in a fresh process with the ``vllm`` package stubbed, and runs verl's own
``generate`` against a fake engine that answers like vLLM does for ``SamplingParams(logprobs=K)``.
"""

import json
from dataclasses import dataclass

import numpy as np
import pytest
from test_topk_support import result_of, run_python

from dppo_bench.verl_plugin.topk.rollout import check_request, kept_set_from_completion


@dataclass
class Logprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class FlatPositions(list):
    """vLLM's FlatLogprobs is a sequence of per-position dicts too."""


def test_sampled_token_in_top_k_keeps_mus_top_k_by_rank():
    position = {9: Logprob(-2.0, 3), 3: Logprob(-0.5, 1), 7: Logprob(-1.0, 2)}  # dict order is not rank order
    out = kept_set_from_completion([7], [position], k=3)
    assert out["ids"].tolist() == [[3, 7, 9]] and out["ids"].dtype == np.int32
    np.testing.assert_array_equal(out["logprobs"], np.array([[-0.5, -1.0, -2.0]], np.float32))


def test_sampled_token_outside_top_k_replaces_the_kth_entry():
    # vLLM returns K + 1 entries: the top-K and the sampled token with its true rank
    position = {1: Logprob(-0.1, 1), 42: Logprob(-6.0, 10), 5: Logprob(-3.0, 3), 2: Logprob(-2.0, 2)}
    out = kept_set_from_completion([42], FlatPositions([position]), k=3)
    assert out["ids"].tolist() == [[1, 2, 42]]
    np.testing.assert_array_equal(out["logprobs"], np.array([[-0.1, -2.0, -6.0]], np.float32))
    assert out["token_ids"].tolist() == [42]


def test_ties_in_log_prob_follow_vllms_rank():
    position = {4: Logprob(-1.0, 2), 8: Logprob(-1.0, 1), 6: Logprob(-3.0, 3)}
    assert kept_set_from_completion([6], [position], k=2)["ids"].tolist() == [[8, 6]]


@pytest.mark.parametrize(
    "token_ids, positions, message",
    [
        ([1, 2], [{1: Logprob(-0.1, 1), 3: Logprob(-3, 2)}], "for 1 of 2 generated tokens"),
        ([1], None, "for 0 of 1"),
        ([1], [{1: Logprob(-0.1, 1)}], "has 1 log-probs \\(need 2"),
        ([5], [{1: Logprob(-0.1, 1), 3: Logprob(-3, 2)}], "and the sampled token"),
    ],
)
def test_incomplete_vllm_log_probs_are_refused(token_ids, positions, message):
    with pytest.raises(ValueError, match=message):
        kept_set_from_completion(token_ids, positions, k=2)


def test_requests_vllm_would_reject_are_refused_with_the_fix():
    check_request(20, {"engine_kwargs": {"vllm": {}}}, {"logprobs": True})
    check_request(32, {"engine_kwargs": {"vllm": {"max_logprobs": 32}}}, {"logprobs": True})
    with pytest.raises(ValueError, match=r"\+\+actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs=21"):
        check_request(21, {"engine_kwargs": {"vllm": {}}}, {"logprobs": True})
    with pytest.raises(ValueError, match="calculate_log_probs=True"):
        check_request(4, {"engine_kwargs": {}}, {"logprobs": False})


SERVER_CHECK = r"""
import asyncio, importlib.abc, importlib.machinery, importlib.metadata, json, sys, types
from dataclasses import dataclass, field
from unittest import mock

@dataclass
class SamplingParams:  # the fields verl's generate reads; vLLM's class takes these keywords
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    repetition_penalty: float = 1.0
    ignore_eos: bool = False

@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None

class Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "vllm" or name.startswith("vllm."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = Stub(spec.name)
        module.__path__ = []
        return module
    def exec_module(self, module):
        if module.__name__ == "vllm":
            module.SamplingParams, module.__version__ = SamplingParams, "0.24.0"

sys.meta_path.insert(0, StubFinder())
_version = importlib.metadata.version
importlib.metadata.version = lambda name: "0.24.0" if name == "vllm" else _version(name)

import torch
import verl  # loads the plugin: the patch is applied when verl imports the server module
import verl.workers.rollout.vllm_rollout.vllm_async_server as srv
from verl.workers.config import RolloutConfig

K, V = json.loads(sys.argv[1]), 12
g = torch.Generator().manual_seed(3)
MU = torch.log_softmax(torch.randn(5, V, generator=g) * 2, -1)  # mu at each of 5 steps
SAMPLED = [int(MU[0].argmax()), int(MU[1].argmin()), int(MU[2].argsort()[-2]), int(MU[3].argmin()), 4]

class Output:
    def __init__(self, **kw):
        self.__dict__.update(kw)

class Engine:
    def __init__(self):
        self.requested = []
    async def generate(self, prompt, sampling_params, request_id, lora_request, priority):
        self.requested.append(sampling_params.logprobs)
        n = sampling_params.logprobs
        positions = []
        for step, token in enumerate(SAMPLED):
            order = MU[step].argsort(descending=True).tolist()
            keep = order[: max(n, 0)] + ([] if token in order[: max(n, 0)] else [token])
            positions.append({t: Logprob(float(MU[step, t]), order.index(t) + 1) for t in keep})
        completion = Output(token_ids=list(SAMPLED), logprobs=positions, finish_reason="length")
        yield Output(outputs=[completion], prompt_logprobs=None, num_cached_tokens=0, kv_transfer_params=None)

server = object.__new__(srv.vLLMHttpServer)
custom = None if K is None else {"dppo_topk_k": K}
server.config = RolloutConfig(name="vllm", prompt_length=8, response_length=5, max_model_len=64, custom=custom)
server.model_config = types.SimpleNamespace(processor=None, lora_rank=0, lora={})
server.engine = Engine()
for attr, value in dict(_disaggregation_role="null", _pd_decode_peers=[], replica_rank=0, global_steps=7,
                        _admitting=0, _submission_paused=False).items():
    setattr(server, attr, value)
out = asyncio.run(server.generate(prompt_ids=[1, 2, 3], sampling_params={"temperature": 1.0, "logprobs": True},
                                  request_id="r0"))
raw = out.extra_fields.get("dppo_topk_raw")
print("RESULT" + json.dumps({
    "patched": hasattr(srv.vLLMHttpServer.generate, "__dppo_bench_patched__"),
    "requested": server.engine.requested,
    "token_ids": out.token_ids, "log_probs": out.log_probs,
    "mu": MU.tolist(), "sampled": SAMPLED,
    "raw": None if raw is None else {k: v.tolist() for k, v in raw.items()},
    "raw_dtypes": None if raw is None else {k: str(v.dtype) for k, v in raw.items()},
}))
"""


def run_server(k):
    return result_of(run_python(SERVER_CHECK, json.dumps(k), VERL_USE_EXTERNAL_PLUGINS="auto"))


@pytest.mark.slow
def test_verls_vllm_server_returns_mus_kept_set_per_generated_token():
    k = 3
    out = run_server(k)
    assert out["patched"] and out["requested"] == [k]  # vLLM was asked for the top-K
    mu, sampled = np.array(out["mu"], np.float32), out["sampled"]
    np.testing.assert_allclose(out["log_probs"], mu[np.arange(5), sampled], rtol=1e-6)  # verl's own field intact
    raw = out["raw"]
    assert raw["token_ids"] == sampled and out["raw_dtypes"]["ids"] == "int32"
    for step, token in enumerate(sampled):  # the paper code's rule, written out independently
        top = list(np.argsort(-mu[step], kind="stable")[:k])
        expected = top if token in top else top[:-1] + [token]
        assert raw["ids"][step] == expected, step
        np.testing.assert_allclose(raw["logprobs"][step], mu[step, expected], rtol=1e-6)
    assert sampled[1] not in np.argsort(-mu[1])[:k]  # the replacement case is exercised


@pytest.mark.slow
def test_verls_vllm_server_is_unchanged_without_k():
    out = run_server(None)
    assert out["patched"] and out["requested"] == [0] and out["raw"] is None
