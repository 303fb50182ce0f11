"""verl's FileLogger rows -> the canonical rows of metrics.jsonl, resume-safe.

verl 0.9.1's ``FileLogger`` (``verl/utils/tracking.py``) writes one ``{"step": N, "data": {key: value}}`` line per
``Tracking.log`` call to ``$VERL_FILE_LOGGER_PATH``, opening the file with ``"wb"``: a restarted trainer would
erase the history. So every attempt logs to a file of its own (``RunDir/verl_logs/attempt-<k>.jsonl``), and
:func:`apply_attempt` folds it into metrics.jsonl:

* rows past the step the attempt resumed from (verl's ``latest_checkpointed_iteration.txt``) are dropped first:
  the crashed attempt logged them, the resumed one logs them again;
* the attempt's rows past that step are appended, keys mapped by :data:`dppo_bench.canonical.VERL_KEYS`;
* the row at the resumed step itself (verl validates again before training when ``val_before_train``) is merged
  into the recorded row of that step, so the validation of that step is the one its dump file now holds.

Applying an attempt twice gives the same file, so a launcher killed half-way through the fold redoes it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.errors import UserError
from dppo_bench.io import read_jsonl
from dppo_bench.rundir import RunDir

_VALIDATION = re.compile(canonical.VERL_VALIDATION_KEY)


class RecordError(UserError):
    """A verl log that cannot be read: the message names the file and the line."""


def read_file_log(path: Path) -> list[tuple[int, dict]]:
    """(step, data) of every complete line; a last line cut short by a kill is ignored."""
    if not path.is_file():
        return []
    rows, _ = read_jsonl(path)
    for n, obj in rows:
        if not isinstance(obj, dict) or not isinstance(obj.get("step"), int) or not isinstance(obj.get("data"), dict):
            raise RecordError(f"{path}: line {n}: expected {{'step': int, 'data': {{...}}}} (verl's FileLogger row)")
    return [(obj["step"], obj["data"]) for _, obj in rows]


CLIP_KEY, CLIP_LONGEST = "response_length/clip_ratio", "response_length/max"


class MetricMap:
    """verl's keys of one run -> canonical names; validation keys need the run's benchmarks."""

    def __init__(self, benchmarks: Mapping[str, str], max_response_length: int | None = None):
        """``benchmarks``: data_source -> benchmark id, for every online validation set of the run;
        ``max_response_length``: the run's token limit, which verl's clip ratio is corrected by (see :meth:`row`)."""
        self.benchmarks = dict(benchmarks)
        self.max_response_length = max_response_length

    @classmethod
    def for_benchmarks(cls, benchmarks: Iterable[BenchmarkSpec], max_response_length: int | None = None) -> MetricMap:
        by_source: dict[str, str] = {}
        for b in benchmarks:
            source = b.data_source
            if source in by_source:
                raise UserError(
                    f"benchmarks {by_source[source]} and {b.id} share data_source {source!r}: verl's validation "
                    "metrics are keyed by data_source, so one run cannot validate on both"
                )
            by_source[source] = b.id
        return cls(by_source, max_response_length)

    def name(self, key: str) -> str | None:
        if key in canonical.VERL_KEYS:
            return canonical.VERL_KEYS[key]
        m = _VALIDATION.fullmatch(key)
        if m and m["data_source"] in self.benchmarks:
            return canonical.eval_metric(self.benchmarks[m["data_source"]], int(m["n"]))
        return None

    def row(self, step: int, data: Mapping[str, object]) -> dict:
        """The canonical row of one verl log entry (only mapped, numeric values; non-finite as None)."""
        out: dict = {"step": step}
        for key, value in data.items():
            name = self.name(key)
            if name is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out[name] = value if math.isfinite(value) else None
        # verl's response_length/clip_ratio is the share of responses as long as the batch's response tensor, which
        # verl's v1 trainer pads to the batch's longest response, not to the token limit: with no response cut off,
        # it counts the longest ones (measured with SmolLM2, verl_cpu_smollm). Only when the longest reached the
        # limit are those the cut-off ones.
        longest = data.get(CLIP_LONGEST)
        if self.max_response_length is not None and CLIP_KEY in data and isinstance(longest, int | float):
            if longest < self.max_response_length:
                out[canonical.VERL_KEYS[CLIP_KEY]] = 0.0
        return out


def _merge(rows: list[tuple[int, dict]], metric_map: MetricMap) -> dict[int, dict]:
    """One canonical row per step (verl may log a step more than once; later values win)."""
    merged: dict[int, dict] = {}
    for step, data in rows:
        merged.setdefault(step, {"step": step}).update(metric_map.row(step, data))
    return merged


def apply_attempt(run_dir: RunDir, log: Path, resumed_from: int, metric_map: MetricMap) -> dict:
    """Fold one attempt's log into metrics.jsonl (idempotent); returns what it did."""
    attempt = _merge(read_file_log(log), metric_map)
    last_step = max(attempt, default=None)
    recorded = {r["step"]: r for r in run_dir.read_metrics() if r["step"] == resumed_from}
    at_resume = attempt.pop(resumed_from, None)
    run_dir.truncate_metrics(resumed_from if at_resume is None else resumed_from - 1)
    rows = []
    if at_resume is not None:
        rows.append({**recorded.get(resumed_from, {}), **at_resume})
    rows += [attempt[s] for s in sorted(attempt) if s > resumed_from]
    run_dir.append_metrics(rows)
    return {"rows": len(rows), "last_step": last_step}
