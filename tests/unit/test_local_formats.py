"""The rollout engine's formats: closed-form quantisation values, which tensors take the format, and the order of the
mismatch they cause at equal parameters."""

import pytest
import torch
from local_fixtures import TINY_ARCH

from dppo_bench.config import RolloutFormat
from dppo_bench.local.formats import (
    build_engine_model,
    engine_weights,
    fp8_e4m3,
    load_weights,
    quantize_weight,
    symmetric_int,
)
from dppo_bench.local.model import build_model
from dppo_bench.local.tokenizer import build_tokenizer


def test_int4_and_int8_round_to_a_per_row_grid():
    w = torch.tensor([[0.7, 0.26, -0.14, 0.04], [-1.4, 0.45, 0.0, 0.31]])
    # int4: scale = row amax / 7 (0.1 and 0.2), values rounded to integers in [-7, 7]
    expected = torch.tensor([[0.7, 0.3, -0.1, 0.0], [-1.4, 0.4, 0.0, 0.4]])
    torch.testing.assert_close(symmetric_int(w, 7), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(quantize_weight(w, "int4_channel"), expected, atol=1e-6, rtol=0)
    # int8: scale = amax / 127 = 0.01
    w8 = torch.tensor([[1.27, 0.5, -0.013, 0.0046]])
    torch.testing.assert_close(quantize_weight(w8, "int8_channel"), torch.tensor([[1.27, 0.5, -0.01, 0.0]]))
    assert torch.equal(symmetric_int(torch.zeros(2, 3), 7), torch.zeros(2, 3))  # an all-zero row stays zero


def test_fp8_e4m3_keeps_three_mantissa_bits_under_an_amax_scale():
    w = torch.tensor([[448.0, 17.2], [0.3, -101.0]])
    # scale 1 (amax 448): 17.2 -> 18 (step 2 in [16, 32)), 0.3 -> 0.3125 (step 1/32 in [1/4, 1/2)), -101 -> -104
    expected = torch.tensor([[448.0, 18.0], [0.3125, -104.0]])
    assert torch.equal(fp8_e4m3(w), expected) and torch.equal(quantize_weight(w, "fp8_e4m3_tensor"), expected)
    assert torch.equal(fp8_e4m3(w / 8), expected / 8)  # the scale follows the tensor's amax
    # per channel: each row has its own amax scale, so a small row keeps its relative precision
    rows = quantize_weight(w, "fp8_e4m3_channel")
    for i in range(2):
        torch.testing.assert_close(rows[i], fp8_e4m3(w[i : i + 1])[0], atol=0, rtol=0)
    assert rows[1, 0] != expected[1, 0]  # 0.3 in a row of amax 101 rounds on a finer grid than in one of 448


def test_bf16_and_fp32_weights():
    w = torch.tensor([[1.0 + 2**-10, 3.0]])
    assert torch.equal(quantize_weight(w, "bf16"), torch.tensor([[1.0, 3.0]]))
    assert torch.equal(quantize_weight(w, "fp32"), w)


def test_the_format_reaches_linear_layers_and_the_head_only_when_asked():
    tok = build_tokenizer()
    policy = build_model(TINY_ARCH, tok, seed=0)
    params = dict(policy.named_parameters())
    linear, embed, norm = "model.layers.0.mlp.up_proj.weight", "model.embed_tokens.weight", "model.norm.weight"
    with torch.no_grad():
        params[norm].add_(1e-3)  # a norm weight that bf16 cannot hold exactly
    for head in (False, True):
        fmt = RolloutFormat(weights="int4_channel", head=head)
        engine = build_engine_model(policy, fmt)
        load_weights(engine, policy, fmt)
        mine = dict(engine.named_parameters())
        assert torch.equal(mine[linear], symmetric_int(params[linear], 7))
        assert torch.equal(mine[norm], params[norm].to(torch.bfloat16).float())
        head_value = symmetric_int(params[embed], 7) if head else params[embed].to(torch.bfloat16).float()
        assert torch.equal(mine[embed], head_value)
        assert engine.lm_head.weight is mine[embed]  # still tied in the engine's copy
    fp32 = RolloutFormat(weights="fp32")
    assert all(engine_weights(n, p, fp32) is p for n, p in params.items())


def test_fp8_activations_quantise_the_inputs_of_linear_layers():
    tok = build_tokenizer()
    policy = build_model(TINY_ARCH, tok, seed=0).eval()
    ids = torch.tensor([[1, 5, 7, 9, 11]])
    seen = []
    fmt = RolloutFormat(weights="fp8_e4m3_tensor", activations="fp8_e4m3")
    engine = build_engine_model(policy, fmt)
    load_weights(engine, policy, fmt)
    layer = engine.model.layers[0].mlp.down_proj
    layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))  # runs after the fp8 hook
    with torch.no_grad():
        engine(input_ids=ids)
    assert torch.equal(seen[0], fp8_e4m3(seen[0]))  # what reached the layer is already on the fp8 grid


@pytest.mark.parametrize("compute", ["fp32", "bf16"])
def test_compute_dtype(compute):
    policy = build_model(TINY_ARCH, build_tokenizer(), seed=0)
    engine = build_engine_model(policy, RolloutFormat(weights="bf16", compute=compute))
    dtype = torch.bfloat16 if compute == "bf16" else torch.float32
    assert {p.dtype for p in engine.parameters()} == {dtype}
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the trainer's copy is untouched
