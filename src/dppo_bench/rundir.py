"""The run directory both backends write (DESIGN.md section 4).

``results/runs/<setting>/<method>/seed<k>/``: ``run.json`` (provenance and status),
``metrics.jsonl`` (one JSON object per training step, NaN as null), ``checkpoints/``, ``eval/``.

metrics.jsonl is append-only and resume-safe: rows reach it before the checkpoint that covers
them is committed, and a resumed run first drops rows past its checkpoint, so a crash at any
point leaves neither a lost nor a duplicated step.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunDir:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.run_json = self.path / "run.json"
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"
        self.done = self.path / "train.completed"  # the pipeline's marker: written last, by a finished run

    def create(self) -> RunDir:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self

    def read_run(self) -> dict:
        return json.loads(self.run_json.read_text()) if self.run_json.exists() else {}

    def write_run(self, info: dict) -> None:
        _atomic_write(self.run_json, json.dumps(info, indent=2, sort_keys=True) + "\n")

    def update_run(self, **fields: Any) -> dict:
        info = {**self.read_run(), **fields}
        self.write_run(info)
        return info

    def mark_done(self, outcome: dict) -> None:
        _atomic_write(self.done, json.dumps(outcome, sort_keys=True) + "\n")

    def append_metrics(self, rows: list[dict]) -> None:
        """Append rows (each with an integer ``step``); non-finite floats become null."""
        if not rows:
            return
        with self.metrics.open("a") as f:
            for row in rows:
                f.write(json.dumps({k: _finite(v) for k, v in row.items()}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self) -> list[dict]:
        if not self.metrics.exists():
            return []
        rows = []
        for n, line in enumerate(self.metrics.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{self.metrics}: line {n} is not valid JSON ({e})") from None
        return rows

    def truncate_metrics(self, last_step: int) -> None:
        """Keep only rows up to ``last_step`` (the step the resumed checkpoint covers).

        A final line cut short by a kill during the append is dropped with the rows past the checkpoint.
        """
        if not self.metrics.exists():
            return
        lines = [ln for ln in self.metrics.read_text().splitlines() if ln.strip()]
        keep = []
        for n, line in enumerate(lines, 1):
            try:
                step = json.loads(line)["step"]
            except json.JSONDecodeError:
                if n < len(lines):
                    raise ValueError(f"{self.metrics}: line {n} is not valid JSON and is not the last line") from None
                break
            if step <= last_step:
                keep.append(line)
        if len(keep) != len(lines) or not self.metrics.read_text().endswith("\n"):
            _atomic_write(self.metrics, "".join(ln + "\n" for ln in keep))

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:06d}"

    def saved_steps(self) -> list[int]:
        """Steps with a complete checkpoint (a directory renamed into place)."""
        if not self.checkpoints.is_dir():
            return []
        return sorted(int(p.name[5:]) for p in self.checkpoints.glob("step_*") if p.name[5:].isdigit())
