"""Problem sets: load a source (hub or local), normalize to {id, problem, answer}, hash, verify.

The sha256 of a problem set is over its normalized rows ``{id, problem, answer}`` sorted by id (canonical JSON),
so it pins exactly what prompts and grading see, whatever file layout it came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from dppo_bench.config import canonical_sha256
from dppo_bench.config.specs import (
    IDENTITY_FIELDS,
    NORMALIZED_FIELDS,
    DatasetSpec,
    FieldRule,
    Fields,
    HubSource,
    LocalSource,
    RowFilter,
)
from dppo_bench.errors import UserError
from dppo_bench.io import read_complete_jsonl
from dppo_bench.tex import last_box

# JSON escapes that ate a LaTeX backslash: "\f" (form feed) + "rac" was "\frac", "\t" + "riangle" was "\triangle".
_LOST_BACKSLASH = re.compile(r"\x0c|\x08|[\t\r](?=[a-z])")
_LOST = {"\x0c": "\\f", "\x08": "\\b", "\t": "\\t", "\r": "\\r"}


class DataError(UserError):
    """Bad data: the message names the file (and the row and field where there is one)."""


class HashMismatch(DataError):
    pass


@dataclass(frozen=True)
class Problem:
    id: str
    problem: str
    answer: str
    extra: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {"id": self.id, "problem": self.problem, "answer": self.answer, **self.extra}


@dataclass(frozen=True)
class ProblemSet:
    problems: list[Problem]
    sha256: str
    origin: str  # the file, directory or hub repo@revision it was read from
    source_kind: str  # "local" | "hub"
    pinned_sha256: str | None  # what the spec pins for this source (None: not pinned)
    dropped_duplicates: int = 0
    filtered_out: int = 0  # rows the source's ``where`` filters left out

    def by_id(self) -> dict[str, Problem]:
        return {p.id: p for p in self.problems}


def problems_sha256(problems: list[Problem]) -> str:
    rows = sorted(({k: getattr(p, k) for k in NORMALIZED_FIELDS} for p in problems), key=lambda r: r["id"])
    return canonical_sha256(rows)


# -- reading raw rows ----------------------------------------------------------------------------------------
def read_rows(path: Path) -> list[dict]:
    """Rows of a local file: .jsonl (one object a line), .json (a list of objects) or .parquet."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise DataError(f"{path}: expected a JSON list of objects")
        return rows
    if suffix == ".jsonl":
        return read_complete_jsonl(path)
    raise DataError(f"{path}: unsupported file type {suffix!r} (use .jsonl, .json or .parquet)")


def read_hub_rows(hub: HubSource, repo: str | None = None) -> list[dict]:
    """Rows of a hub dataset at its pinned revision; ``repo`` may name a local mirror (a directory) instead."""
    import datasets

    source = repo or hub.repo
    try:
        dataset = datasets.load_dataset(source, name=hub.config, split=hub.split, revision=hub.revision)
    except Exception as e:  # noqa: BLE001  (network, auth, missing split: all mean "not loadable from here")
        hint = "pass --hub DIR with a local mirror, or --source FILE"
        raise DataError(f"{source}@{hub.revision or 'UNPINNED'}: cannot load split {hub.split!r}: {e} ({hint})") from e
    return dataset.to_list()


def resolve_local(spec: DatasetSpec, source: Path | None) -> Path:
    """The local file to read: ``source`` (a file, or a directory holding the spec's file name directly or in a
    sub-directory named like the file's parent, e.g. ../shared/data -> ../shared/data/aime24/aime24.jsonl),
    else the spec's ``sources.local.path``."""
    local = spec.sources.local
    if source is None:
        if local is None:
            raise DataError(f"{spec.path}: no sources.local; pass a file with --source or use --hub")
        return local.resolve()
    if source.is_dir():
        if local is None:
            raise DataError(f"{source}: a directory needs sources.local.path in {spec.path} to name the file")
        name = Path(local.path)
        for candidate in (source / name.name, source / name.parent.name / name.name):
            if candidate.is_file():
                return candidate
        raise DataError(f"{source}: holds neither {name.name} nor {name.parent.name}/{name.name}")
    return source


# -- normalization -------------------------------------------------------------------------------------------
def _lookup(row: dict, column: str, index: int):
    if column == "__index__":
        return index
    value: object = row
    for part in column.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", part) and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(column)
    return value


def apply_rule(rule: FieldRule, row: dict, index: int) -> str:
    """One normalized field of one row (KeyError / ValueError carry what went wrong)."""
    try:
        value = _lookup(row, rule.column, index)
    except KeyError:
        if rule.fallback is None:
            raise
        value = None
    if value is None and rule.fallback is not None:
        return apply_rule(rule.fallback, row, index)
    if value is None:
        raise ValueError(f"column {rule.column!r} is null")
    if rule.boxed:
        value = _boxed_answer(str(value))
    text = str(value)
    if rule.map is not None:
        if text not in rule.map:
            raise ValueError(f"value {text!r} of column {rule.column!r} is not in the map")
        text = rule.map[text]
    if rule.pattern is not None:
        m = re.search(rule.pattern, text)
        if m is None:
            raise ValueError(f"value {text[:80]!r} does not match pattern {rule.pattern!r}")
        groups = [int(g) if g is not None and g.isdigit() else g for g in m.groups()]
        text = rule.format.format(*groups, value=text) if rule.format else m.group(0)
    elif rule.format is not None:
        text = rule.format.format(value=value)
    if rule.repair_json_escapes:
        text = _LOST_BACKSLASH.sub(lambda m: _LOST[m.group(0)], text)
    if rule.strip_prefix is not None:
        if not text.startswith(rule.strip_prefix):
            raise ValueError(f"does not start with strip_prefix {rule.strip_prefix[:60]!r}")
        text = text[len(rule.strip_prefix) :]
    if rule.strip_suffix is not None:
        if not text.endswith(rule.strip_suffix):
            raise ValueError(f"does not end with strip_suffix {rule.strip_suffix[-60:]!r}")
        text = text[: len(text) - len(rule.strip_suffix)]
    if rule.integer:
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise ValueError(f"value {text!r} is not an integer")
        text = str(int(text))
    return text.strip()


def _boxed_answer(solution: str) -> str:
    """The content of a worked solution's last \\boxed{}, by answer extraction's own box rule. That rule alone: a MATH
    solution may go on after the box ("We may check our answer: ..."), which the Answer: rule would take."""
    found = last_box(solution)
    if found is None:
        raise ValueError("has no \\boxed{} answer")
    return found[1]


def select_rows(rows: list[dict], where: list[RowFilter], origin: str) -> list[dict]:
    """The rows every filter of ``where`` accepts; a row without a filter's column is an error naming it."""
    if not where:
        return rows
    kept = []
    for i, row in enumerate(rows):
        for rule in where:
            try:
                value = _lookup(row, rule.column, i)
            except KeyError:
                raise DataError(f"{origin}: row {i}: where: no column {rule.column!r}") from None
            if rule.one_of is not None and not any(_same(value, v) for v in rule.one_of):
                break
            if rule.pattern is not None and (value is None or not re.fullmatch(rule.pattern, str(value))):
                break
        else:
            kept.append(row)
    if not kept:
        raise DataError(f"{origin}: the where filters keep none of its {len(rows)} rows")
    return kept


def _same(value: object, wanted: object) -> bool:
    """A filter's value and a row's: equal as written (1 and 1, "1" and "1"), never True == 1."""
    return value == wanted and isinstance(value, bool) == isinstance(wanted, bool)


def normalize(rows: list[dict], fields: Fields, origin: str, dedupe: bool = False) -> tuple[list[Problem], int]:
    """Normalized problems of raw rows, and how many duplicate rows ``dedupe`` dropped.

    Errors name the origin, the row and the field. Duplicate ids are an error (avg@n groups by id).
    """
    problems: list[Problem] = []
    seen_ids: dict[str, int] = {}
    seen_content: set[tuple[str, str]] = set()
    dropped = 0
    rules = {"id": fields.id, "problem": fields.problem, "answer": fields.answer, **fields.extra}
    for i, row in enumerate(rows):
        values = {}
        for name, rule in rules.items():
            try:
                values[name] = apply_rule(rule, row, i)
            except KeyError as e:  # the column that is missing (a fallback's, where the rule has one)
                raise DataError(f"{origin}: row {i}: field '{name}': no column {e.args[0]!r}") from None
            except (ValueError, IndexError) as e:
                raise DataError(f"{origin}: row {i}: field '{name}': {e}") from None
        if not values["problem"] or not values["answer"]:
            empty = "problem" if not values["problem"] else "answer"
            raise DataError(f"{origin}: row {i}: field '{empty}' is empty")
        if dedupe:
            key = (values["problem"], values["answer"])
            if key in seen_content:
                dropped += 1
                continue
            seen_content.add(key)
        if values["id"] in seen_ids:
            raise DataError(f"{origin}: row {i}: field 'id': {values['id']!r} repeats row {seen_ids[values['id']]}")
        seen_ids[values["id"]] = i
        extra = {k: row_value for k, row_value in values.items() if k not in NORMALIZED_FIELDS}
        problems.append(Problem(values["id"], values["problem"], values["answer"], extra))
    if not problems:
        raise DataError(f"{origin}: no rows")
    return problems, dropped


def mismatch(origin: object, digest: str, spec: DatasetSpec, field: str, pinned: str) -> HashMismatch:
    """The refusal of problems read from ``origin`` whose sha256 is not the one ``field`` of the spec pins."""
    return HashMismatch(
        f"{origin}: the normalized problem set has sha256 {digest}, but {spec.path} field '{field}' pins {pinned}: "
        "this is not the problem set the spec names (prepare or generate the data again, or correct the pin)"
    )


# -- loading with hash verification --------------------------------------------------------------------------
def load_problem_set(
    spec: DatasetSpec, *, source: Path | None = None, hub: bool | str = False, verify: bool = True
) -> ProblemSet:
    """The spec's problem set from ``source`` (a local file or directory), the hub (``hub=True``, or a mirror
    directory / repo id as a string), or the spec's default source; verified against the pinned sha256."""
    use_hub = bool(hub) or (source is None and spec.default_source() == "hub")
    if use_hub:
        src: HubSource | LocalSource | None = spec.sources.hub
        if src is None:
            raise DataError(f"{spec.path}: no sources.hub to load from")
        repo = hub if isinstance(hub, str) else None
        origin = f"{repo or src.repo}@{src.revision or 'UNPINNED'}:{src.split}"
        rows = read_hub_rows(src, repo)
        field_path = "sources.hub.sha256"
    else:
        path = resolve_local(spec, source)
        src = spec.sources.local or LocalSource(path=str(path), sha256=None)
        origin = str(path)
        rows = read_rows(path)
        field_path = "sources.local.sha256"
    selected = select_rows(rows, src.where, origin)
    problems, dropped = normalize(selected, src.fields, origin, src.dedupe)
    digest = problems_sha256(problems)
    if verify and src.sha256 is not None and digest != src.sha256:
        raise mismatch(origin, digest, spec, field_path, src.sha256)
    kind = "hub" if use_hub else "local"
    return ProblemSet(problems, digest, origin, kind, src.sha256, dropped, len(rows) - len(selected))


def read_normalized(path: Path) -> ProblemSet:
    """A normalized file ({id, problem, answer, ...} rows, e.g. ``<id>.problems.jsonl`` from data prepare)."""
    problems, _ = normalize(read_rows(path), IDENTITY_FIELDS, str(path))
    return ProblemSet(problems, problems_sha256(problems), str(path), "local", None)


def pinned_hashes(spec: DatasetSpec) -> set[str]:
    return {s.sha256 for s in (spec.sources.hub, spec.sources.local) if s is not None and s.sha256 is not None}
