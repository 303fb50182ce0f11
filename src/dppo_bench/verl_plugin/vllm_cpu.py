"""vLLM's CPU build inside verl: weights that can be replaced after loading.

verl updates the rollout engine's weights in place after every training step (``load_weights`` on the live model).
vLLM's CPU build, once a model is loaded, hands each linear layer's weight to a oneDNN (or sgl) kernel that keeps
its own packed copy and drops the layer's parameter, so the next ``load_weights`` finds a parameter without a
weight loader, and a kept parameter (the tied embedding of the LM head) would be updated while the kernel keeps
computing with the old copy. With the CPU switch on, every layer computes with ``torch.nn.functional.linear`` on
its current parameter instead: a rollout then always uses the weights verl last sent.

Loaded in vLLM's own processes (the engine core and its workers import vLLM, not verl) through the
``vllm.general_plugins`` entry point declared in pyproject.toml; vLLM calls :func:`register` in each of them.
"""

from __future__ import annotations

import torch

from dppo_bench.verl_plugin.contract import cpu_requested
from dppo_bench.verl_plugin.topk.hooks import wrap


def reloadable(_original):
    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        layer.cpu_linear = _linear  # never a kernel holding its own copy of the weight; the parameter stays

    return dispatch_cpu_unquantized_gemm


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


def register() -> None:
    """vLLM's general-plugin hook (idempotent); a no-op unless the run is on the CPU."""
    if not cpu_requested():
        return
    from vllm.model_executor.layers import utils

    wrap(utils, "dispatch_cpu_unquantized_gemm", ("layer", "remove_weight"), reloadable)
