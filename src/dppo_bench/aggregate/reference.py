"""The paper's values (read off its figures), from results/reference/paper.csv.

A reading is keyed by what it measures (setting, method, metric, statistic), not by the figure it was read
from: the same run and metric shown in several experiments gets the same reference in each. The figure it
was read from stays with it (``paper_items``) for the tables' footnote.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from dppo_bench.config import REPO_ROOT, TABLE_STATS, ConfigError, Experiment, find_experiment

PAPER_CSV = REPO_ROOT / "results" / "reference" / "paper.csv"
FIELDS = ["setting", "method", "metric", "stat", "step", "value", "precision", "paper_item", "source"]
# a reading is of a table column's statistic (config.Column.stat), compared with ours, or "at_step": a value at one
# step, drawn only
AT_STEP = "at_step"


class Key(NamedTuple):
    setting: str
    method: str
    metric: str
    stat: str
    step: int | None  # only for at_step


@dataclass(frozen=True)
class Reference:
    value: float
    precision: float  # +- of the reading by eye
    paper_items: tuple[str, ...]  # the figures it was read off
    source: str


References = dict[Key, Reference]


def _number(path: Path, line: int, field: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(path, f"line {line}: {field}", f"not a number: {text!r}") from None


def _parse(path: Path, line: int, row: dict) -> tuple[Key, Reference]:
    stat = row["stat"]
    if stat not in TABLE_STATS | {AT_STEP}:
        raise ConfigError(path, f"line {line}: stat", f"{stat!r} is none of {sorted(TABLE_STATS | {AT_STEP})}")
    if (stat == AT_STEP) != bool(row["step"]):
        raise ConfigError(path, f"line {line}: step", "a step is given exactly when the stat is at_step")
    if not row["paper_item"]:
        raise ConfigError(path, f"line {line}: paper_item", "name the figure the value was read from")
    step = int(_number(path, line, "step", row["step"])) if row["step"] else None
    key = Key(row["setting"], row["method"], row["metric"], stat, step)
    value = _number(path, line, "value", row["value"])
    precision = _number(path, line, "precision", row["precision"])
    return key, Reference(value, precision, (row["paper_item"],), row["source"])


def _merge(path: Path, line: int, key: Key, old: Reference, new: Reference) -> Reference:
    """Two readings of one quantity (off two figures) must agree within their precision; they then count as one."""
    if abs(old.value - new.value) > max(old.precision, new.precision):
        raise ConfigError(
            path,
            f"line {line}: value",
            f"{key} reads {new.value} off {new.paper_items[0]} but {old.value} off {', '.join(old.paper_items)}",
        )
    n = len(old.paper_items)
    return Reference(
        (old.value * n + new.value) / (n + 1),
        max(old.precision, new.precision),
        old.paper_items + new.paper_items,
        f"{old.source}; {new.source}",
    )


def read_references(path: Path = PAPER_CSV) -> References:
    """Every reading of the file, one per measured quantity."""
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != FIELDS:
            raise ConfigError(path, "header", f"expected columns {FIELDS}, found {reader.fieldnames}")
        out: References = {}
        for line, row in enumerate(reader, start=2):
            key, ref = _parse(path, line, row)
            out[key] = _merge(path, line, key, out[key], ref) if key in out else ref
        return out


def for_experiment(experiment: Experiment, references: References) -> References:
    """The readings of the experiment's runs (any figure they were read from)."""
    runs = {(g.setting, m) for g in experiment.runs for m in g.methods}
    return {k: v for k, v in references.items() if (k.setting, k.method) in runs}


def load_references(experiment_id: str, path: Path = PAPER_CSV) -> References:
    return for_experiment(find_experiment(experiment_id), read_references(path))


def at_steps(references: References, setting: str, method: str, metric: str) -> list[tuple[int, Reference]]:
    """The run's readings at single steps, by step."""
    found = [
        (k.step, r)
        for k, r in references.items()
        if k.stat == AT_STEP and (k.setting, k.method, k.metric) == (setting, method, metric)
    ]
    return sorted(found, key=lambda x: x[0])
