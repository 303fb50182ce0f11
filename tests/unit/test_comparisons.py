"""Each comparison recipe, token by token, against the public implementation its recipe cites.

Where the reference is verl's, verl's own function is called. For the others the reference formula is written out
here again from the cited file (never copied): per token, the reference's loss term and its gradient with respect
to log pi must equal our surrogate's parts, on realistic and adversarial inputs (tests/comparison_inputs.py).

Our surrogate writes every method as -sg(w g) A log pi (+ penalty); a reference written as a ratio, -A r with r
carrying the gradient, has the same gradient, and its per-token value at the current parameters (r = pi/mu,
proximal = current) is our -coef = -A w g. The references in the ratio form compare that way; those already in
the log-prob form (verl's bypass-mode REINFORCE, open-instruct's CISPO branch) compare loss values directly.

References, read at:
* verl 0.9.1 (the installed wheel): verl/trainer/ppo/core_algos.py, verl/trainer/ppo/rollout_corr_helper.py;
* AReaL: areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588433d, areal/utils/functional/functional.py
  (apply_rejection_sampling, compute_binary_kl_divergence, ppo_actor_loss_fn);
* open-instruct: allenai/open-instruct@e6c3044aa6201c8bfa4573c1b03142af599e730d, open_instruct/grpo_utils.py
  (compute_rho_correction, compute_grpo_loss);
* prime-rl: PrimeIntellect-ai/prime-rl@ff4b125e4b97d0bfeca7fb18d225bd342cedc345,
  src/prime_rl/trainer/rl/loss.py (default_loss_fn) and src/prime_rl/configs/trainer.py (DefaultLossConfig).
"""

import pytest
import torch
from comparison_inputs import cases
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig, PolicyLossConfig

from dppo_bench.config import load_methods
from dppo_bench.methods import get_mask, mask_names, surrogate_loss
from dppo_bench.methods.surrogate import surrogate_parts

RECIPES = load_methods()
CASES = ["realistic", "adversarial"]
TIGHT = dict(rtol=1e-6, atol=1e-12)


@pytest.fixture(params=CASES)
def data(request, gen):
    return cases(gen)[request.param]


def ours(name, data, agg="token-mean", **values):
    """Our recipe ``name`` (sanity profile, updated by ``values``) on ``data``: its parts, loss and d loss/d log pi."""
    recipe = RECIPES[name]
    rule = recipe.rule
    hp = rule.values(**{**recipe.profile("sanity").values(), **values})
    lp = data["log_pi"].clone().requires_grad_()
    kw = dict(mu_log_prob=data["log_mu"], anchor_log_prob=data["log_mu"], advantages=data["adv"],
              response_mask=data["mask"])  # fmt: skip
    parts = surrogate_parts(rule, hp, log_prob=data["log_pi"], **kw)
    loss, _ = surrogate_loss(rule, hp, log_prob=lp, loss_agg_mode=agg, **kw)
    loss.backward()
    return parts, loss.detach(), lp.grad


def grad_of(fn, log_pi):
    lp = log_pi.clone().requires_grad_()
    loss = fn(lp)
    loss.backward()
    return loss.detach(), lp.grad


def token_mean(per_token, mask):
    return (per_token * mask).sum() / mask.sum()


def actor(mode, agg="token-mean", rollout_correction=None, **fields):
    policy_loss = PolicyLossConfig(loss_mode=mode, **({"rollout_correction": rollout_correction}
                                                      if rollout_correction else {}))  # fmt: skip
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg,
                       policy_loss=policy_loss, **fields)  # fmt: skip


# -- IcePop ---------------------------------------------------------------------------------------------------------
def test_icepop_is_verls_own_bypass_mode_icepop_token_for_token(data):
    """verl 0.9.1 core_algos.compute_policy_loss_bypass_mode, loss_type reinforce, rollout_is token, threshold
    "0.5_5.0": -w A log pi with w = pi/mu zeroed outside [0.5, 5] (rollout_corr_helper.compute_rollout_correction_
    weights). Ours through verl's registry too (the loss mode verl's workers call)."""
    correction = {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": "0.5_5.0",
                  "rollout_is_batch_normalize": False, "rollout_rs": None, "rollout_rs_threshold": None}  # fmt: skip
    config = actor("bypass_mode", rollout_correction=correction)
    verl_fn = core_algos.get_policy_loss_fn("bypass_mode")
    kw = dict(old_log_prob=data["log_mu"], advantages=data["adv"], response_mask=data["mask"], config=config)
    v_loss, v_grad = grad_of(lambda lp: verl_fn(log_prob=lp, **kw)[0], data["log_pi"])
    parts, loss, grad = ours("icepop", data)
    torch.testing.assert_close(loss, v_loss, **TIGHT)
    torch.testing.assert_close(grad, v_grad, **TIGHT)
    assert parts.masked.any() and (~parts.masked & data["mask"] & (data["adv"] != 0)).any()


def areal_filter(logp_prox, logp_behave, mask, metric, upper, lower=None):
    """AReaL apply_rejection_sampling, token level, action "mask": (the loss mask after rejection, the weight)."""
    log_ratio = logp_prox - logp_behave
    log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, torch.zeros_like(log_ratio))
    if metric == "ratio":
        value = log_ratio.exp()
    else:  # binary_kl: each probability a Bernoulli, clamped to [1e-8, 1 - 1e-8], the larger of both directions

        def bernoulli_kl(log_a, log_b):
            a, b = log_a.exp().clamp(1e-8, 1 - 1e-8), log_b.exp().clamp(1e-8, 1 - 1e-8)
            return a * (a / b).log() + (1 - a) * ((1 - a) / (1 - b)).log()

        value = torch.maximum(bernoulli_kl(logp_prox, logp_behave), bernoulli_kl(logp_behave, logp_prox))
    inside = (value >= lower) & (value <= upper) if lower is not None else value <= upper
    return mask & inside, log_ratio.exp()


def areal_loss(logp, logp_behave, adv, mask, metric, upper, lower=None):
    """AReaL ppo_actor_loss_fn with its decoupled loss at the first update (proximal = current, detached), the PPO
    clip wide open: per token max(-A r, -A clip(r)) times the behaviour weight, summed over the kept tokens and
    divided by the count of the original mask. Returns (per-token terms, loss)."""
    logp_prox = logp.detach()
    kept, weight = areal_filter(logp_prox, logp_behave, mask, metric, upper, lower)
    r = torch.where(mask, (logp - logp_prox).exp(), torch.zeros_like(logp))
    per_token = torch.maximum(-adv * r, -adv * r.clamp(1 - 1e6, 1 + 1e6)) * weight
    return per_token.detach(), torch.where(kept, per_token, torch.zeros_like(per_token)).sum() / mask.sum()


@pytest.mark.parametrize(
    ("name", "metric", "bounds", "values"),
    [("icepop", "ratio", (5.0, 0.5), {}),
     ("kpop", "binary_kl", (2.0,), {}),
     ("kpop", "binary_kl", (0.05,), {"delta": 0.05})],  # a threshold the realistic mismatch crosses
)  # fmt: skip
def test_icepop_and_kpop_match_areal_token_for_token(data, name, metric, bounds, values):
    parts, _, grad = ours(name, data, **values)
    reference = (data["log_mu"], data["adv"], data["mask"], metric, *bounds)
    terms = areal_loss(data["log_pi"], *reference)[0]
    _, a_grad = grad_of(lambda lp: areal_loss(lp, *reference)[1], data["log_pi"])
    kept = areal_filter(data["log_pi"], data["log_mu"], data["mask"], metric, *bounds)[0]
    moving = data["mask"] & (data["adv"] != 0)  # A = 0 tokens: no gradient in either, and we never mask them
    assert torch.equal(~parts.masked & moving, kept & moving)
    same = kept & ~((data["log_pi"] - data["log_mu"]).abs() > 20)  # AReaL's weight is unbounded, ours (verl's) not
    torch.testing.assert_close(-parts.coef * same, terms * same, **TIGHT)  # AReaL's value at r = 1
    torch.testing.assert_close(grad * same, a_grad * same, **TIGHT)
    differ = ~torch.isclose(grad, a_grad, rtol=1e-6, atol=1e-12)
    assert ((data["log_pi"] - data["log_mu"]).abs() > 20)[differ].all()
    assert (parts.masked & moving).any() or bounds == (2.0,)  # KPop's own 2.0 is crossed by the corners only


def open_instruct_rho(old_lp, vllm_lp, mask, adv, lower, upper, clamp_upper, tv):
    """open-instruct compute_rho_correction: the per-token weights (0 where dropped) of rho = pi_old/mu, its log
    bounded at +-10; with ``tv`` (rho_mask_tv_divergence, VACO) the drop reads the sequence mean of |rho - 1| and
    only tokens moving away (sign(log rho) A > 0) are dropped."""
    diff = torch.where(mask, (old_lp - vllm_lp).clamp(-10.0, 10.0), torch.zeros_like(old_lp))
    rho = diff.exp()
    if tv:
        per_seq = ((rho - 1).abs() * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
        measure = per_seq.expand_as(rho)
        away = torch.sign(diff) * adv > 0
    else:
        measure, away = rho, torch.ones_like(mask)
    low = (measure < lower) & mask if lower > 0 else torch.zeros_like(mask)
    high = (measure > upper) & mask if upper > 0 else torch.zeros_like(mask)
    keep = mask & ~((low | high) & away)
    weight = rho.clamp(max=clamp_upper) if clamp_upper > 0 else rho
    return torch.where(keep, weight, torch.zeros_like(weight))


def open_instruct_cispo(new_lp, adv, mask, weights, clip_higher=0.2):
    """open-instruct compute_grpo_loss, loss_fn cispo, at the first update (ratio pi/pi_old = 1): per token
    -A clamp(ratio, max=1 + clip_higher) log pi times the rho weight; the token mean over the response."""
    ratio = (new_lp - new_lp.detach()).exp()
    per_token = -adv * ratio.detach().clamp(max=1 + clip_higher) * new_lp * weights
    return per_token, token_mean(per_token, mask)


@pytest.mark.parametrize(
    ("name", "reference"),
    [("icepop", dict(lower=0.5, upper=5.0, clamp_upper=0.0, tv=False)),
     ("vaco", dict(lower=0.0, upper=0.2, clamp_upper=2.0, tv=True))],
)  # fmt: skip
def test_icepop_and_vaco_match_open_instruct_token_for_token(data, name, reference):
    parts, loss, grad = ours(name, data)
    weights = open_instruct_rho(data["log_pi"], data["log_mu"], data["mask"], data["adv"], **reference)
    terms = open_instruct_cispo(data["log_pi"], data["adv"], data["mask"], weights)[0]
    o_loss, o_grad = grad_of(lambda lp: open_instruct_cispo(lp, data["adv"], data["mask"], weights)[1], data["log_pi"])
    log_r = (data["log_pi"] - data["log_mu"]).abs()
    same = data["mask"] & ~(log_r > 10)  # open-instruct bounds log rho at 10, we (as verl) at 20
    per_token = -parts.coef * data["log_pi"]
    torch.testing.assert_close(per_token * same, terms * same, **TIGHT)
    torch.testing.assert_close(grad * same, o_grad * same, **TIGHT)
    if not (data["mask"] & (log_r > 10)).any():
        torch.testing.assert_close(loss, o_loss, **TIGHT)
    assert (parts.masked & data["mask"] & (data["adv"] != 0)).any()


def test_where_vaco_and_open_instruct_differ_it_is_the_bound_on_log_rho():
    data = cases(torch.Generator().manual_seed(0))["adversarial"]
    parts, _, grad = ours("vaco", data)
    weights = open_instruct_rho(data["log_pi"], data["log_mu"], data["mask"], data["adv"], 0.0, 0.2, 2.0, True)
    _, o_grad = grad_of(lambda lp: open_instruct_cispo(lp, data["adv"], data["mask"], weights)[1], data["log_pi"])
    differ = ~torch.isclose(grad, o_grad, rtol=1e-6, atol=1e-12)
    assert differ.any() and ((data["log_pi"] - data["log_mu"]).abs() > 10)[differ].all()


# -- prime-rl's DPPO-Binary-TV + KL ---------------------------------------------------------------------------------
def prime_rl_sample(trainer_lp, inference_lp, adv, mask, low=0.2, high=0.2, kl_tau=1e-3):
    """prime-rl default_loss_fn for one sample (adv_tau 1, no teacher): (per-token terms, their sum)."""
    diff = trainer_lp.exp() - inference_lp.exp()
    invalid = torch.where(adv > 0, diff > high, diff < -low)
    keep = mask & ~invalid
    log_r = trainer_lp - inference_lp
    per_token = -(keep * adv * log_r.exp()) + kl_tau * (mask * log_r**2)
    return per_token, per_token.sum()


def test_dppo_binary_tv_kl_matches_prime_rl_token_for_token(data):
    """prime-rl sums each sample's terms and divides by the loss scale, the batch's count of loss tokens: our
    token-mean. Its -A r carries the gradient (ours: -sg(A r) log pi); its penalty is ours exactly."""
    parts, loss, grad = ours("dppo_binary_tv_kl", data)
    mask = data["mask"]

    def prime_rl(lp):
        total = sum(prime_rl_sample(lp[i], data["log_mu"][i], data["adv"][i], mask[i])[1] for i in range(len(lp)))
        return total / mask.sum()

    p_loss, p_grad = grad_of(prime_rl, data["log_pi"])
    terms = prime_rl_sample(data["log_pi"], data["log_mu"], data["adv"], mask)[0]
    log_r = data["log_pi"] - data["log_mu"]
    same = mask & ~(log_r.abs() > 20)  # prime-rl does not bound log r; we (as verl and the paper's code) at 20
    penalty = 1e-3 * log_r**2 * mask
    torch.testing.assert_close(parts.penalty.detach() * same, penalty * same, **TIGHT)
    torch.testing.assert_close((-parts.coef + parts.penalty.detach()) * same, terms * same, **TIGHT)
    torch.testing.assert_close(grad * same, p_grad * same, **TIGHT)
    assert (parts.masked & mask).any() and (parts.penalty.detach() * mask).abs().sum() > 0
    differ = ~torch.isclose(grad, p_grad, rtol=1e-6, atol=1e-12)
    assert (log_r.abs() > 20)[differ].all()


# -- GSPO and SAPO against verl's own functions ---------------------------------------------------------------------
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gspo_has_verls_gradient_token_for_token(data, agg):
    """verl's gspo in bypass mode (old_log_prob = mu): -A s_t with s_t = sg(s) pi/sg(pi), clipped; the gradient is
    -A s grad log pi where s is inside the clip, 0 where clipped or log s > 10. verl's value is -A s (ratio form)."""
    parts, _, grad = ours("gspo", data, agg, eps_low=0.02, eps_high=0.03)  # wide enough that some sequences pass
    config = actor("gspo", agg, clip_ratio_low=0.02, clip_ratio_high=0.03)
    fn = core_algos.get_policy_loss_fn("gspo")
    kw = dict(old_log_prob=data["log_mu"], advantages=data["adv"], response_mask=data["mask"], loss_agg_mode=agg,
              config=config)  # fmt: skip
    _, v_grad = grad_of(lambda lp: fn(log_prob=lp, **kw)[0], data["log_pi"])
    torch.testing.assert_close(grad, v_grad, rtol=1e-5, atol=1e-12)
    moving = data["mask"] & (data["adv"] != 0)
    assert (parts.masked & moving).any() and (~parts.masked & moving).any()


def test_sapo_has_verls_gradient_token_for_token(data):
    """verl's sapo in bypass mode: -A f(r), f(r) = 4/tau sigmoid(tau (r - 1)), always seq-mean-token-mean."""
    parts, _, grad = ours("sapo", data, "seq-mean-token-mean")
    fn = core_algos.get_policy_loss_fn("sapo")
    kw = dict(old_log_prob=data["log_mu"], advantages=data["adv"], response_mask=data["mask"],
              config=actor("sapo", tau_pos=1.0, tau_neg=1.05))  # fmt: skip
    _, v_grad = grad_of(lambda lp: fn(log_prob=lp, **kw)[0], data["log_pi"])
    torch.testing.assert_close(grad, v_grad, rtol=1e-5, atol=1e-12)
    inside = data["mask"] & ((data["log_pi"] - data["log_mu"]).abs() < 1e-6)
    torch.testing.assert_close(parts.gate[inside], torch.ones_like(parts.gate[inside]))  # the gate is 1 at r = 1


# -- CISPO and PPO's clip: verl's own modes beside the paper's PG-TIS and GRPO --------------------------------------
def test_verls_cispo_at_its_example_values_is_pg_tis_with_a_cap_of_1_2(data):
    """verl clips the weight to [1 - eps_low, 1 + eps_high]; at verl's example (10, 0.2) that is min(r, 1.2): the
    paper's PG-TIS with C = 1.2 (the recipe pg_tis has C = 3 and 5). At verl's default eps_low 0.2 the two differ
    exactly on the tokens whose ratio falls below 0.8, raised to 0.8 by verl."""
    fn = core_algos.get_policy_loss_fn("cispo")
    kw = dict(old_log_prob=data["log_mu"], advantages=data["adv"], response_mask=data["mask"])
    _, ours_loss, ours_grad = ours("pg_tis", data, is_cap=1.2)
    v_loss, v_grad = grad_of(
        lambda lp: fn(log_prob=lp, config=actor("cispo", clip_ratio_low=10.0, clip_ratio_high=0.2), **kw)[0],
        data["log_pi"],
    )
    torch.testing.assert_close(ours_loss, v_loss, **TIGHT)
    torch.testing.assert_close(ours_grad, v_grad, **TIGHT)
    _, d_grad = grad_of(
        lambda lp: fn(log_prob=lp, config=actor("cispo", clip_ratio_low=0.2, clip_ratio_high=0.2), **kw)[0],
        data["log_pi"],
    )
    differ = ~torch.isclose(ours_grad, d_grad, rtol=1e-6, atol=1e-12)
    low_ratio = (data["log_pi"] - data["log_mu"]).exp() < 0.8
    assert differ.any() and low_ratio[differ].all()


def test_verls_vanilla_is_grpo_clip_higher_but_for_its_dual_clip(data):
    """verl's vanilla in bypass mode has GRPO-ClipHigher's gradient except where its dual clip acts (A < 0 and
    r > C = 3: no gradient in verl, the weight r in ours)."""
    _, _, g_grad = ours("grpo_clip_higher", data)
    fn = core_algos.get_policy_loss_fn("vanilla")
    kw = dict(old_log_prob=data["log_mu"], advantages=data["adv"], response_mask=data["mask"],
              config=actor("vanilla", clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0))  # fmt: skip
    _, v_grad = grad_of(lambda lp: fn(log_prob=lp, **kw)[0], data["log_pi"])
    dual = (data["adv"] < 0) & ((data["log_pi"] - data["log_mu"]).exp() > 3.0) & data["mask"]
    torch.testing.assert_close(g_grad * ~dual, v_grad * ~dual, rtol=1e-5, atol=1e-12)
    assert (v_grad[dual] == 0).all() and (g_grad[dual] != 0).all()


def test_every_comparison_recipe_is_tested_here():
    """A new comparison rule needs its reference here (or a rule of the paper's form, tested in test_methods)."""
    compared = {"icepop", "kpop", "vaco", "dppo_binary_tv_kl_penalty", "gspo_sequence_clip", "sapo_soft_gate"}
    module = "dppo_bench.methods.comparisons"
    assert {r.mask for r in RECIPES.values() if r.rule is not None and r.rule.fn.__module__ == module} == compared
    assert {n for n in mask_names() if get_mask(n).fn.__module__ == module} == compared
