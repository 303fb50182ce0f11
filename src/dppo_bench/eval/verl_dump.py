"""Convert verl's validation generation dumps to a samples file, so online numbers are re-scored offline.

verl 0.9.1 (``trainer.validation_data_dir``; ``RayPPOTrainer._dump_generations`` / ``_write_generations``) writes
``<validation_data_dir>/<global_step>.jsonl``, one object per generation: ``input`` (the decoded prompt),
``output`` (the decoded response), ``gts`` (the ground truth), ``score``, ``step``, and every key our reward function
returned (``acc``, ``pred``, ``timeout``, ``problem_id``), plus ``uid``. Rows are sorted so that the generations of
one prompt are together. The dump has no ``data_source``: a row is assigned to a problem by the ``problem_id`` our
reward function returns or, for dumps written with another reward, by the problem text its prompt contains; rows
of other validation sets match no problem and are skipped.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from dppo_bench.config import canonical_sha256
from dppo_bench.eval.samples import write_samples
from dppo_bench.io import file_sha256, read_complete_jsonl
from dppo_bench.problem_sets.load import DataError, Problem, ProblemSet

_INT = re.compile(r"\s*[+-]?\d+\s*")
VERL_VALIDATION = "verl-validation"  # the model kind of converted samples' header (and so of their scores)


def dump_path(dump: Path, step: int | None) -> Path:
    """The dump file: ``dump`` itself, or ``<dump>/<step>.jsonl`` (the highest step when ``step`` is None)."""
    if dump.is_file():
        return dump
    if not dump.is_dir():
        raise DataError(f"{dump}: no such file or directory")
    if step is not None:
        path = dump / f"{step}.jsonl"
        if not path.is_file():
            raise DataError(f"{path}: no validation dump for step {step}")
        return path
    steps = sorted(int(p.stem) for p in dump.glob("*.jsonl") if p.stem.isdigit())
    if not steps:
        raise DataError(f"{dump}: no <step>.jsonl validation dumps")
    return dump / f"{steps[-1]}.jsonl"


def _same_answer(a: str, b: str) -> bool:
    if _INT.fullmatch(a) and _INT.fullmatch(b):
        return int(a) == int(b)
    return a.strip() == b.strip()


class _Matcher:
    """Row -> problem: by the reward's problem_id, else by the longest problem text the prompt contains."""

    def __init__(self, problems: ProblemSet):
        self.by_id = problems.by_id()
        self.by_length = sorted(problems.problems, key=lambda p: len(p.problem), reverse=True)
        self._cache: dict[str, Problem | None] = {}

    def __call__(self, row: dict) -> Problem | None:
        pid = row.get("problem_id")
        if pid:
            return self.by_id.get(pid)
        prompt = row.get("input", "")
        if prompt not in self._cache:
            self._cache[prompt] = next((p for p in self.by_length if p.problem in prompt), None)
        return self._cache[prompt]


def convert_dump(
    dump: Path,
    problems: ProblemSet,
    out: Path,
    *,
    benchmark: str,
    model: str,
    sampling: dict,
    template: str,
    step: int | None = None,
) -> dict:
    """Write ``out`` (a new samples file) from one dump; returns counts per problem and skipped rows. ``template``:
    the prompt template the benchmark's prepared prompts were made with (it decides whether the completions start
    inside a reasoning block, as it did for verl's online reward)."""
    path = dump_path(dump, step)
    rows = read_complete_jsonl(path, errors="replace")  # verl writes whatever the tokenizer decoded
    match = _Matcher(problems)
    completions: dict[str, list[str]] = defaultdict(list)
    prompts: dict[str, str] = {}
    skipped = 0
    for n, row in enumerate(rows, 1):
        problem = match(row)
        if problem is None:
            skipped += 1
            continue
        if "output" not in row:
            raise DataError(f"{path}: line {n}: field 'output' is missing")
        gts = row.get("gts")
        if gts is not None and not _same_answer(str(gts), problem.answer):
            raise DataError(
                f"{path}: line {n}: field 'gts' is {gts!r}, but {problem.id} has answer {problem.answer!r} "
                "(the dump was not generated from this problem set)"
            )
        completions[problem.id].append(row["output"])
        prompts.setdefault(problem.id, row.get("input", ""))
    if not completions:
        raise DataError(f"{path}: no row matches a problem of {benchmark}")
    steps = {row.get("step") for row in rows}
    header = {
        "benchmark": benchmark,
        "data_sha256": problems.sha256,
        "model": {"path": model, "kind": VERL_VALIDATION, "step": steps.pop() if len(steps) == 1 else None},
        "sampling": sampling,
        "prompt": {"template": template, "prompts_sha256": canonical_sha256(prompts)},
        "source": {"verl_dump": str(path), "sha256": file_sha256(path)},
    }
    ordered = {p.id: completions[p.id] for p in problems.problems if p.id in completions}
    write_samples(out, header, ordered)
    return {"dump": str(path), "problems": {pid: len(c) for pid, c in ordered.items()}, "skipped_rows": skipped}
