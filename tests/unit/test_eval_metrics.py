"""avg@n, unbiased pass@k (against exact fractions and a brute force over all k-subsets), bootstrap CI."""

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dppo_bench.eval.metrics import avg_at_n, bootstrap_ci, ks_for, mean_pass_at_k, pass_at_k

CASES = json.loads((Path(__file__).parents[1] / "cases" / "pass_at_k.json").read_text())["cases"]


def brute_force(n: int, c: int, k: int) -> Fraction:
    """The fraction of k-subsets of n samples (the first c correct) that contain a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize("case", CASES, ids=[f"n{c['n']}c{c['c']}k{c['k']}" for c in CASES])
def test_pass_at_k_matches_exact_value_and_brute_force(case):
    n, c, k = case["n"], case["c"], case["k"]
    expected = Fraction(case["expected"])
    if n <= 16:  # C(16, 8) = 12870 subsets at most: enumerate them all
        assert brute_force(n, c, k) == expected
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


def test_pass_at_1_is_the_fraction_correct_and_pass_at_n_is_any_correct():
    assert pass_at_k(32, 5, 1) == pytest.approx(5 / 32)
    assert pass_at_k(32, 1, 32) == 1.0
    assert pass_at_k(32, 0, 32) == 0.0


@pytest.mark.parametrize("bad", [(4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(bad):
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        pass_at_k(*bad)


def test_ks_for():
    assert ks_for(32) == [1, 2, 4, 8, 16, 32]
    assert ks_for(1) == [1]
    assert ks_for(12) == [1, 2, 4, 8, 12]


def test_avg_and_mean_pass_at_k_by_hand():
    counts = [(4, 0), (4, 1), (4, 4)]
    assert avg_at_n(counts) == pytest.approx((0 + 0.25 + 1) / 3)
    # pass@2 per problem: 0, 1 - C(3,2)/C(4,2) = 1/2, 1
    assert mean_pass_at_k(counts, 2) == pytest.approx((0 + 0.5 + 1) / 3)
    assert mean_pass_at_k(counts, 1) == pytest.approx(avg_at_n(counts))


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(1)
    values = rng.random(30)
    a = bootstrap_ci(values, seed=3, resamples=2000)
    assert a == bootstrap_ci(values, seed=3, resamples=2000)
    assert a != bootstrap_ci(values, seed=4, resamples=2000)
    low, high = a
    assert low < values.mean() < high
    # the normal approximation of the mean's standard error gives a similar width
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert (high - low) == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_bootstrap_ci_of_constant_values_is_a_point():
    assert bootstrap_ci([0.5] * 10, seed=0, resamples=100) == (0.5, 0.5)
