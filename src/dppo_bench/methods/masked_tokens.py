"""Which tokens a mask drops, as counts of token ids per advantage sign (the paper's App. D).

App. D lists the 50 most frequently clipped tokens of a GRPO run among positive samples (A > 0, r > 1 + eps_high)
and negative ones (A < 0, r < 1 - eps_low): for GRPO's rule those are exactly its masked tokens on each side. A
step keeps counts, never the tokens themselves: at most one entry per distinct id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import torch

from dppo_bench.io import atomic_write_text

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


# The verl backend writes a step's counts per rank (dppo_bench.verl_plugin.masked_tokens), in the run directory:
# masked_tokens/step<N>/dp<d>-rank<r>.json
RUN_DIR_NAME = "masked_tokens"
_RANK_FILE = re.compile(r"dp(?P<dp>\d+)-rank(?P<rank>\d+)\.json")


def step_file(root: Path, step: int, dp_rank: int, rank: int) -> Path:
    return root / f"step{step:06d}" / f"dp{dp_rank:04d}-rank{rank:05d}.json"


def write_counts(path: Path, counts: MaskedTokenCounts) -> None:
    atomic_write_text(path, json.dumps(counts.as_record()))


def read_rank_files(root: Path) -> dict[int, dict[str, dict[str, int]]]:
    """step -> its counts summed over data-parallel ranks, one file of each (ranks that share a data-parallel rank,
    tensor or sequence parallel, saw the same tokens)."""
    out = {}
    for step_dir in sorted(root.glob("step*")):
        per_dp: dict[int, Path] = {}
        for path in sorted(step_dir.glob("dp*-rank*.json")):
            m = _RANK_FILE.fullmatch(path.name)
            if m:
                per_dp.setdefault(int(m["dp"]), path)
        total = MaskedTokenCounts()
        for path in per_dp.values():
            for side, counts in json.loads(path.read_text()).items():
                total.counts[side].update({int(i): n for i, n in counts.items()})
        out[int(step_dir.name[len("step") :])] = total.as_record()
    return out
