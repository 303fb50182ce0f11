"""verl's CPU support (dppo_bench.verl_plugin.cpu, .vllm_cpu) and the Ray serialisation of everything we patch.

Each check runs in a fresh interpreter: the CPU support changes process-wide state (verl's platform, the
metadata finders), which must not leak into the other tests, and is switched on by the environment as in a
Ray worker.
"""

import importlib.util

import pytest
from test_topk_support import result_of, run_python

from dppo_bench.config import find_setting
from dppo_bench.verl_launch import run_config

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM's CPU build is not installed")
CPU = {"DPPO_BENCH_VERL_DEVICE": "cpu"}

# What Ray does with an actor class: `_make_actor` copies it, wraps every method for tracing (copying each
# method's attributes), and the class is then serialised by value with cloudpickle when the actor is created.
PICKLE_AS_RAY = r"""
import json, pickle, verl
from ray import cloudpickle
from ray.actor import _make_actor
from verl.workers.rollout.vllm_rollout import vllm_async_server as server
from verl.experimental.agent_loop import single_turn_agent_loop, agent_loop
from verl.workers.engine.fsdp import transformer_impl
from dppo_bench.verl_plugin.topk.hooks import is_patched

classes = {
    "vLLMHttpServer": server.vLLMHttpServer,
    "SingleTurnAgentLoop": single_turn_agent_loop.SingleTurnAgentLoop,
    "AgentLoopOutput": agent_loop.AgentLoopOutput,
    "FSDPEngineWithLMHead": transformer_impl.FSDPEngineWithLMHead,
}
out = {"patched": is_patched(server.vLLMHttpServer.generate) and is_patched(server.SamplingParams)}
for name, cls in classes.items():
    blob = cloudpickle.dumps(_make_actor(cls, {}).__ray_metadata__.modified_class)
    out[name] = pickle.loads(blob).__name__ == name
for name in ("SamplingParams", "extract_prompt_logprobs"):
    out[name] = callable(pickle.loads(cloudpickle.dumps(getattr(server, name))))
print("RESULT" + json.dumps(out))
"""


@needs_vllm
@pytest.mark.slow
def test_every_patched_class_serialises_as_ray_serialises_actor_classes():
    """The bug that stopped every GPU run at start: `cannot pickle '_contextvars.ContextVar'` when Ray created
    verl's vLLM server, because the wrapper carried verl's original whose globals reached our ContextVar."""
    out = result_of(run_python(PICKLE_AS_RAY, **CPU))
    assert out == {
        "patched": True,
        "vLLMHttpServer": True,
        "SingleTurnAgentLoop": True,
        "AgentLoopOutput": True,
        "FSDPEngineWithLMHead": True,
        "SamplingParams": True,
        "extract_prompt_logprobs": True,
    }


PLATFORM = r"""
import json, os, sys, importlib.metadata as md
import verl
from verl.utils import device
from verl.utils import distributed
import verl.workers.engine_workers as workers
from dppo_bench.verl_plugin.topk.hooks import is_patched

out = {
    "device": device.get_device_name(),
    "process_group": is_patched(distributed.initialize_global_process_group_ray)
    and workers.initialize_global_process_group_ray is distributed.initialize_global_process_group_ray,
}
if os.environ.get("DPPO_BENCH_VERL_DEVICE") == "cpu":
    torch_device = device.get_torch_device()
    free, total = torch_device.mem_get_info()
    out.update(
        backend=device.get_nccl_backend(),
        resource=device.get_resource_name(),
        memory=0 < free <= total and torch_device.memory_allocated() > 0,
        rng=torch_device.get_rng_state().numel() > 0,
        empty_cache=torch_device.empty_cache() is None,
    )
try:
    out["vllm_version"] = md.version("vllm")
except md.PackageNotFoundError:
    out["vllm_version"] = None
if os.environ.get("DPPO_BENCH_VERL_DEVICE") == "cpu":
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
    distributed.initialize_global_process_group_ray(timeout_second=60)
    import torch.distributed as dist
    out["initialized"] = dist.get_backend()
print("RESULT" + json.dumps(out))
"""


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.slow
def test_the_switch_gives_verl_a_cpu_platform_and_a_gloo_process_group():
    out = result_of(run_python(PLATFORM, _free_port(), **CPU))
    assert out["device"] == "cpu" and out["backend"] == "gloo" and out["resource"] == "GPU"
    assert out["memory"] and out["rng"] and out["empty_cache"] and out["process_group"]
    assert out["initialized"] == "gloo"  # verl asked for "cpu:gloo,cpu:gloo", which torch refuses
    if importlib.util.find_spec("vllm") is not None:
        from importlib.metadata import version

        # verl reads the distribution "vllm"; vLLM picks its CPU platform by the "+cpu" marker
        assert out["vllm_version"] == f"{version('vllm-cpu')}+cpu"


@pytest.mark.slow
def test_without_the_switch_verl_is_left_alone():
    out = result_of(run_python(PLATFORM, _free_port(), DPPO_BENCH_VERL_DEVICE=""))
    assert out["device"] == "cuda"  # verl's own fallback on a machine without a GPU, unchanged
    assert not out["process_group"] and out["vllm_version"] is None


RELOAD = r"""
import json, torch
from vllm.model_executor.layers import utils
from dppo_bench.verl_plugin import vllm_cpu

vllm_cpu.register()
vllm_cpu.register()  # vLLM loads general plugins once per process; twice changes nothing
layer = torch.nn.Linear(64, 32, bias=False)
weight = layer.weight
utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
x = torch.randn(3, 64)
before = layer.cpu_linear(x, layer.weight, None)
with torch.no_grad():
    layer.weight.copy_(torch.randn(32, 64))  # what verl's weight sync does, in place
after = layer.cpu_linear(x, layer.weight, None)
print("RESULT" + json.dumps({
    "kept": layer.weight is weight,
    "uses_new_weights": torch.allclose(after, x @ layer.weight.T, atol=1e-5) and not torch.allclose(before, after),
}))
"""


@needs_vllm
@pytest.mark.slow
def test_vllm_keeps_the_weights_verl_replaces_after_every_step():
    assert result_of(run_python(RELOAD, **CPU)) == {"kept": True, "uses_new_weights": True}


def test_cpu_overrides_and_environment_only_for_cpu_settings():
    cpu, gpu = find_setting("tiny_verl"), find_setting("sanity_r1d_1p5b")
    assert run_config.device_env(gpu) == {} and run_config.cpu_overrides(gpu) == []
    env = run_config.device_env(cpu)
    assert env[run_config.CPU_SWITCH] == "cpu" and env["VERL_ENGINE_DEVICE"] == "cuda"
    assert all(isinstance(v, str) for v in env.values())
    overrides = run_config.cpu_overrides(cpu)
    assert "actor_rollout_ref.actor.strategy=fsdp2" in overrides
    assert "+ray_kwargs.ray_init.num_gpus=1" in overrides
