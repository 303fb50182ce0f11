"""Closed-form cases for every mask rule and the shared surrogate's gradient and statistics."""

import math

import pytest
import torch

from dppo_bench.config import load_methods
from dppo_bench.divergence import binary_kl, binary_tv
from dppo_bench.methods import STAT_NAMES, Tokens, get_mask, mask_names, surrogate_loss

RECIPES = load_methods()


def masked(name, mu, pi, adv, *, pi_old=None, profile="sanity", topk_divergence=None):
    """Mask of method recipe ``name`` at its paper values, for tokens given as probabilities."""
    recipe = RECIPES[name]
    rule = get_mask(recipe.mask)
    hp = recipe.profile(profile)
    anchor = pi_old if recipe.anchor == "recompute" else mu
    t = Tokens(torch.tensor(pi).log(), torch.tensor(anchor).log(), torch.tensor(adv), topk_divergence)
    return rule(t, *rule.args(hp)).tolist()


# (mu, pi, A): the paper's two tokens (Sec. 4.2), updates pulling back, a bad update, A = 0.
HIGH_PROB_DROP = (0.99, 0.80, -1.0)
RARE_TOKEN_RISE = (1e-4, 1e-2, 1.0)
PULL_BACK_NEG = (0.5, 0.9, -1.0)
PULL_BACK_POS = (0.9, 0.5, 1.0)
BAD_UPDATE = (0.9, 0.3, -1.0)
BIG_RISE = (0.5, 0.7, 1.0)
SMALL_RISE = (0.5, 0.6, 1.0)
ZERO_ADV = (0.9, 0.1, 0.0)
CASES = [
    HIGH_PROB_DROP,
    RARE_TOKEN_RISE,
    PULL_BACK_NEG,
    PULL_BACK_POS,
    BAD_UPDATE,
    BIG_RISE,
    SMALL_RISE,
    ZERO_ADV,
]

EXPECTED = {  # masked? per case, at the sanity-test values of each recipe
    "dppo_binary_tv": [True, False, False, False, True, True, False, False],  # |pi - mu| > 0.15, moving away
    "dppo_binary_kl": [True, False, False, False, True, True, False, False],  # KL_bin > 0.05, moving away
    "grpo_clip_higher": [False, True, False, False, True, True, False, False],  # r outside [0.8, 1.28]
    "pg_is": [False] * 8,
    "pg_tis": [False] * 8,
    "mask_bad_updates": [False, False, False, False, True, False, False, False],  # A < 0, mu - pi >= 0.5
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_closed_form_masks_with_rollout_anchor(name):
    mu, pi, adv = (list(c) for c in zip(*CASES, strict=True))
    assert masked(name, mu, pi, adv) == EXPECTED[name]


def test_the_paper_tokens_through_the_real_divergences_masks_and_loss():
    """Sec. 4.2's two tokens: a high-probability token's drop (mu 0.99 -> pi 0.80, A < 0), which ratio clipping lets
    through and DPPO stops, and a rare token's rise (mu 1e-4 -> pi 1e-2, A > 0), which ratio clipping stops and
    DPPO lets through. Each number below comes out of the suite's own code at the recipes' sanity values."""
    mu, pi, adv = (list(c) for c in zip(HIGH_PROB_DROP, RARE_TOKEN_RISE, strict=True))
    log_mu, log_pi = torch.tensor([mu]).log(), torch.tensor([pi]).log()
    # the binary divergences against their closed forms: TV = |pi - mu|, KL = mu ln(mu/pi) + (1-mu) ln((1-mu)/(1-pi))
    closed_kl = [m * math.log(m / p) + (1 - m) * math.log((1 - m) / (1 - p)) for m, p in zip(mu, pi, strict=True)]
    assert binary_tv(log_mu, log_pi)[0].tolist() == pytest.approx([0.19, 0.0099], rel=1e-4)
    assert binary_kl(log_mu, log_pi)[0].tolist() == pytest.approx(closed_kl, rel=1e-4)
    # the masks: DPPO stops the drop and lets the rise through; GRPO's ratio clip the other way round
    assert masked("dppo_binary_tv", mu, pi, adv) == [True, False]
    assert masked("dppo_binary_kl", mu, pi, adv) == [True, False]
    assert masked("grpo_clip_higher", mu, pi, adv) == [False, True]
    # and the loss: a masked token gets no gradient, the other one does
    for name, stopped in (("dppo_binary_tv", 0), ("grpo_clip_higher", 1)):
        recipe = RECIPES[name]
        rule = get_mask(recipe.mask)
        values = rule.values(**{**recipe.profile("sanity").values(), "is_cap": None})
        log_prob = log_pi.clone().requires_grad_()
        loss, stats = surrogate_loss(
            rule,
            values,
            log_prob=log_prob,
            mu_log_prob=log_mu,
            anchor_log_prob=log_mu,
            advantages=torch.tensor([adv]),
            response_mask=torch.ones(1, 2, dtype=torch.bool),
        )
        loss.backward()
        grad = log_prob.grad[0].tolist()
        assert grad[stopped] == 0.0 and grad[1 - stopped] != 0.0, name
        assert stats["mask_frac"] == 0.5, name


# (mu, pi, A) for the efficiency study (Sec. 6, eps 0.2 / 0.28): a rare token's rise and fall, both outside the clip
RARE_RISE = (0.05, 0.2, 1.0)  # r = 4
RARE_FALL = (0.05, 0.01, -1.0)  # r = 0.2
RELAX_CASES = [RARE_TOKEN_RISE, RARE_RISE, RARE_FALL, BIG_RISE, BAD_UPDATE, HIGH_PROB_DROP, SMALL_RISE, ZERO_ADV]
RELAX_EXPECTED = {  # masked? per case: GRPO's clip, lifted where mu < alpha on the recipe's sides
    "grpo_relax_both_alpha0p0": [True, True, True, True, True, False, False, False],  # = GRPO-ClipHigher
    "grpo_relax_both_alpha0p1": [False, False, False, True, True, False, False, False],
    "grpo_relax_high_alpha0p1": [False, False, True, True, True, False, False, False],
    "grpo_relax_low_alpha0p1": [True, True, False, True, True, False, False, False],
    "grpo_relax_both_alpha0p5": [False, False, False, True, True, False, False, False],  # mu = 0.5 is not < 0.5
    "grpo_relax_both_alpha0p7": [False, False, False, False, True, False, False, False],  # mu 0.9 stays clipped
}


@pytest.mark.parametrize("name", sorted(RELAX_EXPECTED))
def test_closed_form_relaxed_clips(name):
    mu, pi, adv = (list(c) for c in zip(*RELAX_CASES, strict=True))
    assert masked(name, mu, pi, adv, profile="efficiency") == RELAX_EXPECTED[name]


def test_relax_at_alpha_zero_is_grpo_clip_higher_token_for_token(gen):
    log_mu, log_pi, _, adv, _ = random_batch(gen, B=64, T=32, spread=1.0)
    t = Tokens(log_pi, log_mu, adv)
    clip = get_mask("grpo_clip_higher")(t, 0.2, 0.28)
    assert clip.any() and (t.anchor < 0.1).any()
    for name in ("grpo_relax_both", "grpo_relax_high", "grpo_relax_low"):
        assert torch.equal(get_mask(name)(t, 0.2, 0.28, 0.0), clip), name
    with pytest.raises(ValueError, match="needs alpha"):
        get_mask("grpo_relax_both")(t, 0.2, 0.28)


def test_recompute_anchor_masks_on_pi_old_not_mu():
    # mu 0.5, pi_old 0.9, pi 0.7, A < 0: on mu the ratio is 1.4 (kept); on pi_old it is 0.78 (< 0.8)
    assert masked("grpo_clip_higher", [0.5], [0.7], [-1.0]) == [False]
    assert masked("minirl", [0.5], [0.7], [-1.0], pi_old=[0.9]) == [True]
    assert masked("minirl_tis", [0.5], [0.7], [-1.0], pi_old=[0.9]) == [True]
    # TV on pi_old: |0.7 - 0.9| = 0.2 > 0.15 and moving down; on mu it moves up (A < 0: kept)
    assert masked("dppo_binary_tv", [0.5], [0.7], [-1.0]) == [False]
    assert masked("dppo_binary_tv_recompute", [0.5], [0.7], [-1.0], pi_old=[0.9]) == [True]
    assert masked("dppo_binary_kl_recompute", [0.5], [0.7], [-1.0], pi_old=[0.9]) == [True]
    assert masked("mask_bad_updates_recompute", [0.5], [0.3], [-1.0], pi_old=[0.9]) == [True]
    assert masked("mask_bad_updates", [0.5], [0.3], [-1.0]) == [False]


def test_scaling_profile_values():
    # scaling: TV 0.2, GRPO eps_high 0.27
    assert masked("dppo_binary_tv", [0.5], [0.68], [1.0], profile="scaling") == [False]
    assert masked("dppo_binary_tv", [0.5], [0.71], [1.0], profile="scaling") == [True]
    assert masked("grpo_clip_higher", [0.5], [0.5 * 1.275], [1.0], profile="scaling") == [True]
    assert masked("grpo_clip_higher", [0.5], [0.5 * 1.275], [1.0], profile="sanity") == [False]


def test_topk_masks_read_the_given_divergence():
    div = torch.tensor([0.3, 0.3, 0.01, 0.3])
    mu, pi, adv = [0.5, 0.5, 0.5, 0.5], [0.6, 0.4, 0.9, 0.6], [1.0, -1.0, 1.0, -1.0]
    assert masked("dppo_topk_tv", mu, pi, adv, topk_divergence=div) == [True, True, False, False]
    with pytest.raises(ValueError, match="top-K divergence"):
        masked("dppo_topk_kl", mu, pi, adv)


@pytest.mark.parametrize("name", ["dppo_topk_tv", "dppo_topk_kl"])
def test_topk_masks_keep_an_unmoved_token(name):
    # pi = mu exactly: r = 1 moves neither way, so even a top-K divergence above delta masks nothing (Eq. 12)
    div = torch.tensor([0.9, 0.9])
    assert masked(name, [0.3, 0.3], [0.3, 0.3], [-1.0, 1.0], topk_divergence=div) == [False, False]


@pytest.mark.parametrize("name", ["dppo_binary_tv", "dppo_binary_kl", "grpo_clip_higher"])
def test_binary_and_ratio_masks_keep_an_unmoved_token_at_zero_threshold(name):
    rule = get_mask(name)
    log_p = torch.tensor([0.3, 0.3]).log()
    assert rule(Tokens(log_p, log_p, torch.tensor([-1.0, 1.0])), 0.0, 0.0).tolist() == [False, False]


def random_batch(gen, B=6, T=9, spread=0.4):
    log_mu = torch.log_softmax(torch.randn(B, T, 5, generator=gen), -1)[..., 0]
    log_pi = (log_mu + spread * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    log_old = (log_mu + 0.1 * torch.randn(B, T, generator=gen)).clamp(max=-1e-4)
    adv = torch.randn(B, 1, generator=gen).expand(B, T).clone()
    adv[0] = 0.0
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 5:] = False
    mask[3, 2:] = False
    return log_mu, log_pi, log_old, adv, mask


# the rules of the surrogate's paper form: a hard mask on a token-level ratio, no penalty
TOKEN_MASK_RECIPES = sorted(
    n for n, r in RECIPES.items() if r.rule is not None and r.rule.is_token_mask and not r.rule.needs_topk
)


@pytest.mark.parametrize("name", TOKEN_MASK_RECIPES)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_gradient_is_minus_A_times_capped_ratio_times_mask(gen, name, agg):
    recipe = RECIPES[name]
    rule = get_mask(recipe.mask)
    hp = recipe.profile(next(iter(recipe.hyperparameters)))
    log_mu, log_pi, log_old, adv, mask = random_batch(gen)
    anchor = log_old if recipe.anchor == "recompute" else log_mu
    log_prob = log_pi.clone().requires_grad_()
    mu_req = log_mu.clone().requires_grad_()
    loss, stats = surrogate_loss(
        rule,
        hp,
        log_prob=log_prob,
        mu_log_prob=mu_req,
        anchor_log_prob=anchor,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=agg,
    )
    loss.backward()
    assert mu_req.grad is None, "no gradient may flow through mu"
    M = ~rule(Tokens(log_pi, anchor, adv, response_mask=mask), *rule.args(hp))
    weight = (log_pi - log_mu).exp()
    if hp.is_cap is not None:
        weight = weight.clamp(max=hp.is_cap)
    per_token = -adv * weight * M * mask
    if agg == "token-mean":
        expected = per_token / mask.sum()
    elif agg == "seq-mean-token-sum":
        expected = per_token / (mask.sum(-1) > 0).sum()
    else:
        expected = per_token / mask.sum(-1, keepdim=True).clamp(min=1) / (mask.sum(-1) > 0).sum()
    torch.testing.assert_close(log_prob.grad, expected.float(), rtol=1e-5, atol=1e-7)
    assert (log_prob.grad[~M & mask] == 0).all()
    assert set(stats) == set(STAT_NAMES)


def test_cap_truncates_the_weight():
    rule = get_mask("pg_tis")
    log_mu = torch.tensor([[math.log(0.01), math.log(0.5)]])
    log_pi = torch.tensor([[math.log(0.2), math.log(0.5)]])  # ratios 20 and 1
    lp = log_pi.clone().requires_grad_()
    loss, stats = surrogate_loss(
        rule,
        rule.values(is_cap=3.0),
        log_prob=lp,
        mu_log_prob=log_mu,
        anchor_log_prob=log_mu,
        advantages=torch.ones(1, 2),
        response_mask=torch.ones(1, 2, dtype=torch.bool),
    )
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-3.0 / 2, -1.0 / 2]]))
    assert stats["is_capped_frac"] == 0.5
    assert stats["is_ratio_max"] == pytest.approx(20.0, rel=1e-5)


def test_statistics_closed_form():
    # tokens: (mu, pi, A); the last one is padding and must not count
    mu = torch.tensor([[0.99, 1e-4, 0.9, 0.5, 0.7]])
    pi = torch.tensor([[0.80, 1e-2, 0.3, 0.6, 0.1]])
    adv = torch.tensor([[-1.0, 1.0, -1.0, 1.0, -1.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    _, stats = surrogate_loss(
        get_mask("dppo_binary_tv"),
        get_mask("dppo_binary_tv").values(delta=0.15, is_cap=None),
        log_prob=pi.log(),
        mu_log_prob=mu.log(),
        anchor_log_prob=mu.log(),
        advantages=adv,
        response_mask=mask,
    )
    diff = [0.80 - 0.99, 1e-2 - 1e-4, 0.3 - 0.9, 0.6 - 0.5]
    expected = {
        "mask_frac": 2 / 4,  # tokens 0 and 2
        "mask_frac_pos": 0 / 2,
        "mask_frac_neg": 2 / 2,
        "pi_mu_abs_diff_mean": sum(abs(d) for d in diff) / 4,
        "pi_mu_abs_diff_max": 0.6,
        "pi_mu_diff_min": -0.6,
        "pi_mu_diff_max": 0.1,
        "bad_update_frac": 1 / 4,  # token 2: A < 0 and mu - pi = 0.6 >= 0.5
        "is_ratio_mean": (0.8 / 0.99 + 100 + 1 / 3 + 1.2) / 4,
        "is_ratio_max": 100.0,
        "is_capped_frac": 0.0,
        "mask_frac_nonzero_adv": 2 / 4,  # no A = 0 token here: the same as mask_frac
        "mask_frac_pos_nonzero_adv": 0 / 4,
        "mask_frac_neg_nonzero_adv": 2 / 4,
        "masked_mu_mean": (0.99 + 0.9) / 2,
        "masked_pi_mean": (0.80 + 0.3) / 2,
        "masked_entropy_mean": math.nan,  # no entropy given
    }
    assert stats == pytest.approx(expected, rel=1e-4, nan_ok=True)


def test_fractions_over_nonzero_advantage_and_masked_token_means():
    # GRPO's clip (0.2 / 0.28) on (mu, pi, A, entropy); A = 0 tokens count in mask_frac's denominator only
    mu = torch.tensor([[0.05, 0.5, 0.9, 0.4, 0.3, 0.2]])
    pi = torch.tensor([[0.20, 0.3, 0.9, 0.4, 0.3, 0.9]])  # r = 4 (A > 0: masked), 0.6 (A < 0: masked), 1, 1, 1, 4.5
    adv = torch.tensor([[1.0, -1.0, 1.0, 0.0, 0.0, 1.0]])
    entropy = torch.tensor([[2.0, 0.5, 0.1, 3.0, 3.0, 9.0]])
    mask = torch.tensor([[True, True, True, True, True, False]])  # the last token is padding
    _, stats = surrogate_loss(
        get_mask("grpo_clip_higher"),
        get_mask("grpo_clip_higher").values(eps_low=0.2, eps_high=0.28, is_cap=None),
        log_prob=pi.log(),
        mu_log_prob=mu.log(),
        anchor_log_prob=mu.log(),
        advantages=adv,
        response_mask=mask,
        entropy=entropy,
    )
    assert stats["mask_frac"] == pytest.approx(2 / 5)
    assert stats["mask_frac_nonzero_adv"] == pytest.approx(2 / 3)
    assert stats["mask_frac_pos_nonzero_adv"] == pytest.approx(1 / 3)
    assert stats["mask_frac_neg_nonzero_adv"] == pytest.approx(1 / 3)
    assert stats["masked_mu_mean"] == pytest.approx((0.05 + 0.5) / 2)
    assert stats["masked_pi_mean"] == pytest.approx((0.20 + 0.3) / 2)
    assert stats["masked_entropy_mean"] == pytest.approx((2.0 + 0.5) / 2)


def test_empty_response_mask_gives_finite_stats():
    lp = torch.zeros(2, 3).log_softmax(-1).requires_grad_()
    loss, stats = surrogate_loss(
        get_mask("dppo_binary_kl"),
        get_mask("dppo_binary_kl").values(delta=0.05, is_cap=None),
        log_prob=lp,
        mu_log_prob=lp.detach(),
        anchor_log_prob=lp.detach(),
        advantages=torch.ones(2, 3),
        response_mask=torch.zeros(2, 3, dtype=torch.bool),
        loss_agg_mode="seq-mean-token-sum",
    )
    undefined = {"masked_mu_mean", "masked_pi_mean", "masked_entropy_mean"}  # means over no masked token
    assert all(math.isfinite(v) for k, v in stats.items() if k not in undefined)
    assert all(math.isnan(stats[k]) for k in undefined)


def test_every_paper_method_has_a_recipe_and_a_rule():
    paper = {
        "dppo_binary_tv",
        "dppo_binary_kl",
        "dppo_topk_tv",
        "dppo_topk_kl",
        "pg_is",
        "pg_tis",
        "grpo_clip_higher",
        "minirl",
        "minirl_tis",
        "dppo_binary_tv_recompute",
        "dppo_binary_kl_recompute",
        "mask_bad_updates",
    }
    assert paper <= set(RECIPES)
    assert paper <= set(mask_names())
    assert all(RECIPES[n].mask == n for n in paper)
