"""Forward+backward time of every loss mode, side by side in one run, as ratios.

  python benchmarks/loss_overhead.py [--batch 64 --length 4096 --repeats 15]

Prints each of our modes against verl's ``vanilla`` and, for the binary DPPO modes, against
verl's own ``dppo_tv`` / ``dppo_kl`` (the same rule without our statistics). Then the cost of
the trainer-side top-K divergence (K=20, V=151,936) against the log-softmax pass the trainer
makes anyway, and the bytes per token the rollout must ship for top-K vs a full-vocab anchor.
Target: ours <= 1.10x of verl's own for the same rule; top-K <= 0.05x of the log-softmax.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_policy_loss_fn

import dppo_bench.verl_plugin.entry  # noqa: F401  (registers our modes)
from dppo_bench.config import load_methods
from dppo_bench.divergence import topk_divergence
from dppo_bench.topk import topk_log_probs
from dppo_bench.verl_plugin.contract import LOSS_ENV, encode
from dppo_bench.verl_plugin.loss_inputs import LossInputs, exposed


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def loss_step(name: str, data: dict, low: float, high: float, recompute: bool, channel: str | None):
    """One forward+backward of loss mode ``name``: verl's own read the clip ratios, ours the channel's values."""
    cfg = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": 1e4,
            "global_batch_info": {},
            "policy_loss": {},
        }
    )
    fn = get_policy_loss_fn(name)
    old = data["log_old"] if recompute else data["log_mu"]
    weights = data["weights"] if recompute else None
    inputs = LossInputs(rollout_log_prob=data["log_mu"] if recompute else None)  # as the patched ppo_loss hands them

    def step():
        if channel is not None:
            os.environ[LOSS_ENV] = channel
        lp = data["log_pi"].clone().requires_grad_()
        with exposed(inputs):
            loss, _ = fn(
                old_log_prob=old,
                log_prob=lp,
                advantages=data["adv"],
                response_mask=data["mask"],
                config=cfg,
                rollout_is_weights=weights,
            )
        loss.backward()

    return step


def bench_losses(batch: int, length: int, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    log_mu = -torch.rand(batch, length, generator=g) * 3
    log_old = (log_mu + 0.05 * torch.randn(batch, length, generator=g)).clamp(max=-1e-4)
    data = {
        "log_mu": log_mu,
        "log_old": log_old,
        "log_pi": (log_mu + 0.2 * torch.randn(batch, length, generator=g)).clamp(max=-1e-4),
        "adv": torch.randn(batch, 1, generator=g).expand(batch, length).contiguous(),
        "mask": torch.rand(batch, length, generator=g) < 0.9,
        "weights": (log_old - log_mu).exp(),
    }
    modes = {
        "vanilla": (0.2, 0.28, False, None),
        "dppo_tv": (0.15, 0.15, False, None),
        "dppo_kl": (0.05, 0.05, False, None),
    }
    for recipe in load_methods().values():  # each rule of ours at the first profile of its first recipe
        rule = recipe.rule
        if rule is not None and not rule.needs_topk and rule.name not in modes:
            values = recipe.profile(next(iter(recipe.hyperparameters)))
            modes[rule.name] = (0.0, 0.0, recipe.anchor == "recompute", encode(rule, values))
    # interleave the modes over rounds so drift in machine load hits all of them alike
    samples = {m: [] for m in modes}
    steps = {m: loss_step(m, data, *v) for m, v in modes.items()}
    for _ in range(3):
        for m, step in steps.items():
            samples[m].append(median_time(step, repeats))
    t = {m: min(s) for m, s in samples.items()}
    print(f"loss forward+backward, {batch} x {length} tokens, CPU, {torch.get_num_threads()} threads")
    print(f"{'mode':28s} {'ms':>8s} {'x vanilla':>10s} {'x verl same rule':>17s}")
    verl_same = {"dppo_binary_tv": "dppo_tv", "dppo_binary_kl": "dppo_kl"}
    for m in modes:
        same = f"{t[m] / t[verl_same[m]]:.2f}x ({verl_same[m]})" if m in verl_same else ""
        print(f"{m:28s} {t[m] * 1e3:8.2f} {t[m] / t['vanilla']:9.2f}x {same:>17s}")


def bench_topk(tokens: int, vocab: int, k: int, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(tokens, vocab, generator=g) * 2
    ids = torch.randint(0, vocab, (tokens, k), generator=g)
    mu_lp = torch.log_softmax(torch.randn(tokens, k, generator=g), -1) - 0.01
    log_norm = torch.logsumexp(logits, -1)  # what the trainer's log-prob pass already has
    t_softmax = median_time(lambda: torch.log_softmax(logits, -1), repeats)
    t_topk = median_time(
        lambda: topk_divergence(mu_lp, topk_log_probs(logits, ids, normalizer=log_norm), "kl"), repeats
    )
    print(f"\ntop-K divergence, {tokens} tokens x V={vocab}, K={k}")
    print(f"log-softmax pass        {t_softmax * 1e3:8.2f} ms")
    print(f"top-K TV/KL from logits {t_topk * 1e3:8.3f} ms = {t_topk / t_softmax:.4f}x of the log-softmax pass")
    topk_bytes = k * (4 + 4)  # int32 ids + float32 log-probs
    print(
        f"rollout -> trainer per token: top-K {topk_bytes} B vs full-vocab anchor {vocab * 4:,} B (fp32) "
        f"/ {vocab * 2:,} B (bf16): {vocab * 2 / topk_bytes:,.0f}x less than bf16"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--topk-tokens", type=int, default=256)
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--k", type=int, default=20)
    args = p.parse_args()
    bench_losses(args.batch, args.length, args.repeats)
    bench_topk(args.topk_tokens, args.vocab, args.k, args.repeats)


if __name__ == "__main__":
    main()
