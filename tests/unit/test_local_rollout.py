import pytest
import torch
from local_fixtures import TINY_ARCH

from dppo_bench.config import RolloutFormat
from dppo_bench.local.batching import prompt_ids
from dppo_bench.local.model import build_model, response_logits
from dppo_bench.local.rollout import RolloutEngine
from dppo_bench.local.tokenizer import build_tokenizer

FP32 = RolloutFormat(weights="fp32")


def fmt(weights: str, noise: float = 0.0, **kw) -> RolloutFormat:
    return RolloutFormat(weights=weights, logit_noise=noise, **kw)


@pytest.fixture(scope="module")
def setup():
    tok = build_tokenizer()
    model = build_model(TINY_ARCH, tok, seed=0).eval()
    prompts = [prompt_ids(tok, t) for t in ["1+2=", "13*4-2=", "7-7=", "2*2*2="] for _ in range(3)]
    return tok, model, prompts


def sample(engine, tok, prompts, seed=0, temperature=1.0):
    return engine.sample(
        prompts,
        max_new_tokens=12,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )


def trainer_logprobs(model, roll):
    ids = torch.cat([roll.prompt_ids, roll.response_ids], 1)
    attn = torch.cat([roll.prompt_mask, roll.response_mask], 1)
    with torch.no_grad():
        logp = torch.log_softmax(response_logits(model, ids, attn, roll.prompt_ids.shape[1]), -1)
    return logp.gather(-1, roll.response_ids[..., None]).squeeze(-1), logp


def test_fp32_engine_matches_the_trainer_and_records_mu(setup):
    tok, model, prompts = setup
    roll = sample(RolloutEngine(model, FP32, 4), tok, prompts)
    log_pi, logp = trainer_logprobs(model, roll)
    m = roll.response_mask
    torch.testing.assert_close(roll.mu_logprobs[m], log_pi[m], atol=2e-5, rtol=0)
    # the kept set holds the sampled token with its log-prob, and mu's top entries otherwise
    hit = roll.mu_topk_ids == roll.response_ids[..., None]
    assert hit[m].any(-1).all()
    torch.testing.assert_close(roll.mu_topk_logprobs[hit & m[..., None]], roll.mu_logprobs[m], atol=0, rtol=0)
    top = logp.topk(4, -1)
    torch.testing.assert_close(roll.mu_topk_logprobs[..., :3][m], top.values[..., :3][m], atol=2e-5, rtol=0)


def test_response_mask_stops_after_eos(setup):
    tok, model, prompts = setup
    roll = sample(RolloutEngine(model, FP32, 4), tok, prompts)
    for row, mask in zip(roll.response_ids, roll.response_mask, strict=True):
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any()
        eos = (row[:n] == tok.eos_token_id).nonzero()
        assert len(eos) == 0 or eos[0].item() == n - 1  # nothing sampled after the first eos


def test_seeded_determinism(setup):
    tok, model, prompts = setup
    engine = RolloutEngine(model, fmt("bf16", 0.2, head=True), 4)
    a, b, c = sample(engine, tok, prompts, 0), sample(engine, tok, prompts, 0), sample(engine, tok, prompts, 1)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.mu_logprobs, b.mu_logprobs)
    assert not torch.equal(a.response_ids, c.response_ids)


def mismatch(engine, setup):
    tok, model, prompts = setup
    roll = sample(engine, tok, prompts)
    log_pi, _ = trainer_logprobs(model, roll)
    m = roll.response_mask
    return (log_pi.exp() - roll.mu_logprobs.exp())[m].abs().mean().item()


def test_numeric_paths_order_the_mismatch(setup):
    _, model, _ = setup
    fp32 = mismatch(RolloutEngine(model, FP32, 4), setup)
    bf16 = mismatch(RolloutEngine(model, fmt("bf16", head=True, compute="bf16"), 4), setup)
    rounded = mismatch(RolloutEngine(model, fmt("bf16", head=True), 4), setup)
    noisy = mismatch(RolloutEngine(model, fmt("bf16", 0.3, head=True), 4), setup)
    assert fp32 < 1e-5 < rounded and 1e-5 < bf16
    assert noisy > 5 * rounded


def test_sync_copies_the_current_weights(setup):
    tok, model, prompts = setup
    engine = RolloutEngine(model, FP32, 4)
    other = build_model(TINY_ARCH, tok, seed=1)
    engine.sync(other)
    for a, b in zip(engine.model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)
