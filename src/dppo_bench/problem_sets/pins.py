"""A spec's pinned sha256, checked wherever the suite reads or writes the problems it pins.

A spec pins the sha256 each of its sources normalizes to (``sources.local.sha256``, ``sources.hub.sha256``). The pin
applies to a file that *is* the spec's local source (its path, from the repository root or from the working
directory, where the pipeline writes ``results/``), and to a file ``data prepare`` made from a source (the manifest
beside it names which). It is checked where such a file is read: at start for every spec whose local source is
present, by ``data prepare``, ``evaluate`` and ``score`` (``--data``), by ``tiny data`` before it writes a pinned
split, and by ``train`` for its training set. A mismatch is refused naming the file, the spec, the field and both
hashes. Any other file (the tiny task's split of another setting, a user's file) is read as it is, and scores.json
records it as unpinned (``data_pinned``).
"""

from __future__ import annotations

from pathlib import Path

from dppo_bench.config.loader import entry_paths
from dppo_bench.config.roots import DATASETS_DIR, EVAL_DIR
from dppo_bench.config.specs import DatasetSpec, load_benchmarks, load_dataset_spec
from dppo_bench.io import file_sha256, read_json
from dppo_bench.problem_sets.load import (
    DataError,
    HashMismatch,
    ProblemSet,
    load_problem_set,
    mismatch,
    read_normalized,
)


def dataset_specs(datasets_dir: Path = DATASETS_DIR) -> list[DatasetSpec]:
    return [load_dataset_spec(p.stem, datasets_dir) for p in entry_paths(datasets_dir)]


def all_specs(eval_dir: Path = EVAL_DIR, datasets_dir: Path = DATASETS_DIR) -> list[DatasetSpec]:
    """Every benchmark and training dataset spec."""
    return [*load_benchmarks(eval_dir).values(), *dataset_specs(datasets_dir)]


def local_candidates(spec: DatasetSpec) -> list[Path]:
    """Where the spec's local source may be: from the repository root, and (a relative path) the working directory."""
    local = spec.sources.local
    if local is None:
        return []
    return list(dict.fromkeys([local.resolve(), Path(local.path).resolve()]))


def manifest_of(path: Path) -> Path | None:
    """``<id>.manifest.json`` beside a prepared ``<id>.problems.jsonl`` or ``<id>.parquet``; None for other files."""
    for suffix in (".problems.jsonl", ".parquet"):
        if path.name.endswith(suffix):
            return path.with_name(path.name.removesuffix(suffix) + ".manifest.json")
    return None


def pin_of(spec: DatasetSpec, path: Path) -> tuple[str, str | None] | None:
    """(field, pinned sha256) the spec holds for the file ``path``; None when the file is not one of its sources."""
    path = Path(path).resolve()
    if path in local_candidates(spec):
        return "sources.local.sha256", spec.sources.local.sha256
    manifest_path = manifest_of(path)
    if manifest_path is None or not manifest_path.is_file():
        return None
    manifest = read_json(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("id") != spec.id:
        return None
    source = manifest.get("source")
    if source not in ("local", "hub") or getattr(spec.sources, source) is None:
        raise DataError(f"{manifest_path}: field 'source': {source!r} is not a source of {spec.path}")
    return f"sources.{source}.sha256", getattr(spec.sources, source).sha256


def check_digest(spec: DatasetSpec, path: Path, digest: str) -> None:
    """Refuse ``digest`` (the normalized sha256 of the problems in, or about to be in, ``path``) unless it is what
    the spec pins for that file."""
    found = pin_of(spec, path)
    if found is not None and found[1] is not None and digest != found[1]:
        raise mismatch(path, digest, spec, *found)


def problems_for(spec: DatasetSpec, data: Path | None = None) -> ProblemSet:
    """What generation and scoring run on: a normalized file (``--data``), else the spec's default source; either
    checked against the sha256 the spec pins for it."""
    if data is None:
        return load_problem_set(spec)
    problems = read_normalized(data)
    check_digest(spec, data, problems.sha256)
    return problems


def check_file(path: Path, specs: list[DatasetSpec] | None = None) -> None:
    """A problems file read by a command, against every spec that pins it."""
    pinning = [s for s in specs or all_specs() if (found := pin_of(s, path)) is not None and found[1] is not None]
    if not pinning:
        return
    if Path(path).suffix == ".parquet":
        for spec in pinning:
            check_prepared_parquet(spec, Path(path))
        return
    digest = read_normalized(Path(path)).sha256
    for spec in pinning:
        check_digest(spec, path, digest)


def check_prepared_parquet(spec: DatasetSpec, parquet: Path) -> None:
    """A prepared parquet holds prompts, not the normalized rows: its manifest's hash is checked against the pin,
    and the file against the sha256 the manifest recorded when it was written."""
    manifest_path = manifest_of(parquet)
    manifest = read_json(manifest_path)
    field, pinned = pin_of(spec, parquet)
    if pinned is not None and manifest.get("data_sha256") != pinned:
        raise mismatch(parquet, manifest.get("data_sha256"), spec, field, pinned)
    recorded = manifest.get("files", {}).get(parquet.name)
    if recorded is not None and recorded != file_sha256(parquet):
        raise HashMismatch(
            f"{parquet}: its sha256 differs from the one {manifest_path} field 'files.{parquet.name}' recorded when it "
            "was prepared; the file is damaged: prepare it again"
        )


def check_present_sources(specs: list[DatasetSpec] | None = None) -> None:
    """At start: every spec whose local source file is present normalizes to its pin."""
    for spec in specs or all_specs():
        local = spec.sources.local
        if local is None or local.sha256 is None:
            continue
        for candidate in local_candidates(spec):
            if candidate.is_file():
                load_problem_set(spec, source=candidate)  # refuses a mismatch naming the file, field and hashes
