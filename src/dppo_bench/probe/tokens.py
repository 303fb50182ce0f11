"""The probe's record: per generated token, the rollout probability mu, the trainer's pi at the *same* parameters,
and the TV distance between the two next-token distributions. Both backends write it; aggregation reads it.

``results/probes/<setting>/mismatch.npz``: float32 arrays ``mu``, ``pi``, ``tv`` (one entry per response token)
and ``meta`` (a JSON string: setting, its sha256, what the TV was computed over, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dppo_bench.config.settings import setting_sha256
from dppo_bench.errors import UserError
from dppo_bench.io import atomic_write


@dataclass(frozen=True)
class MismatchTokens:
    mu: np.ndarray
    pi: np.ndarray
    tv: np.ndarray
    meta: dict

    @property
    def ratio(self) -> np.ndarray:
        """pi / mu of the sampled token."""
        return self.pi / np.maximum(self.mu, np.finfo(np.float32).tiny)

    def probed_with(self, setting) -> bool:
        """Whether the record is of ``setting`` as it is now (an edited setting makes it stale). As for a run's
        record (:func:`dppo_bench.rundir.recorded_training_identity`), the setting the record holds is hashed by
        today's rule; a record without it is judged by the hash it stored."""
        recorded = self.meta.get("setting_config")
        probed = setting_sha256(recorded) if isinstance(recorded, dict) else self.meta.get("setting_sha256")
        return probed == setting.sha256()


def write_tokens(path: Path, mu, pi, tv, meta: dict) -> None:
    """Write atomically (a killed probe leaves no half file for the pipeline to take as done)."""
    arrays = {name: np.asarray(a, dtype=np.float32).ravel() for name, a in (("mu", mu), ("pi", pi), ("tv", tv))}
    if len({a.size for a in arrays.values()}) != 1:
        raise ValueError(f"mu, pi and tv differ in length: {[a.size for a in arrays.values()]}")
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays, meta=np.array(json.dumps(meta, sort_keys=True))))


def read_tokens(path: Path) -> MismatchTokens:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no mismatch probe (run `dppo-bench probe mismatch`)")
    with np.load(path) as data:
        missing = {"mu", "pi", "tv", "meta"} - set(data.files)
        if missing:
            raise UserError(f"{path}: not a mismatch probe record (missing {sorted(missing)})")
        return MismatchTokens(data["mu"], data["pi"], data["tv"], json.loads(str(data["meta"])))
