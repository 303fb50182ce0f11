"""Typed models of ``eval/<id>.yaml`` (benchmarks) and ``recipes/datasets/<id>.yaml`` (training sets), and loaders.

Both describe a problem set the same way: where it comes from (a Hugging Face hub dataset and/or a local file),
how each source's columns map to the normalized fields ``id``, ``problem``, ``answer``, and the sha256 each
source must normalize to (``null`` = not computable offline: ``data prepare`` then prints the hash it finds). A
benchmark adds what a training set does not have: ``n`` samples per problem and the sampling parameters.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from dppo_bench.config.loader import entry_paths, load_model, locate
from dppo_bench.config.roots import DATASETS_DIR, EVAL_DIR, REPO_ROOT
from dppo_bench.config.yaml_io import ConfigError, Id, Strict, read_yaml

# How a benchmark's gold answers compare (dppo_bench.eval.grading.answer_kind): read from each answer ("auto"), all
# as integers (AIME), or all by math-verify
AnswerType = Literal["auto", "integer", "math"]

SHA256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
NORMALIZED_FIELDS = ("id", "problem", "answer")
TINY_TASK_DATA = "results/data/tiny/"  # where `dppo-bench tiny data` writes the tiny task's splits


class FieldRule(Strict):
    """How one normalized field is read from a source row. A bare string in yaml means ``{column: <string>}``."""

    column: str  # dotted path into the row ("prompt.0.content", "reward_model.ground_truth"); "__index__" = row number
    pattern: str | None = None  # regex matched (search) against the value; its groups feed ``format``
    format: str | None = None  # str.format template: {value}, or the pattern's groups {0}, {1} (digits become ints)
    map: dict[str, str] | None = None  # value -> output, for ids no template expresses; a value not in it is an error
    integer: bool = False  # write the value as a canonical integer ("025" -> "25")
    strip_prefix: str | None = None  # must be present, then removed (a missing one is an error naming the row)
    strip_suffix: str | None = None
    repair_json_escapes: bool = False  # restore "\frac" from a form feed + "rac" etc. (backslashes eaten by JSON)
    # The value is a worked solution: keep the content of its last \boxed{} (MATH rows without an answer column)
    boxed: bool = False
    # Read instead when the column is absent or null (a bare string means a column), e.g. answer from the solution
    fallback: FieldRule | None = None

    @field_validator("fallback", mode="before")
    @classmethod
    def _bare_fallback(cls, v: object) -> object:
        return _as_rule(v)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regex: {e}") from None
        return v


def _as_rule(v: object) -> object:
    return {"column": v} if isinstance(v, str) else v


class Fields(Strict):
    id: FieldRule
    problem: FieldRule
    answer: FieldRule
    extra: dict[str, FieldRule] = {}  # kept in the normalized rows and in extra_info (e.g. level, subject)

    @model_validator(mode="before")
    @classmethod
    def _bare_strings(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        out = {k: _as_rule(v) for k, v in data.items() if k != "extra"}
        if isinstance(data.get("extra"), dict):
            out["extra"] = {name: _as_rule(rule) for name, rule in data["extra"].items()}
        elif "extra" in data:
            out["extra"] = data["extra"]
        return out


IDENTITY_FIELDS = Fields.model_validate({"id": "id", "problem": "problem", "answer": "answer"})


class RowFilter(Strict):
    """Which source rows a problem set keeps (``where:`` of a source, every filter must hold): rows whose ``column``
    (a dotted path, as a field rule's) is one of ``one_of`` and/or whose text fully matches ``pattern``. Applied to
    the raw rows before normalization, so the sha256 pins the selected set (e.g. MATH's level 1 of a file of all)."""

    column: str
    one_of: Annotated[list[str | int | float | bool], Field(min_length=1)] | None = None
    pattern: str | None = None  # re.fullmatch against the value as text

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regex: {e}") from None
        return v

    @model_validator(mode="after")
    def _something(self) -> RowFilter:
        if self.one_of is None and self.pattern is None:
            raise ValueError("give one_of or pattern (or both)")
        return self


class HubSource(Strict):
    repo: str  # Hugging Face dataset repo id
    revision: str | None  # a commit; null (explicit) = unpinned, which data prepare reports on every run
    config: str | None = None
    split: str
    fields: Fields
    dedupe: bool = False  # drop rows whose (problem, answer) repeats an earlier row (e.g. DAPO-Math-17k's copies)
    where: list[RowFilter] = []  # keep only the rows every filter accepts
    sha256: SHA256 | None  # of the normalized set from this source; null (explicit) = not computable offline


class LocalSource(Strict):
    path: str  # a file (jsonl, json list, parquet); relative paths are relative to the repository root
    fields: Fields = IDENTITY_FIELDS
    dedupe: bool = False
    where: list[RowFilter] = []  # keep only the rows every filter accepts
    sha256: SHA256 | None

    def resolve(self) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else (REPO_ROOT / p).resolve()


class Sources(Strict):
    default: Literal["hub", "local"] | None = None  # where data prepare reads without --source/--hub (else local)
    hub: HubSource | None = None
    local: LocalSource | None = None

    @model_validator(mode="after")
    def _one(self) -> Sources:
        if self.hub is None and self.local is None:
            raise ValueError("give at least one of hub, local")
        if self.default is not None and getattr(self, self.default) is None:
            raise ValueError(f"default is {self.default!r} but there is no sources.{self.default}")
        return self


class Sampling(Strict):
    temperature: Annotated[float, Field(ge=0.0)]
    top_p: Annotated[float, Field(gt=0.0, le=1.0)]
    # a standalone generation's longest response (`eval generate` without --setting); a run's evaluation generates at
    # most its setting's max_response_length instead, as verl's online validation does (dppo_bench.eval.protocol)
    max_tokens: Annotated[int, Field(ge=1)]


class DatasetSpec(Strict):
    """A problem set and how it becomes verl parquet (``recipes/datasets/<id>.yaml`` holds training sets)."""

    id: Id
    title: str
    notes: str | None = None
    data_source: str  # verl's data_source column (routes the reward; our reward function accepts any)
    ability: str = "math"
    split: Literal["train", "test"] = "train"  # extra_info.split in the parquet
    answer_type: AnswerType
    prompt: str  # a template in eval/prompts/<prompt>.yaml
    sources: Sources
    path: Path = Field(exclude=True)  # the yaml it was read from (for error messages)

    def default_source(self) -> Literal["local", "hub"]:
        if self.sources.default is not None:
            return self.sources.default
        return "local" if self.sources.local is not None else "hub"


class BenchmarkSpec(DatasetSpec):
    """``eval/<id>.yaml``: a problem set plus how it is sampled and scored (Avg@n)."""

    split: Literal["train", "test"] = "test"
    n: Annotated[int, Field(ge=1)]  # samples per problem: avg@n, pass@k for k = 1, 2, 4, ..., n
    sampling: Sampling
    problems_from: str | None = None  # another benchmark whose problem set (sources, hashes) this one shares

    def from_tiny_task(self) -> bool:
        """Its problems are a split of the tiny task: the only problems the local backend's tiny model can answer
        (its character vocabulary and few steps make MATH or AIME meaningless, not merely hard)."""
        local = self.sources.local
        return local is not None and local.path.startswith(TINY_TASK_DATA)


TRAINING_ONLY_MESSAGE = "a training dataset has no {key} (n, sampling, problems_from belong to a benchmark in eval/)"


def _load(model: type[DatasetSpec], path: Path) -> DatasetSpec:
    data = read_yaml(path)
    if model is DatasetSpec:
        for key in ("n", "sampling", "problems_from"):
            if key in data:
                raise ConfigError(path, key, TRAINING_ONLY_MESSAGE.format(key=key))
    if data.get("problems_from") is not None:
        data = {**data, "sources": _shared_sources(path, data)}
    return load_model(model, path, data, {"path": path})


def _shared_sources(path: Path, data: dict) -> dict:
    """The sources of the benchmark named by ``problems_from`` (one level: it must name its own sources)."""
    if "sources" in data:
        raise ConfigError(path, "sources", "give either sources or problems_from, not both")
    ref_id = data["problems_from"]
    ref_path = path.parent / f"{ref_id}.yaml"
    if not isinstance(ref_id, str) or not ref_path.is_file():
        raise ConfigError(path, "problems_from", f"no benchmark {ref_id!r} in {path.parent}")
    ref = load_benchmark(ref_id, path.parent)
    if ref.problems_from is not None:
        raise ConfigError(path, "problems_from", f"{ref_id!r} itself shares its problems; name the original")
    return ref.sources.model_dump()


def load_benchmark(benchmark_id: str, eval_dir: Path = EVAL_DIR) -> BenchmarkSpec:
    return _load(BenchmarkSpec, locate("benchmark", benchmark_id, eval_dir))  # type: ignore[return-value]


def load_dataset_spec(dataset_id: str, datasets_dir: Path = DATASETS_DIR) -> DatasetSpec:
    return _load(DatasetSpec, locate("training dataset", dataset_id, datasets_dir))


def load_any(spec_id: str, eval_dir: Path = EVAL_DIR, datasets_dir: Path = DATASETS_DIR) -> DatasetSpec:
    """A benchmark (eval/) or a training dataset (recipes/datasets/) by id; an id in both is an error."""
    bench, train = eval_dir / f"{spec_id}.yaml", datasets_dir / f"{spec_id}.yaml"
    if bench.is_file() and train.is_file():
        raise ConfigError(train, "", f"id {spec_id!r} is both a benchmark ({bench}) and a training dataset")
    if train.is_file():
        return load_dataset_spec(spec_id, datasets_dir)
    if bench.is_file():
        return load_benchmark(spec_id, eval_dir)
    known = sorted({p.stem for d in (eval_dir, datasets_dir) for p in d.glob("*.yaml")})
    raise ConfigError(bench, "", f"unknown benchmark or dataset {spec_id!r}; known: {', '.join(known) or 'none'}")


def load_benchmarks(eval_dir: Path = EVAL_DIR) -> dict[str, BenchmarkSpec]:
    return {p.stem: load_benchmark(p.stem, eval_dir) for p in entry_paths(eval_dir)}
