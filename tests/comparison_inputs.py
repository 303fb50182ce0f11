"""Inputs for the token-by-token comparisons of our rules with their reference implementations.

``realistic``: tokens sampled from a peaked next-token distribution mu, pi a perturbed copy of it (a mismatched
engine, or the policy one update later), GRPO advantages per sequence (groups of 4, some all-equal: A = 0), and
sequences of every length down to one token. ``adversarial``: the corners, row by row: probabilities within 1e-7 of 1
and down to 1e-12, pi = mu exactly, ratios just inside and outside the bounds of the rules, |log pi/mu| beyond the
bounds implementations put on it (10, 20), large advantages, a row without response tokens.
"""

from __future__ import annotations

import math

import torch


def realistic(gen: torch.Generator, B: int = 16, T: int = 40, V: int = 64, mismatch: float = 0.3) -> dict:
    logits = torch.randn(B, T, V, generator=gen) * 3
    mu_all = logits.log_softmax(-1)
    ids = torch.multinomial(mu_all.exp().view(-1, V), 1, generator=gen).view(B, T, 1)
    pi_all = (logits + mismatch * torch.randn(B, T, V, generator=gen)).log_softmax(-1)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T)[None] < lengths[:, None]
    rewards = (torch.rand(B, generator=gen) < 0.5).float().view(-1, 4)
    adv = (rewards - rewards.mean(-1, keepdim=True)).view(B, 1).expand(B, T).clone()
    return {
        "log_mu": mu_all.gather(-1, ids).squeeze(-1),
        "log_pi": pi_all.gather(-1, ids).squeeze(-1),
        "adv": adv,
        "mask": mask,
    }


# (mu, pi, A) per token; each row of ``adversarial`` is one sequence
_ROWS = [
    [(1 - 1e-7, 1 - 1e-7, 1.0), (1 - 1e-7, 0.5, -1.0), (0.5, 1 - 1e-7, 1.0), (1e-12, 0.5, 1.0), (0.5, 1e-12, -1.0)],
    [(0.2, 0.1, -1.0), (0.2, 0.1 * (1 + 1e-3), -1.0), (0.2, 0.1 * (1 - 1e-3), -1.0), (0.1, 0.5, 1.0),
     (0.1, 0.5 * (1 + 1e-3), 1.0)],
    [(1e-12, 1e-12 * math.exp(25), 1.0), (1e-12 * math.exp(25), 1e-12, -1.0), (1e-6, 1e-6 * math.exp(15), -1.0),
     (1e-6 * math.exp(15), 1e-6, 1.0), (0.3, 0.3, 0.0)],
    [(0.9, 0.6, -10.0), (0.05, 0.4, 10.0), (0.6, 0.9, -10.0), (0.4, 0.05, 10.0), (0.5, 0.5, 1.0)],
    [(0.99, 0.8, -1.0), (1e-4, 1e-2, 1.0), (0.9, 0.3, -1.0), (0.5, 0.7, 1.0), (0.5, 0.6, 1.0)],
]  # fmt: skip


def adversarial() -> dict:
    mu = torch.tensor([[m for m, _, _ in row] for row in _ROWS], dtype=torch.float64)
    pi = torch.tensor([[p for _, p, _ in row] for row in _ROWS], dtype=torch.float64)
    adv = torch.tensor([[a for _, _, a in row] for row in _ROWS])
    mask = torch.ones(mu.shape, dtype=torch.bool)
    empty = torch.zeros(1, mu.shape[1], dtype=torch.bool)  # a sequence without response tokens
    return {
        "log_mu": torch.cat([mu.log().float(), torch.full((1, mu.shape[1]), -0.5)]),
        "log_pi": torch.cat([pi.log().float(), torch.full((1, mu.shape[1]), -0.1)]),
        "adv": torch.cat([adv, torch.ones(1, mu.shape[1])]),
        "mask": torch.cat([mask, empty]),
    }


def cases(gen: torch.Generator) -> dict[str, dict]:
    return {"realistic": realistic(gen), "adversarial": adversarial()}
