"""Cost of the trainer-side top-K divergence, and what the rollout ships for it, side by side.

  python benchmarks/topk_divergence.py [--tokens 512 --vocab 151936 --k 20 --rounds 5] [--device cuda]

Times, in one run and interleaved over rounds (the minimum of each one's medians):

* the log-softmax pass over the vocabulary, which the trainer makes anyway for log pi;
* what the patched engines add per micro-batch (``dppo_bench.verl_plugin.topk``): the logits
  at mu's K kept ids and at the sampled token, then TV and KL(mu || pi) with the engine's own
  log-normaliser recovered from its log pi of the sampled token;
* for reference, the same without reusing the normaliser (a streamed logsumexp pass).

Target: the added cost at most 0.05x of the log-softmax pass at V=151,936, K=20. Then the
bytes per response token that travel from the rollout to the trainer for Top-K, as the agent
loop builds them, against a full-vocabulary anchor.

``--device cuda`` runs the same measurement on a GPU at a micro-batch's token count (default
16,384 tokens; the settings allow up to 32,768 per GPU), timing with a clock that waits for the
queued kernels, and first checks that the engine path equals ``topk_divergence`` on the full
softmax within ``CHECK_ATOL``.
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.benchmark import Timer

from dppo_bench.divergence import topk_divergence, topk_of_log_probs
from dppo_bench.topk import divergences_from_gathered, logits_at, topk_log_probs
from dppo_bench.verl_plugin.topk.agent_loop import align_to_response

TARGET = 0.05
CHECK_ATOL = 1e-5  # float32: recovering the normaliser from log pi costs a few ulps of the logit
DEFAULT_TOKENS = {"cpu": 512, "cuda": 16_384}

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def inputs(tokens: int, vocab: int, k: int, device: torch.device) -> Inputs:
    g = torch.Generator(device=device).manual_seed(0)  # generated on the device: no host copy of T x V
    logits = torch.randn(tokens, vocab, generator=g, device=device) * 2
    sampled = torch.randint(0, vocab, (tokens,), generator=g, device=device)
    ids, mu = topk_of_log_probs(
        (logits + 0.1 * torch.randn(tokens, vocab, generator=g, device=device)).float().log_softmax(-1), k, sampled
    )
    sampled_lp = torch.log_softmax(logits, -1).gather(-1, sampled[:, None]).squeeze(-1)  # the engine's log pi
    return logits, torch.cat([ids, sampled[:, None]], -1), mu, sampled_lp


def clock(device: torch.device) -> Callable[[], float]:
    """A timer that first waits for the device: CUDA kernels run asynchronously to the host."""
    if device.type == "cpu":
        return timeit.default_timer

    def synced() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return synced


@torch.no_grad()
def max_errors(data: Inputs) -> dict[str, float]:
    """Largest |engine path - topk_divergence on the full softmax| over tokens, per kind."""
    logits, ids_and_sampled, mu, sampled_lp = data
    engine = divergences_from_gathered(logits_at(logits, ids_and_sampled), sampled_lp, mu)
    pi = torch.log_softmax(logits.float(), -1).gather(-1, ids_and_sampled[:, :-1])
    return {kind: (engine[kind] - topk_divergence(mu, pi, kind)).abs().max().item() for kind in ("tv", "kl")}


def report_check(data: Inputs) -> None:
    errors = max_errors(data)
    ok = max(errors.values()) <= CHECK_ATOL
    print(
        f"engine path vs topk_divergence on the full softmax: max |diff| TV {errors['tv']:.2e}, "
        f"KL {errors['kl']:.2e} (tolerance {CHECK_ATOL:.0e}): {'PASS' if ok else 'FAIL'}"
    )


def timings(data: Inputs, rounds: int) -> dict[str, float]:
    logits, ids_and_sampled, mu, sampled_lp = data
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
            timer = Timer(stmt="step()", globals={"step": step}, timer=clock(logits.device))
            measured = timer.blocked_autorange(min_run_time=0.5)
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
    p.add_argument("--tokens", type=int, help=", ".join(f"default {n} on {d}" for d, n in DEFAULT_TOKENS.items()))
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", choices=sorted(DEFAULT_TOKENS), default="cpu")
    args = p.parse_args()
    tokens = args.tokens or DEFAULT_TOKENS[args.device]
    device = torch.device(args.device)
    data = inputs(tokens, args.vocab, args.k, device)
    cuda = device.type == "cuda"
    where = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"{tokens} tokens x V={args.vocab:,}, K={args.k}, {where}")
    if cuda:  # the prepared GPU check: the kernels at real sizes give the reference's numbers
        report_check(data)
    t = timings(data, args.rounds)
    base = t["log-softmax pass (the trainer's own)"]
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
