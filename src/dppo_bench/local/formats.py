"""Numeric formats of real inference engines, as fake quantisation (quantise, then dequantise) of a rollout copy.

A low-precision engine keeps the trainer's weights in a narrower format and computes with them; the distribution it
samples from, mu, then differs from the trainer's pi at equal parameters. Rounding the fp32 master weights through
the format and back, into the engine's own copy of the policy, reproduces exactly the values such an engine
multiplies with (the kernels dequantise the same way), so mu is that engine's distribution up to the order of its
sums. The formats (``local.rollout`` of a setting):

- weights: ``bf16``; ``fp8_e4m3_tensor`` / ``fp8_e4m3_channel`` (torch.float8_e4m3fn with one scale per tensor or
  per output channel, amax / 448, as vLLM's fp8 checkpoints); ``int8_channel`` / ``int4_channel`` (symmetric
  integers with one scale per output channel, amax / 127 or amax / 7, as W8A16 / W4A16 kernels without groups).
  The linear layers take the format; the tied embedding and output head take it only with ``head: true`` (engines
  usually keep the head in the model dtype), and everything else (norms) is held in bf16;
- activations: ``fp8_e4m3``, the input of every quantised linear layer scaled dynamically per tensor (W8A8);
- compute: ``bf16``, the whole copy cast to bf16 (its matmuls and its KV cache);
- logit noise (in :mod:`dppo_bench.local.rollout`): Gaussian noise on the logits, a stand-in for any other error.
"""

from __future__ import annotations

import torch

from dppo_bench.config import RolloutFormat

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
INT_MAX = {"int8_channel": 127, "int4_channel": 7}


def _scale(w: torch.Tensor, per_channel: bool, top: float) -> torch.Tensor:
    """amax / top, per output channel (row) or for the whole tensor; never 0 (an all-zero row stays zero)."""
    amax = w.abs().amax(dim=-1, keepdim=True) if per_channel else w.abs().amax()
    return (amax / top).clamp(min=torch.finfo(torch.float32).tiny)


def fp8_e4m3(x: torch.Tensor, per_channel: bool = False) -> torch.Tensor:
    """``x`` through float8_e4m3fn with an amax scale, back in fp32."""
    x = x.float()
    scale = _scale(x, per_channel, FP8_MAX)
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).float() * scale


def symmetric_int(x: torch.Tensor, top: int) -> torch.Tensor:
    """``x`` rounded to integers in [-top, top] times one scale per output channel, back in fp32."""
    x = x.float()
    scale = _scale(x, True, top)
    return torch.round(x / scale).clamp(-top, top) * scale


def quantize_weight(w: torch.Tensor, weights: str) -> torch.Tensor:
    """A weight matrix (out, in) as the format ``weights`` stores it, dequantised to fp32."""
    if weights == "fp32":
        return w.float()
    if weights == "bf16":
        return w.to(torch.bfloat16).float()
    if weights.startswith("fp8_e4m3"):
        return fp8_e4m3(w, per_channel=weights.endswith("_channel"))
    return symmetric_int(w, INT_MAX[weights])


def engine_weights(name: str, w: torch.Tensor, fmt: RolloutFormat) -> torch.Tensor:
    """The value the engine holds for the policy's parameter ``name``."""
    if fmt.weights == "fp32":
        return w
    is_head = "embed_tokens" in name or "lm_head" in name  # tied: one matrix
    if w.dim() == 2 and (fmt.head or not is_head):
        return quantize_weight(w, fmt.weights)
    return w.to(torch.bfloat16).float()  # the model dtype of the engine's unquantised tensors


def linear_layers(model: torch.nn.Module, head: bool) -> list[torch.nn.Linear]:
    """The decoder's linear layers, and the output head with ``head``."""
    modules = model.named_modules()
    return [m for name, m in modules if isinstance(m, torch.nn.Linear) and (head or "lm_head" not in name)]


def fp8_input_hook(_module: torch.nn.Module, args: tuple) -> tuple:
    """A forward pre-hook: the layer's input through fp8 e4m3 with a dynamic per-tensor scale (W8A8)."""
    x = args[0]
    return (fp8_e4m3(x).to(x.dtype), *args[1:])


def build_engine_model(policy: torch.nn.Module, fmt: RolloutFormat) -> torch.nn.Module:
    """The engine's copy of ``policy`` in the format's compute dtype, with its activation hooks; its weights are
    loaded by :func:`load_weights`."""
    import copy

    model = copy.deepcopy(policy).eval()
    model.to(torch.bfloat16 if fmt.compute == "bf16" else torch.float32)
    if fmt.activations == "fp8_e4m3":
        for layer in linear_layers(model, fmt.head):
            layer.register_forward_pre_hook(fp8_input_hook)
    return model


@torch.no_grad()
def load_weights(engine: torch.nn.Module, policy: torch.nn.Module, fmt: RolloutFormat) -> None:
    """Copy the trainer's current weights into the engine through the format (a weight sync)."""
    theirs = dict(policy.named_parameters())
    for name, dst in engine.named_parameters():
        dst.copy_(engine_weights(name, theirs[name], fmt))
