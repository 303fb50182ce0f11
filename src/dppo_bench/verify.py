"""Every record a run holds, checked (``dppo-bench verify``, and aggregation before it reads a run).

A run's records vouch for each other: ``train.completed`` records the sha256 of run.json and metrics.jsonl,
``eval/<benchmark>/summary.json`` that of each step's scores.json, and scores.json that of its samples and verdicts.
Besides those links, each file must read (JSON, rows), say what its neighbours say (metrics rows 1..last step once,
summary avg@n = scores.json's, avg@n and pass@k = what the per-problem counts give, samples rows = n per problem),
and every checkpoint must match its SHA256SUMS. A finding names the file and what is wrong with it.

Damage to what an evaluation derived (summary.json, scores.json, verdicts, samples) or to train.completed can be
redone: ``redo`` names the marker whose removal makes the pipeline evaluate (or confirm the training) again.
run.json, metrics.jsonl and checkpoints cannot be made again; their damage is refused, never repaired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dppo_bench.eval.metrics import avg_at_n, mean_pass_at_k
from dppo_bench.eval.samples import SamplesError, read_samples
from dppo_bench.io import CorruptFileError, file_sha256, read_json, verify_checksums
from dppo_bench.rundir import SAMPLES, SCORES, SUMMARY, RunDir

FINISHED = ("completed", "diverged")


@dataclass(frozen=True)
class Damage:
    path: Path
    message: str  # names the file
    redo: Path | None = None  # the marker to remove so that the pipeline makes the damaged record again

    def __str__(self) -> str:
        return self.message


def _at(path: Path, what: str, redo: Path | None = None) -> Damage:
    return Damage(path, f"{path}: {what}", redo)


def _read_object(path: Path, found: list[Damage], redo: Path | None = None) -> dict | None:
    try:
        value = read_json(path)
    except CorruptFileError as e:
        found.append(Damage(path, str(e), redo))
        return None
    if not isinstance(value, dict):
        found.append(_at(path, "expected a JSON object; the file is damaged", redo))
        return None
    return value


def _records(marker: dict | None) -> dict:
    """The ``records`` a marker holds (file -> sha256); none in a marker from before they were recorded."""
    records = (marker or {}).get("records")
    return {k: v for k, v in records.items() if isinstance(k, str)} if isinstance(records, dict) else {}


def _recorded(path: Path, sha256: object, by: Path, event: str, found: list[Damage], redo: Path | None) -> None:
    """``path`` still has the sha256 ``by`` recorded for it when ``event``."""
    if not path.is_file():
        found.append(_at(path, f"missing, but {by} records it", redo))
    elif file_sha256(path) != sha256:
        found.append(_at(path, f"changed after {event} (its sha256 differs from the one {by} recorded)", redo))


def verify_run(run: RunDir, *, deep: bool = True) -> list[Damage]:
    """What is damaged in the run; empty when every record is whole. ``deep``: also checkpoints and samples, which
    aggregation does not read (hashing them takes longest)."""
    found: list[Damage] = []
    info = _run_record(run, found)
    if info is None:
        return found
    _metrics(run, info, found)
    _marker(run, found)
    if deep:
        for step in run.saved_steps():
            try:
                verify_checksums(run.checkpoint_dir(step))
            except CorruptFileError as e:
                found.append(Damage(run.checkpoint_dir(step), str(e)))
    for eval_dir in sorted(p for p in (run.path / "eval").glob("*") if p.is_dir()):
        _evaluation(eval_dir, deep, found)
    return found


def _run_record(run: RunDir, found: list[Damage]) -> dict | None:
    if not run.run_json.is_file():
        found.append(_at(run.run_json, "missing: this is not a run directory, or its run never started"))
        return None
    info = _read_object(run.run_json, found)
    if info is None:
        return None
    setting, method, seed = run.path.parts[-3:] if len(run.path.parts) >= 3 else ("", "", "")
    if seed.startswith("seed") and seed[4:].isdigit():  # the layout <setting>/<method>/seed<k>: run.json must agree
        for field, expected in (("setting", setting), ("method", method), ("seed", int(seed[4:]))):
            if field in info and info[field] != expected:
                found.append(_at(run.run_json, f"field '{field}' is {info.get(field)!r}, not this directory's"))
    return info


def _metrics(run: RunDir, info: dict, found: list[Damage]) -> None:
    finished = info.get("status") in FINISHED
    if not run.metrics.is_file():
        if finished:
            found.append(_at(run.metrics, f"missing, but run.json says the run {info['status']}"))
        return
    try:
        steps = [row["step"] for row in run.read_metrics()]
    except CorruptFileError as e:
        found.append(Damage(run.metrics, str(e)))
        return
    if steps != sorted(set(steps)):
        found.append(_at(run.metrics, "a step repeats or goes back; the file is damaged or two trainers wrote it"))
    last = info.get("last_step")
    if finished and isinstance(last, int):
        missing = sorted(set(range(1, last + 1)) - set(steps))
        beyond = [s for s in steps if s > last]
        if missing or beyond:
            what = f"steps {missing[:5]} missing" if missing else f"steps {beyond[:5]} past the last one"
            found.append(_at(run.metrics, f"{what}: the run {info['status']} at step {last}"))
    data = run.metrics.read_bytes()
    if finished and data and not data.endswith(b"\n"):
        found.append(_at(run.metrics, "its last line is cut short, but the run finished"))


def _marker(run: RunDir, found: list[Damage]) -> None:
    if not run.done.exists():
        return
    outcome = _read_object(run.done, found, run.done)
    for name, sha256 in _records(outcome).items():
        _recorded(run.path / name, sha256, run.done, "the run finished", found, None)


def _evaluation(eval_dir: Path, deep: bool, found: list[Damage]) -> None:
    summary_path = redo = eval_dir / SUMMARY  # without it, the pipeline evaluates again (whether it is there now)
    summary = _read_object(summary_path, found, redo) if summary_path.exists() else None
    reported = summary.get("steps") if summary else None
    if summary is not None and not isinstance(reported, dict):
        found.append(_at(summary_path, "field 'steps': expected an object of step -> avg@n", redo))
        reported = None
    present = {int(p.name[4:]): p for p in eval_dir.glob("step*") if p.is_dir() and p.name[4:].isdigit()}
    for step, avg in (reported or {}).items():
        step_dir = eval_dir / f"step{step}"
        if not (step_dir / SCORES).is_file():
            found.append(_at(step_dir / SCORES, f"missing, but {summary_path} reports step {step}", redo))
            continue
        scores = _scores(step_dir, deep, found, redo)
        if scores is not None and scores.get(f"avg@{scores['n']}") != avg:
            got = scores.get(f"avg@{scores['n']}")
            found.append(_at(summary_path, f"field 'steps.{step}' is {avg}, but {step_dir / SCORES} has {got}", redo))
    for name, sha256 in _records(summary).items():
        _recorded(eval_dir / name, sha256, summary_path, "its evaluation finished", found, redo)
    for step, step_dir in sorted(present.items()):
        if str(step) not in (reported or {}) and (step_dir / SCORES).is_file():  # scored, not (yet) reported
            _scores(step_dir, deep, found, redo)


def _scores(step_dir: Path, deep: bool, found: list[Damage], redo: Path | None) -> dict | None:
    """scores.json: readable, its numbers what its per-problem counts give, its verdicts (and, deep, its samples)
    the files it was computed from. Returns it when its fields can be read."""
    path = step_dir / SCORES
    scores = _read_object(path, found, redo)
    if scores is None:
        return None
    n, problems = scores.get("n"), scores.get("problems")
    counts = [(p.get("n"), p.get("c")) for p in problems if isinstance(p, dict)] if isinstance(problems, list) else []
    if not (isinstance(n, int) and n > 0 and counts and all(m == n and _count(c, n) for m, c in counts)):
        found.append(_at(path, f"fields 'n' and 'problems' are not {{n, c}} counts of n = {n!r} samples", redo))
        return None
    pass_at_k = scores.get("pass@k") if isinstance(scores.get("pass@k"), dict) else {}
    if not all(k.isdigit() and 1 <= int(k) <= n for k in pass_at_k):
        found.append(_at(path, f"field 'pass@k': keys {sorted(pass_at_k)} are not k = 1..{n}", redo))
        return None
    expected = {f"avg@{n}": avg_at_n(counts)} | {f"pass@k.{k}": mean_pass_at_k(counts, int(k)) for k in pass_at_k}
    recorded = {f"avg@{n}": scores.get(f"avg@{n}")} | {f"pass@k.{k}": v for k, v in pass_at_k.items()}
    for field, value in expected.items():
        if not isinstance(recorded[field], int | float) or not math.isclose(recorded[field], value, abs_tol=1e-12):
            found.append(_at(path, f"field '{field}' is {recorded[field]!r}, but its counts give {value}", redo))
    verdicts = scores.get("verdicts")
    if isinstance(verdicts, dict):
        _recorded(step_dir / verdicts.get("path", ""), verdicts.get("sha256"), path, "it was scored", found, redo)
    if deep:
        _samples(step_dir, scores, found, redo)
    return scores


def _count(c: object, n: int) -> bool:
    return isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= n


def _samples(step_dir: Path, scores: dict, found: list[Damage], redo: Path | None) -> None:
    samples = step_dir / SAMPLES
    recorded = scores.get("samples", {}).get("sha256") if isinstance(scores.get("samples"), dict) else None
    _recorded(samples, recorded, step_dir / SCORES, "it was scored", found, redo)
    if not samples.is_file():
        return
    try:
        read = read_samples(samples)
    except SamplesError as e:
        found.append(Damage(samples, str(e), redo))
        return
    if read.truncated_bytes:
        found.append(_at(samples, f"its last {read.truncated_bytes} bytes are a cut-short write", redo))
    per_problem: dict[str, int] = {}
    for row in read.rows:
        per_problem[row["problem_id"]] = per_problem.get(row["problem_id"], 0) + 1
    scored = {p["problem_id"]: p["n"] for p in scores["problems"]}
    if per_problem != scored:
        differ = sorted(k for k in set(per_problem) | set(scored) if per_problem.get(k) != scored.get(k))
        found.append(_at(samples, f"its rows per problem differ from {step_dir / SCORES} for {differ[:5]}", redo))


def changed_records(run_path: Path | str) -> list[str]:
    """Records of a finished run or evaluation that are no longer what its marker recorded (for the pipeline to
    plan aggregation again): an existing changed file, or the directory of a missing one. Reads only the markers
    and the small files they vouch for."""
    run = RunDir(run_path)
    markers = [run.done] + sorted(run.path.glob(f"eval/*/{SUMMARY}"))
    changed: list[str] = []
    for marker in markers:
        try:
            value = read_json(marker) if marker.is_file() else None
        except CorruptFileError:
            continue  # a damaged marker is an input of aggregation already: it reruns, and verify names it
        for name, sha256 in _records(value if isinstance(value, dict) else None).items():
            path = marker.parent / name
            if not path.is_file():
                changed.append(str(path.parent if path.parent.is_dir() else marker.parent))
            elif file_sha256(path) != sha256:
                changed.append(str(path))
    return changed


def redo(found: list[Damage]) -> list[Path]:
    """Remove the markers of damaged records that the pipeline makes again; returns them. The damaged files stay,
    to be replaced whole when made again. No lock is needed: a job writing a marker now writes it after making its
    records (removed after that, the next run only confirms them)."""
    markers = sorted({d.redo for d in found if d.redo is not None})
    for marker in markers:
        marker.unlink(missing_ok=True)
    return markers


def report(found: list[Damage], gone: list[Path] | None) -> str:
    """The damage, one file a line, and what the user can do about each; ``gone``: the markers :func:`redo`
    removed (None: it was not asked to)."""
    lines = [f"  {d}" for d in found]
    markers = sorted({d.redo for d in found if d.redo is not None})
    if markers and gone is None:
        lines.append(
            f"--redo removes {', '.join(map(str, markers))}: then the pipeline makes the damaged records again"
        )
    elif markers:
        lines.append(f"removed {', '.join(map(str, gone))}: rerun the same command to make the damaged records again")
    if kept := sorted({str(d.path) for d in found if d.redo is None}):
        lines.append(
            f"{', '.join(kept)}: cannot be made again from the run; restore from a copy, or move the run directory "
            "away to train the run again"
        )
    return "\n".join(lines)
