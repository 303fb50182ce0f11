"""The run-directory file format of masked-token counts (the paper's App. D): the verl backend writes a step's
counts per rank (dppo_bench.verl_plugin.masked_tokens) and aggregation reads them
(dppo_bench.aggregate.masked_tokens). What is counted is dppo_bench.methods.masked_tokens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dppo_bench.io import atomic_write_text
from dppo_bench.methods.masked_tokens import MaskedTokenCounts

# In the run directory (RunDir.masked_tokens): masked_tokens/step<N>/dp<d>-rank<r>.json
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
