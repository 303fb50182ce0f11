import math

import pytest
import torch

from dppo_bench import divergence as D


def random_logprobs(gen, *shape):
    return torch.log_softmax(torch.randn(*shape, generator=gen) * 3, dim=-1)


def test_binary_closed_form():
    mu, pi = torch.tensor([0.99, 1e-4]), torch.tensor([0.80, 1e-2])
    tv = D.binary_tv(mu.log(), pi.log())
    torch.testing.assert_close(tv, torch.tensor([0.19, 0.0099]))
    expected_kl = [
        m * math.log(m / p) + (1 - m) * math.log((1 - m) / (1 - p))
        for m, p in zip(mu.tolist(), pi.tolist(), strict=True)
    ]
    torch.testing.assert_close(D.binary_kl(mu.log(), pi.log()), torch.tensor(expected_kl), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("log_mu", "log_pi"),
    [(-0.003, -1e-9), (-1e-9, -0.003), (-2e-7, -3e-8), (-0.05, -1e-7), (-1e-8, -1e-8), (-5.0, -1e-9)],
)
def test_binary_kl_exact_when_a_probability_is_within_rounding_of_one(log_mu, log_pi):
    """exp(-1e-9) is 1.0 in float32, so 1 - pi computed from pi is 0; the KL must come from the log-probs."""
    p = math.exp(log_mu)
    exact = p * (log_mu - log_pi) - math.expm1(log_mu) * (math.log(-math.expm1(log_mu)) - math.log(-math.expm1(log_pi)))
    got = D.binary_kl(torch.tensor([log_mu]), torch.tensor([log_pi])).item()
    assert got == pytest.approx(exact, rel=1e-3, abs=1e-7)


def test_binary_kl_keeps_a_confident_token_the_paper_keeps():
    # the token: exact KL 0.042 < delta 0.05 (kept); from 1 - pi = 0 floored at 1e-12 it read 0.062
    assert D.binary_kl(torch.tensor([-0.003]), torch.tensor([-1e-9])).item() < 0.05


def test_topk_closed_form():
    # kept {a, b} with mu = (0.5, 0.3), pi = (0.4, 0.4); other bucket 0.2 vs 0.2
    mu, pi = torch.tensor([[0.5, 0.3]]), torch.tensor([[0.4, 0.4]])
    tv = D.topk_divergence(mu.log(), pi.log(), "tv")
    torch.testing.assert_close(tv, torch.tensor([0.5 * (0.1 + 0.1 + 0.0)]))
    kl = D.topk_divergence(mu.log(), pi.log(), "kl")
    torch.testing.assert_close(kl, torch.tensor([0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)]))


@pytest.mark.parametrize("kind", ["tv", "kl"])
def test_binary_le_topk_le_exact_and_equal_at_full_vocab(gen, kind):
    V, K, N = 50, 8, 200
    mu_full = random_logprobs(gen, N, V)
    pi_full = torch.log_softmax(mu_full + 0.5 * torch.randn(N, V, generator=gen), dim=-1)
    sampled = torch.multinomial(mu_full.exp(), 1, generator=gen).squeeze(-1)
    mu_s = mu_full.gather(-1, sampled[:, None]).squeeze(-1)
    pi_s = pi_full.gather(-1, sampled[:, None]).squeeze(-1)
    binary = D.binary_tv(mu_s, pi_s) if kind == "tv" else D.binary_kl(mu_s, pi_s)

    ids, mu_k = D.topk_of_log_probs(mu_full, K, sampled)
    assert (ids == sampled[:, None]).any(-1).all(), "the sampled token must be in the kept set"
    topk = D.topk_divergence(mu_k, pi_full.gather(-1, ids), kind)
    exact = D.exact_divergence(mu_full, pi_full, kind)
    assert (binary <= topk + 1e-6).all()
    assert (topk <= exact + 1e-6).all()
    assert (topk < exact - 1e-4).any(), "with K < V the bound should be strict somewhere"

    full_ids, mu_v = D.topk_of_log_probs(mu_full, V, sampled)
    at_v = D.topk_divergence(mu_v, pi_full.gather(-1, full_ids), kind)
    torch.testing.assert_close(at_v, exact, atol=1e-5, rtol=1e-5)


def test_kept_set_replaces_the_last_entry_when_sampled_is_missing():
    ids = torch.tensor([[5, 3, 9], [5, 3, 9]])
    lps = torch.tensor([[-0.1, -2.0, -3.0], [-0.1, -2.0, -3.0]])
    out_ids, out_lps = D.kept_token_set(ids, lps, torch.tensor([3, 7]), torch.tensor([-2.0, -6.0]))
    assert out_ids.tolist() == [[5, 3, 9], [5, 3, 7]]
    torch.testing.assert_close(out_lps, torch.tensor([[-0.1, -2.0, -3.0], [-0.1, -2.0, -6.0]]))


@pytest.mark.parametrize("kind", ["tv", "kl"])
def test_safe_at_zero_one_inf_and_bf16(kind):
    ninf = float("-inf")
    mu = torch.tensor([[0.0, ninf], [ninf, ninf], [0.0, ninf], [-1e-9, -25.0]])
    pi = torch.tensor([[ninf, 0.0], [ninf, ninf], [0.0, ninf], [-30.0, -1e-12]])
    for a, b in [(mu, pi), (mu.bfloat16(), pi.bfloat16())]:
        out = D.topk_divergence(a, b, kind)
        assert torch.isfinite(out).all() and (out >= 0).all(), out
        assert torch.isfinite(D.exact_divergence(a, b, kind)).all()
    assert D.topk_divergence(mu, pi, kind)[2] == 0.0  # identical point masses
    if kind == "tv":
        assert D.topk_divergence(mu, pi, kind)[0] == pytest.approx(1.0)  # disjoint point masses
    sampled = torch.tensor([0.0, ninf, -1e-9])
    other = torch.tensor([ninf, 0.0, -40.0])
    for f in (D.binary_tv, D.binary_kl):
        for a, b in [(sampled, other), (other, sampled), (sampled.bfloat16(), other.bfloat16())]:
            assert torch.isfinite(f(a, b)).all()


def test_bf16_inputs_are_computed_in_fp32(gen):
    mu = random_logprobs(gen, 64, 20).bfloat16()
    pi = torch.log_softmax(mu.float() + 0.3 * torch.randn(64, 20, generator=gen), -1).bfloat16()
    for kind in ("tv", "kl"):
        low = D.topk_divergence(mu, pi, kind)
        assert low.dtype == torch.float32
        torch.testing.assert_close(low, D.topk_divergence(mu.float(), pi.float(), kind), atol=0, rtol=0)


def test_rest_mass_accurate_when_kept_mass_is_near_one():
    # kept mass 1 - 1e-7: in float32, 1 - exp(logsumexp) is 1.19e-7 or 0; expm1 keeps 1e-7
    rest, log_rest = D._rest(torch.tensor([[math.log1p(-1e-7)]]))
    torch.testing.assert_close(rest, torch.tensor([1e-7]), rtol=1e-3, atol=0)
    torch.testing.assert_close(log_rest, torch.tensor([math.log(1e-7)]), rtol=1e-4, atol=0)


def test_unknown_kind_and_shape_mismatch():
    with pytest.raises(ValueError, match="kind"):
        D.topk_divergence(torch.zeros(1, 2), torch.zeros(1, 2), "js")
    with pytest.raises(ValueError, match="shape"):
        D.topk_divergence(torch.zeros(1, 2), torch.zeros(1, 3), "tv")
