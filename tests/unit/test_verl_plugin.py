"""Our loss modes inside verl 0.9.1: registration, parity with verl's own losses, ppo_loss."""

import json
import math
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss

import dppo_bench.verl_plugin.entry  # noqa: F401  (registers the modes in this process)
from dppo_bench.config import load_methods
from dppo_bench.methods import get_mask, mask_names
from dppo_bench.methods.surrogate import LOG_RATIO_BOUND
from dppo_bench.verl_launch.overrides import UNBOUNDED_IS_THRESHOLD, method_overrides
from dppo_bench.verl_plugin.contract import LOSS_ENV, encode
from dppo_bench.verl_plugin.loss_inputs import LossInputs, exposed

RECIPES = load_methods()
NON_TOPK = sorted(n for n in mask_names() if not get_mask(n).needs_topk)
# the paper's rules (dppo_bench.methods.rules), which paper_mask below writes out again
PAPER_RULES = sorted(n for n in NON_TOPK if get_mask(n).fn.__module__ == "dppo_bench.methods.rules")
PAPER_RECIPES = {n: r for n, r in RECIPES.items() if r.mask in PAPER_RULES}
# values for any rule's hyperparameters, where a test needs some: each rule reads the ones it declares
SOME_VALUES = {"delta": 0.2, "eps_low": 0.2, "eps_high": 0.2, "alpha": 0.3}


def actor_config(low, high, cap, mode="vanilla", alpha=None):
    """verl's actor section as a loss receives it: verl's own modes read the clip ratios; ours read the channel."""
    return OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": cap,
            "global_batch_info": {},
            "policy_loss": {"loss_mode": mode, "dro_beta": alpha},
        }
    )


def channel_text(name, **values):
    rule = get_mask(name)
    declared = {p.name for p in rule.params}
    return encode(rule, rule.values(**{k: v for k, v in SOME_VALUES.items() if k in declared} | values))


@contextmanager
def channel(name, **values):
    """Our channel holding ``name``'s values (SOME_VALUES for what is not given; is_cap none) for the block."""
    old = os.environ.get(LOSS_ENV)
    os.environ[LOSS_ENV] = channel_text(name, **{"is_cap": None, **values})
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(LOSS_ENV)
        else:
            os.environ[LOSS_ENV] = old


def batch(gen, B=8, T=16, spread=0.5):
    log_mu = torch.log_softmax(torch.randn(B, T, 4, generator=gen), -1)[..., 0]
    log_pi = (log_mu + spread * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    log_old = (log_mu + 0.2 * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    adv = torch.randn(B, 1, generator=gen).expand(B, T).clone()
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2, 9:] = False
    return log_mu, log_pi, log_old, adv, mask


def grad_of(fn, log_pi, **kw):
    lp = log_pi.clone().requires_grad_()
    loss, metrics = fn(log_prob=lp, **kw)
    loss.backward()
    return loss.detach(), lp.grad, metrics


@pytest.mark.parametrize("ours, theirs", [("dppo_binary_tv", "dppo_tv"), ("dppo_binary_kl", "dppo_kl")])
@pytest.mark.parametrize("cap", [1e4, 3.0])
def test_parity_with_verls_dppo_in_bypass_mode(gen, ours, theirs, cap):
    log_mu, log_pi, _, adv, mask = batch(gen)
    cfg = actor_config(0.1, 0.1, cap)
    kw = dict(old_log_prob=log_mu, advantages=adv, response_mask=mask, loss_agg_mode="token-mean", config=cfg)
    with channel(ours, delta=0.1, is_cap=None if cap >= 1e4 else cap):
        l1, g1, m1 = grad_of(core_algos.get_policy_loss_fn(ours), log_pi, **kw)
    l2, g2, m2 = grad_of(core_algos.get_policy_loss_fn(theirs), log_pi, **kw)
    torch.testing.assert_close(l1, l2)
    torch.testing.assert_close(g1, g2)
    assert 0 < m1["actor/mask_frac"] < 1
    # verl counts its clip fraction over all tokens, A = 0 included; we have no A = 0 tokens here
    assert m1["actor/mask_frac"] == pytest.approx(m2["actor/pg_clipfrac"])


def test_parity_with_verls_vanilla_for_grpo_clip_higher(gen):
    log_mu, log_pi, _, adv, mask = batch(gen, spread=0.3)
    cfg = actor_config(0.2, 0.28, 1e4)
    kw = dict(old_log_prob=log_mu, advantages=adv, response_mask=mask, config=cfg)
    with channel("grpo_clip_higher", eps_low=0.2, eps_high=0.28):
        _, g1, m1 = grad_of(core_algos.get_policy_loss_fn("grpo_clip_higher"), log_pi, **kw)
    _, g2, m2 = grad_of(core_algos.get_policy_loss_fn("vanilla"), log_pi, **kw)
    torch.testing.assert_close(g1, g2)  # same gradient: PPO's clip is a mask on the ratio
    assert m1["actor/mask_frac"] == pytest.approx(m2["actor/pg_clipfrac"])


def test_parity_with_verls_cispo_for_pg_tis(gen):
    log_mu, log_pi, _, adv, mask = batch(gen, spread=1.5)
    C = 3.0
    kw = dict(old_log_prob=log_mu, advantages=adv, response_mask=mask)
    with channel("pg_tis", is_cap=C):
        l1, g1, _ = grad_of(core_algos.get_policy_loss_fn("pg_tis"), log_pi, config=actor_config(0.0, 0.0, C), **kw)
    cispo_cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        rollout_n=1,
        clip_ratio_low=1.0,
        clip_ratio_high=C - 1,  # clip(r, 0, C) = min(r, C)
    )
    l2, g2, _ = grad_of(core_algos.get_policy_loss_fn("cispo"), log_pi, config=cispo_cfg, **kw)
    torch.testing.assert_close(l1, l2)
    torch.testing.assert_close(g1, g2)


# verl's two modes: bypass passes mu as old_log_prob and no IS weights (the rollout anchor); decoupled passes the
# recomputed pi_old and the weights pi_old / mu, with mu itself beside them through the patched ppo_loss (the
# recompute anchor)
MODE_OF_ANCHOR = {"rollout": "bypass", "recompute": "decoupled"}
REFUSED_MODES = [(n, mode) for n in NON_TOPK for a, mode in MODE_OF_ANCHOR.items() if a not in get_mask(n).anchors]


def call_in_mode(gen, name, mode):
    log_mu, log_pi, log_old, adv, mask = batch(gen)
    kw = dict(log_prob=log_pi, advantages=adv, response_mask=mask, config=actor_config(0.2, 0.2, 1e4))
    with channel(name):
        if mode == "bypass":
            return core_algos.get_policy_loss_fn(name)(old_log_prob=log_mu, **kw)
        with exposed(LossInputs(rollout_log_prob=log_mu)):
            return core_algos.get_policy_loss_fn(name)(
                old_log_prob=log_old, rollout_is_weights=(log_old - log_mu).exp(), **kw
            )


def test_both_modes_have_rules_that_refuse_them():
    assert {mode for _, mode in REFUSED_MODES} == {"bypass", "decoupled"}


@pytest.mark.parametrize(("name", "mode"), REFUSED_MODES, ids=[f"{n}-{m}" for n, m in REFUSED_MODES])
def test_mode_mismatch_is_a_clear_error(gen, name, mode):
    """A rule run in the mode of the anchor it is not defined for refuses, naming the mode it needs."""
    needed = {"bypass": "decoupled mode", "decoupled": "bypass mode"}[mode]
    with pytest.raises(ValueError, match=needed):
        call_in_mode(gen, name, mode)


@pytest.mark.parametrize("name", [n for n in NON_TOPK if len(get_mask(n).anchors) == 2])
def test_a_rule_of_both_anchors_runs_in_both_modes(gen, name):
    for mode in MODE_OF_ANCHOR.values():
        loss, _ = call_in_mode(gen, name, mode)
        assert torch.isfinite(loss), mode


@pytest.mark.parametrize("name", ["dppo_topk_tv", "dppo_topk_kl"])
def test_topk_modes_fail_clearly_without_plumbing(gen, name):
    log_mu, log_pi, _, adv, mask = batch(gen)
    with pytest.raises(RuntimeError, match="top-K divergence"):
        core_algos.get_policy_loss_fn(name)(
            old_log_prob=log_mu,
            log_prob=log_pi,
            advantages=adv,
            response_mask=mask,
            config=actor_config(0.2, 0.2, 1e4),
        )


def test_decoupled_mode_without_the_rollout_log_probs_is_a_clear_error(gen):
    log_mu, log_pi, log_old, adv, mask = batch(gen)
    with pytest.raises(RuntimeError, match="mu's own log-probs"):
        core_algos.get_policy_loss_fn("minirl_tis")(
            old_log_prob=log_old,
            log_prob=log_pi,
            advantages=adv,
            response_mask=mask,
            config=actor_config(0.2, 0.28, 3.0),
            rollout_is_weights=(log_old - log_mu).exp(),
        )


FRESH_PROCESS_CHECK = r"""
import json, os, sys, torch
import verl  # nothing else: the entry point must register our modes
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
from omegaconf import OmegaConf
from dppo_bench.verl_plugin.loss_inputs import LossInputs, exposed
cases = json.loads(sys.argv[1])
out = {"registered": sorted(POLICY_LOSS_REGISTRY)}
g = torch.Generator().manual_seed(1)
B, T = 6, 12
log_mu = torch.log_softmax(torch.randn(B, T, 4, generator=g), -1)[..., 0]
log_pi = (log_mu + 0.6 * torch.randn(B, T, generator=g)).clamp(max=-1e-4)
log_old = (log_mu + 0.2 * torch.randn(B, T, generator=g)).clamp(max=-1e-4)
adv = torch.randn(B, 1, generator=g).expand(B, T).clone()
mask = torch.ones(B, T, dtype=torch.bool); mask[1, 7:] = False
for name, (values, recompute) in cases.items():
    if name not in POLICY_LOSS_REGISTRY:
        continue
    os.environ["DPPO_BENCH_LOSS"] = values  # our channel, as Ray gives it to a worker
    cfg = OmegaConf.create({"global_batch_info": {}, "policy_loss": {}})
    lp = log_pi.clone().requires_grad_()
    kw = dict(old_log_prob=log_old if recompute else log_mu,
              rollout_is_weights=(log_old - log_mu).exp() * mask if recompute else None)
    with exposed(LossInputs(rollout_log_prob=log_mu if recompute else None)):  # as the patched ppo_loss does
        loss, _ = get_policy_loss_fn(name)(log_prob=lp, advantages=adv, response_mask=mask, config=cfg, **kw)
    loss.backward()
    out[name] = lp.grad.tolist()
print("RESULT" + json.dumps(out))
"""


def paper_mask(name, log_pi, log_anchor, adv, low, high, alpha=None):
    """The paper's masks written out again, independently of dppo_bench.methods.rules."""
    pi, anc, r = log_pi.exp(), log_anchor.exp(), (log_pi - log_anchor).exp()
    up, down = adv > 0, adv < 0
    if name.startswith("grpo_relax_"):  # Sec. 6: the clip is kept only where mu >= alpha, on the relaxed sides
        side = name.removeprefix("grpo_relax_")
        keep_high = (anc >= alpha) | (side == "low")
        keep_low = (anc >= alpha) | (side == "high")
        return ~((up & (r > 1 + high) & keep_high) | (down & (r < 1 - low) & keep_low))
    if name.startswith("dppo_binary_tv"):
        return ~((up & (pi - anc > high)) | (down & (pi - anc < -low)))
    if name.startswith("dppo_binary_kl"):
        kl = anc * (log_anchor - log_pi) + (1 - anc) * torch.log((1 - anc) / (1 - pi))
        return ~((up & (kl > high) & (pi > anc)) | (down & (kl > low) & (pi < anc)))
    if name in ("grpo_clip_higher", "minirl", "minirl_tis"):
        return ~((up & (r > 1 + high)) | (down & (r < 1 - low)))
    if name == "mask_bad_updates":
        return ~(down & (anc - pi >= low))
    assert name in ("pg_is", "pg_tis"), name
    return torch.ones_like(pi, dtype=torch.bool)


def run_fresh(cases, env_update, script=FRESH_PROCESS_CHECK):
    env = {**os.environ, **env_update}
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


PAPER_CASE_VALUES = {"delta": 0.1, "eps_low": 0.2, "eps_high": 0.28, "alpha": 0.3}


def paper_case(name):
    """(low, high, cap, recompute, alpha) of a paper rule in the test below, and its channel's content."""
    rule = get_mask(name)
    declared = {p.name for p in rule.params}
    v = {k: x for k, x in PAPER_CASE_VALUES.items() if k in declared}
    v["is_cap"] = 2.0 if name.endswith("tis") else None
    low, high = (v["delta"], v["delta"]) if "delta" in v else (v.get("eps_low", 0.0), v.get("eps_high", 0.0))
    case = (low, high, v["is_cap"] or 1e4, rule.anchors == ("recompute",), v.get("alpha"))
    return case, encode(rule, rule.values(**v))


def test_plain_import_verl_registers_every_mode_and_gradients_match_the_paper():
    cases, channels = {}, {}
    for name in PAPER_RULES:
        cases[name], channels[name] = paper_case(name)
    fresh = {name: (channels[name], cases[name][3]) for name in cases}
    out = run_fresh(fresh, {"VERL_USE_EXTERNAL_PLUGINS": "auto", "VERL_USE_EXTERNAL_MODULES": ""})
    assert set(mask_names()) <= set(out["registered"])

    g = torch.Generator().manual_seed(1)  # the same data as the subprocess
    B, T = 6, 12
    log_mu = torch.log_softmax(torch.randn(B, T, 4, generator=g), -1)[..., 0]
    log_pi = (log_mu + 0.6 * torch.randn(B, T, generator=g)).clamp(max=-1e-4)
    log_old = (log_mu + 0.2 * torch.randn(B, T, generator=g)).clamp(max=-1e-4)
    adv = torch.randn(B, 1, generator=g).expand(B, T).clone()
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 7:] = False
    for name, (low, high, cap, recompute, alpha) in cases.items():
        anchor = log_old if recompute else log_mu
        M = paper_mask(name, log_pi, anchor, adv, low, high, alpha)
        weight = (log_pi - log_mu).exp()
        if cap < 1e4:
            weight = weight.clamp(max=cap)
        expected = -adv * weight * M * mask / mask.sum()
        got = torch.tensor(out[name])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7, msg=name)
        assert (got[~M & mask] == 0).all(), name
        assert (~M & mask).any() or name in ("pg_is", "pg_tis"), f"{name}: the data should trigger the mask"


def test_external_modules_fallback_registers_without_entry_points():
    name = "dppo_binary_tv"
    cases = {name: (paper_case(name)[1], False)}
    off = run_fresh(cases, {"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_USE_EXTERNAL_MODULES": ""})
    assert name not in off["registered"]
    modules = {"VERL_USE_EXTERNAL_MODULES": "dppo_bench.verl_plugin.entry"}
    on = run_fresh(cases, {"VERL_USE_EXTERNAL_PLUGINS": "none", **modules})
    assert name in on["registered"] and name in on


RECIPE_CHECK = r"""
import json, os, sys, torch
import verl  # nothing else: the entry point must register our modes
from verl.protocol import DataProto
from verl.trainer.config import RolloutCorrectionConfig
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.workers.config import ActorConfig
from dppo_bench.verl_plugin.loss_inputs import LossInputs, exposed
args = json.loads(sys.argv[1])
data = torch.load(args["data"])
out = {}
for key, case in args["cases"].items():
    os.environ["DPPO_BENCH_LOSS"] = case["channel"]  # our channel, as Ray gives it to a worker
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=2, ppo_mini_batch_size=4, rollout_n=1,
                        loss_agg_mode="token-mean", policy_loss=case["policy_loss"], **case["actor"])
    kw, inputs = dict(old_log_prob=data["log_mu"], rollout_is_weights=None), LossInputs()
    if case["rollout_correction"] is not None:  # decoupled mode: verl's own IS weights pi_old / mu
        batch = DataProto.from_dict(tensors={"old_log_probs": data["log_old"], "rollout_log_probs": data["log_mu"],
                                             "response_mask": data["mask"].long()})
        rc = RolloutCorrectionConfig(**case["rollout_correction"])
        batch, _ = compute_rollout_correction_and_add_to_batch(batch, rc)
        kw = dict(old_log_prob=data["log_old"], rollout_is_weights=batch.batch["rollout_is_weights"])
        inputs = LossInputs(rollout_log_prob=data["log_mu"])  # as the patched ppo_loss hands them
    lp = data["log_pi"].clone().requires_grad_()
    with exposed(inputs):
        loss, _ = get_policy_loss_fn(case["loss_mode"])(log_prob=lp, advantages=data["adv"],
                                                        response_mask=data["mask"], loss_agg_mode="token-mean",
                                                        config=actor, **kw)
    loss.backward()
    out[key] = lp.grad.tolist()
print("RESULT" + json.dumps(out))
"""


def recipe_check_data(gen, B=6, T=12):
    """Random tokens with the paper's two at the start: mu 0.99 -> pi 0.80 (A < 0), mu 1e-4 -> pi 1e-2 (A > 0)."""
    log_mu = torch.log_softmax(torch.randn(B, T, 4, generator=gen), -1)[..., 0]
    log_pi = (log_mu + 0.6 * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    log_old = (log_mu + 0.2 * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    adv = torch.randn(B, T, generator=gen)
    for t, (mu, pi, a) in enumerate([(0.99, 0.80, -1.0), (1e-4, 1e-2, 1.0)]):
        log_mu[0, t], log_old[0, t], log_pi[0, t], adv[0, t] = math.log(mu), math.log(mu), math.log(pi), a
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 7:] = False
    return {"log_mu": log_mu, "log_pi": log_pi, "log_old": log_old, "adv": adv, "mask": mask}


def verl_case(recipe, profile):
    """verl's settings for ``recipe`` at ``profile``, read back from the override strings method_overrides writes."""
    values = {}
    for override in method_overrides(recipe, profile):
        key, _, value = override.lstrip("+").partition("=")
        values[key] = yaml.safe_load(value)
    actor = {k: values[f"actor_rollout_ref.actor.{k}"] for k in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c")
             if f"actor_rollout_ref.actor.{k}" in values}  # fmt: skip
    rc = {k.rpartition(".")[2]: v for k, v in values.items() if k.startswith("algorithm.rollout_correction.")}
    policy_loss = {
        k.rpartition(".")[2]: v for k, v in values.items() if k.startswith("actor_rollout_ref.actor.policy_loss.")
    }
    return {
        "loss_mode": policy_loss["loss_mode"],
        "policy_loss": policy_loss,
        "actor": actor,
        "channel": values[f"ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}"],
        "rollout_correction": None if rc["bypass_mode"] else rc,
    }


def paper_thresholds(hp):
    """(low, high, alpha) of the paper's mask from a recipe's own names: delta on both sides, or eps_low / eps_high
    (and alpha for the efficiency study's masks)."""
    v = hp.values()
    if "delta" in v:
        return v["delta"], v["delta"], None
    return v.get("eps_low", 0.0), v.get("eps_high", 0.0), v.get("alpha")


@pytest.mark.slow
def test_every_recipe_and_profile_through_verl_matches_the_paper_gradient(gen, tmp_path):
    data = recipe_check_data(gen)
    torch.save(data, tmp_path / "data.pt")
    cases = {
        f"{name}/{profile}": verl_case(recipe, profile)
        for name, recipe in PAPER_RECIPES.items()
        for profile in recipe.hyperparameters
    }
    out = run_fresh(
        {"data": str(tmp_path / "data.pt"), "cases": cases},
        {"VERL_USE_EXTERNAL_PLUGINS": "auto", "VERL_USE_EXTERNAL_MODULES": ""},
        script=RECIPE_CHECK,
    )
    log_mu, log_pi, log_old, adv, mask = (data[k] for k in ("log_mu", "log_pi", "log_old", "adv", "mask"))
    for key in cases:
        name, profile = key.split("/")
        recipe, hp = RECIPES[name], RECIPES[name].profile(profile)
        anchor = log_old if recipe.anchor == "recompute" else log_mu
        M = paper_mask(recipe.mask, log_pi, anchor, adv, *paper_thresholds(hp))
        weight = (log_pi - log_mu).exp().clamp(max=hp.is_cap or math.inf)
        expected = -adv * weight * M * mask / mask.sum()
        got = torch.tensor(out[key])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7, msg=key)
        assert (got[~M & mask] == 0).all(), key
    # the paper's two tokens (Sec. 4.2): DPPO-TV at 0.15 drops the high-probability fall and keeps the rare rise;
    # GRPO's clip does the opposite
    tv, grpo = torch.tensor(out["dppo_binary_tv/sanity"]), torch.tensor(out["grpo_clip_higher/sanity"])
    assert tv[0, 0] == 0 and tv[0, 1] != 0
    assert grpo[0, 0] != 0 and grpo[0, 1] == 0


PROMPT_LEN = 3


def ppo_loss_inputs(gen, *, recompute, B=4, P=PROMPT_LEN, R=6):
    """verl's ppo_loss inputs in the padded layout: log-probs of full sequences, flattened."""
    resp_lens = torch.tensor([6, 4, 5, 2])
    attn = torch.ones(B, P + R, dtype=torch.int64)
    for i, n in enumerate(resp_lens):
        attn[i, P + n :] = 0
    mask = attn[:, P:].bool()
    log_mu = -torch.rand(B, R, generator=gen) * 2
    log_old = (log_mu + 0.1 * torch.randn(B, R, generator=gen)).clamp(max=-1e-4)
    log_pi = (log_mu + 0.5 * torch.randn(B, R, generator=gen)).clamp(max=-1e-4)
    fields = {
        "prompts": torch.zeros(B, P, dtype=torch.long),
        "responses": torch.zeros(B, R, dtype=torch.long),
        "attention_mask": attn,
        "response_mask": mask.long(),
        "old_log_probs": log_old if recompute else log_mu,
        "advantages": torch.randn(B, 1, generator=gen).expand(B, R).clone(),
    }
    if recompute:
        fields["rollout_is_weights"] = (log_old - log_mu).exp() * mask
        fields["rollout_log_probs"] = log_mu
    data = TensorDict(fields, batch_size=[B])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B)
    flat = []
    for i in range(B):
        seq = torch.zeros(P + int(resp_lens[i]))
        seq[P - 1 : P - 1 + resp_lens[i]] = log_pi[i, : resp_lens[i]]  # row t predicts token t + 1
        flat.append(seq)
    return data, torch.cat(flat), log_pi, log_mu, mask


@pytest.mark.parametrize("mode", ["dppo_binary_tv_recompute", "minirl_tis", "mask_bad_updates"])
def test_decoupled_mode_takes_mu_from_the_rollout_log_probs_beyond_verls_clamp(gen, mode):
    """verl clamps the rollout IS weights at exp(+-20): a token with mu = 1, pi_old = e^-120 and pi = e^-25 must be
    weighted by pi / mu = e^-25 (its log bounded at -20, as in verl and the paper's code), not by pi over a mu
    recovered from the clamped weight (e^75, bounded at e^20, then capped at C)."""
    data, flat, log_pi, log_mu, mask = ppo_loss_inputs(gen, recompute=True)
    log_old = data["old_log_probs"]
    log_mu[0, 0], log_old[0, 0], log_pi[0, 0] = 0.0, -120.0, -25.0
    flat[PROMPT_LEN - 1] = -25.0  # row 0's first response token in the flattened sequences
    data["advantages"][0] = 1.0
    data["rollout_is_weights"], _ = compute_rollout_correction_weights(
        log_old - log_mu, mask.float(), rollout_is="token", rollout_is_threshold=UNBOUNDED_IS_THRESHOLD
    )
    assert data["rollout_is_weights"][0, 0] == pytest.approx(math.exp(-20))  # verl's clamp
    cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        rollout_n=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=3.0,
        loss_agg_mode="token-mean",
        policy_loss={"loss_mode": mode},
    )
    flat = flat.requires_grad_()
    with channel(mode, is_cap=3.0):
        loss, _ = ppo_loss(cfg, {"log_probs": flat}, data)
    loss.backward()
    kept = mode != "minirl_tis"  # MiniRL's ratio to pi_old, e^95, is clipped; the others keep the token
    expected = -math.exp(-LOG_RATIO_BOUND) / mask.sum().item() if kept else 0.0
    assert flat.grad[PROMPT_LEN - 1].item() == pytest.approx(expected, rel=1e-4, abs=1e-30)


@pytest.mark.parametrize("name", sorted(n for n, r in RECIPES.items() if r.rule is not None))
def test_verls_ppo_loss_runs_every_recipe(gen, name, monkeypatch):
    recipe = RECIPES[name]
    rule = get_mask(recipe.mask)
    profile = next(iter(recipe.hyperparameters))
    hp = recipe.profile(profile)
    monkeypatch.setenv(LOSS_ENV, encode(rule, hp))  # our channel, as Ray gives it to a worker
    data, flat, log_pi, log_mu, mask = ppo_loss_inputs(gen, recompute=recipe.anchor == "recompute")
    cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        rollout_n=1,
        loss_agg_mode="seq-mean-token-sum",
        policy_loss={"loss_mode": recipe.mask},
    )
    flat = flat.requires_grad_()
    if rule.needs_topk:  # without the engine's divergence in model_output (tests/unit/test_topk_loss.py has it)
        with pytest.raises(RuntimeError, match="top-K divergence"):
            ppo_loss(cfg, {"log_probs": flat}, data)
        return
    loss, metrics = ppo_loss(cfg, {"log_probs": flat}, data)
    loss.backward()
    assert torch.isfinite(loss) and flat.grad.abs().sum() > 0
    values = {k: m.aggregate() for k, m in metrics.items()}
    assert 0.0 <= values["actor/mask_frac"] <= 1.0
    diff = (log_pi.exp() - log_mu.exp())[mask]
    assert values["actor/pi_mu_abs_diff_mean"] == pytest.approx(diff.abs().mean().item(), rel=1e-5)
    assert values["actor/pi_mu_diff_min"] == pytest.approx(diff.min().item(), rel=1e-5)


def test_verl_averages_our_statistics_over_micro_batches_unweighted(gen):
    """The per-step statistics paragraph of docs/methods.md: verl 0.9.1 combines a loss's scalars by an unweighted
    mean over micro-batches, so a micro-batch without A > 0 tokens pulls mask_frac_pos toward 0, and _max is a mean of
    maxima."""
    from verl.utils.metric import Metric, reduce_metrics
    from verl.utils.py_functional import append_to_dict

    cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        rollout_n=1,
        clip_ratio_low=0.02,
        clip_ratio_high=0.02,
        clip_ratio_c=1e4,
        policy_loss={"loss_mode": "dppo_binary_tv"},
    )
    per_micro, combined = [], {}
    for sign in (1.0, -1.0):  # micro-batch 1: only A > 0 tokens; micro-batch 2: only A < 0 tokens
        data, flat, *_ = ppo_loss_inputs(gen, recompute=False)
        data["advantages"] = sign * data["advantages"].abs()
        with channel("dppo_binary_tv", delta=0.02):
            _, metrics = ppo_loss(cfg, {"log_probs": flat}, data)
        per_micro.append({k: m.aggregate() for k, m in metrics.items()})
        append_to_dict(combined, metrics)  # as verl's engine collects micro-batches (engine/utils.py)
    step = reduce_metrics({k: [Metric.aggregate_dp([m])] for k, m in combined.items()})  # one rank, one mini-batch
    first, second = per_micro
    assert first["actor/mask_frac_pos"] > 0 and second["actor/mask_frac_pos"] == 0
    assert step["actor/mask_frac_pos"] == pytest.approx(first["actor/mask_frac_pos"] / 2)  # not the token-weighted
    assert step["actor/pi_mu_diff_max"] == pytest.approx(
        (first["actor/pi_mu_diff_max"] + second["actor/pi_mu_diff_max"]) / 2
    )


def test_alpha_reaches_verl_through_our_channel_and_is_required(gen):
    overrides = method_overrides(RECIPES["grpo_relax_both_alpha0p3"], "efficiency")
    assert any(o.startswith(f"+ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}=") and '"alpha":0.3' in o
               for o in overrides)  # fmt: skip
    assert not any("dro_beta" in o or "clip_ratio" in o for o in overrides)  # no verl key carries a value of ours
    log_mu, log_pi, _, adv, mask = batch(gen)
    fn = core_algos.get_policy_loss_fn("grpo_relax_both")
    kw = dict(old_log_prob=log_mu, log_prob=log_pi, advantages=adv, response_mask=mask)
    os.environ.pop(LOSS_ENV, None)
    with pytest.raises(ValueError, match=f"\\${LOSS_ENV}, which is unset"):
        fn(**kw, config=actor_config(0.2, 0.28, 1e4))
    with pytest.raises(ValueError, match="alpha: Input should be less than or equal to 1"):
        with channel("grpo_relax_both", alpha=0.3):
            os.environ[LOSS_ENV] = os.environ[LOSS_ENV].replace('"alpha":0.3', '"alpha":1.5')
            fn(**kw, config=actor_config(0.2, 0.28, 1e4))
