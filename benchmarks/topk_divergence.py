"""Cost of the trainer-side top-K divergence, and what the rollout ships for it, side by side.

  python benchmarks/topk_divergence.py [--tokens 512 --vocab 151936 --k 20 --rounds 5]

Times, in one run and interleaved over rounds (the minimum of each one's medians):

* the log-softmax pass over the vocabulary, which the trainer makes anyway for log pi;
* what the patched engines add per micro-batch (``dppo_bench.verl_plugin.topk``): the logits
  at mu's K kept ids and at the sampled token, then TV and KL(mu || pi) with the engine's own
  log-normaliser recovered from its log pi of the sampled token;
* for reference, the same without reusing the normaliser (a streamed logsumexp pass).

Target: the added cost at most 0.05x of the log-softmax pass at V=151,936, K=20. Then the
bytes per response token that travel from the rollout to the trainer for Top-K, as the agent
loop builds them, against a full-vocabulary anchor.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch.utils.benchmark import Timer

from dppo_bench.divergence import topk_divergence, topk_of_logits
from dppo_bench.verl_plugin.topk.agent_loop import align_to_response
from dppo_bench.verl_plugin.topk.reduce import divergences_from_gathered, logits_at, topk_log_probs

TARGET = 0.05


def inputs(tokens: int, vocab: int, k: int):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(tokens, vocab, generator=g) * 2
    sampled = torch.randint(0, vocab, (tokens,), generator=g)
    ids, mu = topk_of_logits(logits + 0.1 * torch.randn(tokens, vocab, generator=g), k, sampled)
    sampled_lp = torch.log_softmax(logits, -1).gather(-1, sampled[:, None]).squeeze(-1)  # the engine's log pi
    return logits, torch.cat([ids, sampled[:, None]], -1), mu, sampled_lp


def timings(tokens: int, vocab: int, k: int, rounds: int) -> dict[str, float]:
    logits, ids_and_sampled, mu, sampled_lp = inputs(tokens, vocab, k)
    ids = ids_and_sampled[:, :-1]
    steps = {
        "log-softmax pass (the trainer's own)": lambda: torch.log_softmax(logits, -1),
        "top-K TV+KL, engine normaliser reused": lambda: divergences_from_gathered(
            logits_at(logits, ids_and_sampled), sampled_lp, mu
        ),
        "top-K TV+KL, normaliser recomputed": lambda: [
            topk_divergence(mu, lp, kind) for lp in [topk_log_probs(logits, ids)] for kind in ("tv", "kl")
        ],
    }
    best = {name: float("inf") for name in steps}
    for _ in range(rounds):  # interleaved, so drift in machine load hits all alike
        for name, step in steps.items():
            measured = Timer(stmt="step()", globals={"step": step}).blocked_autorange(min_run_time=0.5)
            best[name] = min(best[name], measured.median)
    return best


def carried_bytes(vocab: int, k: int, response_len: int = 1000) -> dict[str, int]:
    """Bytes per response token in the training batch: Top-K fields vs a full-vocabulary anchor."""
    raw = {
        "token_ids": np.arange(response_len, dtype=np.int64),
        "ids": np.zeros((response_len, k), np.int32),
        "logprobs": np.zeros((response_len, k), np.float32),
    }
    ids, logprobs = align_to_response(raw, list(range(response_len)), [1] * response_len)
    return {
        "topk": (ids.nbytes + logprobs.nbytes) // response_len,
        "full_fp32": vocab * 4,
        "full_bf16": vocab * 2,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    t = timings(args.tokens, args.vocab, args.k, args.rounds)
    base = t["log-softmax pass (the trainer's own)"]
    print(f"{args.tokens} tokens x V={args.vocab:,}, K={args.k}, CPU, {torch.get_num_threads()} threads")
    for name, seconds in t.items():
        print(f"{name:40s} {seconds * 1e3:9.3f} ms  {seconds / base:7.4f}x of the log-softmax pass")
    ratio = t["top-K TV+KL, engine normaliser reused"] / base
    print(
        f"added by the trainer-side top-K: {ratio:.4f}x (target <= {TARGET}x): {'PASS' if ratio <= TARGET else 'FAIL'}"
    )
    b = carried_bytes(args.vocab, args.k)
    print(
        f"rollout -> trainer per response token: top-K {b['topk']} B (int32 ids + fp32 log-probs) vs full vocabulary "
        f"{b['full_fp32']:,} B fp32 / {b['full_bf16']:,} B bf16 ({b['full_bf16'] / b['topk']:,.0f}x less than bf16)"
    )


if __name__ == "__main__":
    main()
