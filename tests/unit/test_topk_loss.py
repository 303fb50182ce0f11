"""The Top-K modes through verl 0.9.1's own ``ppo_loss`` on CPU (as patched by the plugin)."""

import os

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.config import ActorConfig
from verl.workers.utils import losses as verl_losses

import dppo_bench.verl_plugin.entry  # noqa: F401  (registers the modes, installs the patches)
from dppo_bench.methods import get_mask
from dppo_bench.verl_plugin.contract import LOSS_ENV, encode
from dppo_bench.verl_plugin.loss_inputs import current
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS
from dppo_bench.verl_plugin.topk.hooks import original_of

PROMPT, RESPONSES = 3, [6, 4, 5, 2]
DELTA = 0.1


def inputs(gen):
    """A micro-batch in the v1 layout and a model_output like the patched engines return."""
    B, R = len(RESPONSES), max(RESPONSES)
    mask = torch.arange(R)[None] < torch.tensor(RESPONSES)[:, None]
    log_mu = -torch.rand(B, R, generator=gen) * 2
    log_pi = (log_mu + 0.5 * torch.randn(B, R, generator=gen)).clamp(max=-1e-4)
    adv = torch.randn(B, 1, generator=gen).expand(B, R).clone()
    div = {"tv": torch.rand(B, R, generator=gen) * 0.2, "kl": torch.rand(B, R, generator=gen) * 0.2}

    def nested_rows(values):  # response rows -> full sequences, row t scoring token t + 1
        seqs = []
        for i, n in enumerate(RESPONSES):
            seq = torch.zeros(PROMPT + n)
            seq[PROMPT - 1 : PROMPT - 1 + n] = values[i, :n]
            seqs.append(seq)
        return torch.nested.as_nested_tensor(seqs, layout=torch.jagged)

    def nested_resp(values):
        return torch.nested.as_nested_tensor([values[i, :n] for i, n in enumerate(RESPONSES)], layout=torch.jagged)

    data = TensorDict(
        {
            "prompts": torch.nested.as_nested_tensor([torch.zeros(PROMPT, dtype=torch.long)] * B, layout=torch.jagged),
            "responses": nested_resp(torch.ones(B, R, dtype=torch.long)),
            "response_mask": nested_resp(mask.long()),
            "old_log_probs": nested_resp(log_mu),  # bypass mode: mu
            "advantages": nested_resp(adv),
        },
        batch_size=[B],
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B)
    model_output = {"log_probs": nested_rows(log_pi).requires_grad_()}
    model_output.update({DIVERGENCE_KEYS[k]: nested_rows(v) for k, v in div.items()})
    return data, model_output, log_pi, log_mu, adv, mask, div


@pytest.fixture(autouse=True)
def restore_channel():
    """Each test's channel (set by ``config``) ends with the test, whether or not one was set before it."""
    before = os.environ.pop(LOSS_ENV, None)
    yield
    os.environ.pop(LOSS_ENV, None)
    if before is not None:
        os.environ[LOSS_ENV] = before


def config(mode, cap=1e4):
    """verl's actor config selecting ``mode``, with our channel carrying delta and the cap, as Ray gives it."""
    rule = get_mask(mode)
    os.environ[LOSS_ENV] = encode(rule, rule.values(delta=DELTA, is_cap=None if cap >= 1e4 else cap))
    return ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        rollout_n=1,
        clip_ratio_low=DELTA,
        clip_ratio_high=DELTA,
        clip_ratio_c=cap,
        loss_agg_mode="token-mean",
        policy_loss={"loss_mode": mode},
    )


def response_grad(model_output):
    """d loss / d log pi at the response tokens, in the padded (batch, response_len) layout."""
    grad = model_output["log_probs"].grad.values()
    starts = torch.tensor([0] + [PROMPT + n for n in RESPONSES]).cumsum(0)[:-1]
    rows = [grad[s + PROMPT - 1 : s + PROMPT - 1 + n] for s, n in zip(starts.tolist(), RESPONSES, strict=True)]
    return torch.stack([torch.nn.functional.pad(r, (0, max(RESPONSES) - len(r))) for r in rows])


@pytest.mark.parametrize("kind", ["tv", "kl"])
@pytest.mark.parametrize("cap", [1e4, 2.0])
def test_topk_mode_masks_on_its_divergence_through_verls_ppo_loss(gen, kind, cap):
    data, model_output, log_pi, log_mu, adv, mask, div = inputs(gen)
    loss, metrics = verl_losses.ppo_loss(config(f"dppo_topk_{kind}", cap), model_output, data)
    loss.backward()
    pi, mu, d = log_pi.exp(), log_mu.exp(), div[kind]
    masked = ((adv > 0) & (pi > mu) & (d > DELTA)) | ((adv < 0) & (pi < mu) & (d > DELTA))
    weight = (log_pi - log_mu).exp()
    if cap < 1e4:
        weight = weight.clamp(max=cap)
    expected = -adv * weight * ~masked * mask / mask.sum()
    torch.testing.assert_close(response_grad(model_output), expected, rtol=1e-5, atol=1e-7)
    values = {k: m.aggregate() for k, m in metrics.items()}
    assert values["actor/mask_frac"] == pytest.approx((masked & mask).sum().item() / mask.sum().item())
    assert 0 < values["actor/mask_frac"] < 1
    assert values["actor/topk_divergence_mean"] == pytest.approx(d[mask].mean().item(), rel=1e-5)
    assert values["actor/topk_divergence_max"] == pytest.approx(d[mask].max().item(), rel=1e-6)
    assert current().topk_divergence is None  # exposed for that one call only


def test_other_modes_reach_verls_ppo_loss_unchanged(gen):
    data, model_output, *_ = inputs(gen)
    original = original_of(verl_losses.ppo_loss)
    ours, _ = verl_losses.ppo_loss(config("dppo_binary_tv"), model_output, data)
    theirs, _ = original(config("dppo_binary_tv"), model_output, data)
    torch.testing.assert_close(ours, theirs)


def test_the_worker_binds_the_patched_ppo_loss():
    assert engine_workers.ppo_loss is verl_losses.ppo_loss
    assert hasattr(engine_workers.ppo_loss, "__dppo_bench_patched__")


def test_a_topk_mode_without_the_engines_divergence_fails_clearly(gen):
    data, model_output, *_ = inputs(gen)
    del model_output[DIVERGENCE_KEYS["kl"]]
    with pytest.raises(RuntimeError, match="dppo_topk_kl.*missing"):
        verl_losses.ppo_loss(config("dppo_topk_kl"), model_output, data)


def test_entropy_of_masked_tokens_and_rollout_topk_mass_reach_the_step_metrics(gen):
    """Fig. 6's entropy of masked tokens reads the engine's entropy; Fig. 12's top-K mass reads the batch's top-K."""
    from dppo_bench.verl_plugin.topk.fields import TOPK_LOGPROBS

    data, model_output, log_pi, log_mu, adv, mask, div = inputs(gen)
    B, R, K = len(RESPONSES), max(RESPONSES), 3
    entropy = torch.rand(B, R, generator=gen) * 3
    mu_topk = torch.log_softmax(torch.randn(B, R, K + 2, generator=gen), -1)[..., :K]  # K of K + 2: mass < 1
    model_output["entropy"] = torch.nested.as_nested_tensor(
        [torch.cat([torch.zeros(PROMPT - 1), entropy[i, :n], torch.zeros(1)]) for i, n in enumerate(RESPONSES)],
        layout=torch.jagged,
    )
    data[TOPK_LOGPROBS] = torch.nested.as_nested_tensor(
        [mu_topk[i, :n] for i, n in enumerate(RESPONSES)], layout=torch.jagged
    )
    _, metrics = verl_losses.ppo_loss(config("dppo_topk_tv"), model_output, data)
    values = {k: m.aggregate() for k, m in metrics.items()}
    pi, mu = log_pi.exp(), log_mu.exp()
    masked = (((adv > 0) & (pi > mu)) | ((adv < 0) & (pi < mu))) & (div["tv"] > DELTA) & mask
    assert masked.any()
    assert values["actor/masked_entropy_mean"] == pytest.approx(entropy[masked].mean().item(), rel=1e-5)
    assert values["actor/masked_mu_mean"] == pytest.approx(mu[masked].mean().item(), rel=1e-5)
    assert values["actor/rollout_topk_mass_mean"] == pytest.approx(mu_topk.exp().sum(-1)[mask].mean().item(), rel=1e-5)
