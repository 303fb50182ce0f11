"""Which tokens a mask drops, as counts of token ids per advantage sign (the paper's App. D).

App. D lists the 50 most frequently clipped tokens of a GRPO run among positive samples (A > 0, r > 1 + eps_high)
and negative ones (A < 0, r < 1 - eps_low): for GRPO's rule those are exactly its masked tokens on each side. A
step keeps counts, never the tokens themselves: at most one entry per distinct id.
"""

from __future__ import annotations

from collections import Counter

import torch

SIDES = ("pos", "neg")  # A > 0, A < 0


class MaskedTokenCounts:
    """Counts of masked token ids on each side, accumulated over the mini-batches of one step."""

    def __init__(self) -> None:
        self.counts = {side: Counter() for side in SIDES}

    @torch.no_grad()
    def add(self, token_ids: torch.Tensor, masked: torch.Tensor, advantages: torch.Tensor) -> None:
        """Count ``token_ids`` where ``masked``, by the sign of ``advantages`` (all (batch, response_len))."""
        for side, chosen in zip(SIDES, (masked & (advantages > 0), masked & (advantages < 0)), strict=True):
            ids, n = torch.unique(token_ids[chosen], return_counts=True)
            self.counts[side].update(dict(zip(ids.tolist(), n.tolist(), strict=True)))

    def as_record(self) -> dict[str, dict[str, int]]:
        """JSON-ready: side -> {token id (a string, as JSON keys are): count}, most frequent first."""
        return {side: {str(i): n for i, n in self.counts[side].most_common()} for side in SIDES}


def top_tokens(records: list[dict[str, dict[str, int]]], side: str, n: int) -> list[tuple[int, int]]:
    """The ``n`` most frequent (token id, count) of ``side`` summed over ``records`` (ties: the smaller id first)."""
    total: Counter = Counter()
    for record in records:
        total.update({int(i): c for i, c in record.get(side, {}).items()})
    return sorted(total.items(), key=lambda item: (-item[1], item[0]))[:n]
