"""The paper's values (read off its figures) for an experiment, from results/reference/paper.csv."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from dppo_bench.config import REPO_ROOT, ConfigError

PAPER_CSV = REPO_ROOT / "results" / "reference" / "paper.csv"
FIELDS = ["experiment", "setting", "method", "metric", "stat", "value", "source"]


@dataclass(frozen=True)
class Reference:
    value: float
    source: str


def load_references(experiment_id: str, path: Path = PAPER_CSV) -> dict[tuple[str, str, str, str], Reference]:
    """(setting, method, metric, stat) -> the paper's value, for one experiment."""
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != FIELDS:
            raise ConfigError(path, "header", f"expected columns {FIELDS}, found {reader.fieldnames}")
        out = {}
        for line, row in enumerate(reader, start=2):
            if row["experiment"] != experiment_id:
                continue
            try:
                value = float(row["value"])
            except ValueError:
                raise ConfigError(path, f"line {line}: value", f"not a number: {row['value']!r}") from None
            out[(row["setting"], row["method"], row["metric"], row["stat"])] = Reference(value, row["source"])
        return out
