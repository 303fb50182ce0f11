"""The run directory both backends write (DESIGN.md section 4).

``results/runs/<setting>/<method>/seed<k>/``: ``run.json`` (provenance and status),
``metrics.jsonl`` (one JSON object per training step, NaN as null), ``checkpoints/``, ``eval/`` and, for a verl run,
``weights/`` (the model of every checkpoint verl saved, kept for offline evaluation after verl deletes the
checkpoint: :mod:`dppo_bench.verl_plugin.keep_weights`).

A run is current while the setting and recipe its record holds have the training identity today's have
(:func:`training_identity`, :func:`recorded_training_identity`); an evaluation is current while its summary.json
holds the protocol its benchmark and setting give today (:mod:`dppo_bench.eval.protocol`). The two are separate: an
evaluation that changed is made again, never the training.

metrics.jsonl is append-only and resume-safe: rows reach it before the checkpoint that covers
them is committed, and a resumed run first drops rows past its checkpoint, so a crash at any
point leaves neither a lost nor a duplicated step. A last line cut short by a kill is not a row;
any other line that is not a JSON object with an integer step is damage, reported with its line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from dppo_bench.config.settings import setting_sha256
from dppo_bench.errors import UserError
from dppo_bench.io import CorruptFileError, atomic_write_text, file_sha256, naming, read_json, read_jsonl
from dppo_bench.provenance import now, provenance

# The files of one evaluated step, eval/<benchmark>/step<N>/: samples appear whole (generated or converted into the
# partial file, then renamed), scores.json is written last
SAMPLES, PARTIAL_SAMPLES, SCORES = "samples.jsonl.gz", "samples.partial.jsonl.gz", "scores.json"
SUMMARY = "summary.json"  # eval/<benchmark>/summary.json: the pipeline's marker of a finished evaluation


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def training_identity(setting, recipe) -> dict[str, str]:
    """What a run's record holds of what it computes: the setting's and the recipe's training identity."""
    return {"setting_sha256": setting.sha256(), "recipe_sha256": recipe.sha256()}


def recorded_training_identity(info: dict) -> dict[str, Any]:
    """The training identity of a run's record, by today's rule: the setting's part is recomputed from the setting
    the record holds (:func:`dppo_bench.config.settings.setting_sha256`), so that a change of what the identity leaves
    out does not make finished runs stale. A recipe's identity keeps its recorded value by construction
    (:meth:`dppo_bench.config.MethodRecipe.sha256`)."""
    identity = {"setting_sha256": info.get("setting_sha256"), "recipe_sha256": info.get("recipe_sha256")}
    if isinstance(info.get("setting_config"), dict):
        identity["setting_sha256"] = setting_sha256(info["setting_config"])
    return identity


RUNS_ROOT = Path("results/runs")  # the pipeline's run directories, relative to its working directory
PROBES_ROOT = Path("results/probes")  # Fig. 2's mismatch probe records, one per setting


def run_name(setting: str, method: str, seed: int) -> str:
    """``<setting>/<method>/seed<k>``: a run's directory under the runs root, and its name in messages."""
    return f"{setting}/{method}/seed{seed}"


WANDB_PROJECT = "dppo-bench"  # where either backend's runs log to wandb (verl's trainer.project_name)


def experiment_name(setting: str, method: str, seed: int) -> str:
    """A run's name in verl and wandb (trainer.experiment_name, the wandb run's on either backend)."""
    return f"{setting}__{method}__seed{seed}"


def probe_record(setting: str, root: Path = PROBES_ROOT) -> Path:
    """Where a setting's mismatch probe record goes (one rollout batch, no training)."""
    return Path(root) / setting / "mismatch.npz"


class RunDir:
    """Every path under one run's directory, and the records in it; the one place that names them."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.run_json = self.path / "run.json"
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"
        self.weights = self.path / "weights"
        self.validation = self.path / "validation"  # verl's validation dumps, one file per step
        self.verl_logs = self.path / "verl_logs"  # verl's FileLogger output, one file per attempt
        self.masked_tokens = self.path / "masked_tokens"  # App. D's counts, per step and rank (masked_token_files)
        self.done = self.path / "train.completed"  # the pipeline's marker: written last, by a finished run

    @classmethod
    def of(cls, setting: str, method: str, seed: int, root: Path | str = RUNS_ROOT) -> RunDir:
        """The run directory of one (setting, method, seed) under ``root``."""
        return cls(Path(root) / run_name(setting, method, seed))

    def create(self) -> RunDir:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self

    def read_run(self) -> dict:
        if not self.run_json.exists():
            return {}
        info = read_json(self.run_json)
        if not isinstance(info, dict):
            raise CorruptFileError(f"{self.run_json}: expected a JSON object; the file is damaged")
        return info

    def write_run(self, info: dict) -> None:
        atomic_write_text(self.run_json, json.dumps(info, indent=2, sort_keys=True) + "\n")

    def update_run(self, **fields: Any) -> dict:
        info = {**self.read_run(), **fields}
        self.write_run(info)
        return info

    def start(self, setting, recipe, seed: int, inputs: dict) -> dict:
        """run.json at start; a rerun must be the same run (same recipe, setting and seed) to resume it."""
        identity = {
            "setting": setting.id,
            "method": recipe.id,
            "seed": seed,
            "backend": setting.backend,
            **training_identity(setting, recipe),
        }
        old = self.read_run()
        if old:
            recorded = {**old, **recorded_training_identity(old)}
            clash = {k: (recorded.get(k), v) for k, v in identity.items() if recorded.get(k) != v}
            if clash:
                raise UserError(f"{self.run_json}: holds a different run ({clash}); refusing to resume or overwrite it")
        return self.update_run(
            **identity,
            hyperparameters=recipe.profile(setting.hyperparameter_profile).values(),
            hyperparameter_profile=setting.hyperparameter_profile,
            recipe=recipe.model_dump(mode="json"),
            setting_config=setting.model_dump(mode="json"),
            inputs=inputs,
            provenance=provenance(),
            status="running",
            started_at=old.get("started_at", now()),
            resumed_at=[*old.get("resumed_at", []), now()] if old else [],
            finished_at=None,
        )

    def is_current(self, info: dict, setting, recipe) -> bool:
        """Whether the run ``info`` records is the one ``setting`` and ``recipe`` make today (how it is evaluated
        is not part of that)."""
        return recorded_training_identity(info) == training_identity(setting, recipe)

    def evaluation_current(self, benchmark: str, protocol_sha256: str) -> bool:
        """Whether the run's evaluation on ``benchmark`` is finished and made with that protocol."""
        summary = self.eval_dir(benchmark) / SUMMARY
        try:
            recorded = read_json(summary) if summary.is_file() else None
        except CorruptFileError:
            return False  # made again by the pipeline (dppo-bench verify names it)
        return isinstance(recorded, dict) and recorded.get("protocol_sha256") == protocol_sha256

    def mark_done(self, outcome: dict) -> None:
        """The marker, with the sha256 of the records it vouches for: a later change to them is damage that
        ``dppo-bench verify`` (and so aggregation) names."""
        records = {p.name: file_sha256(p) for p in (self.run_json, self.metrics) if p.is_file()}
        atomic_write_text(self.done, json.dumps({**outcome, "records": records}, sort_keys=True) + "\n")

    def append_metrics(self, rows: list[dict]) -> None:
        """Append rows (each with an integer ``step``); non-finite floats become null."""
        if not rows:
            return
        with naming(self.metrics), self.metrics.open("a") as f:
            for row in rows:
                f.write(json.dumps({k: _finite(v) for k, v in row.items()}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self) -> list[dict]:
        """Every row, in file order (a torn last line is not one)."""
        if not self.metrics.exists():
            return []
        rows, _ = read_jsonl(self.metrics)
        for n, row in rows:
            if not isinstance(row, dict) or type(row.get("step")) is not int:
                raise CorruptFileError(
                    f"{self.metrics}: line {n} is not a row with an integer step; the file is damaged"
                )
        return [row for _, row in rows]

    def truncate_metrics(self, last_step: int) -> list[int]:
        """Keep only rows up to ``last_step`` (the step the resumed checkpoint covers); returns the steps kept.

        A final line cut short by a kill during the append is dropped with the rows past the checkpoint.
        """
        if not self.metrics.exists():
            return []
        rows = self.read_metrics()
        keep = [r for r in rows if r["step"] <= last_step]
        if len(keep) != len(rows) or not self.metrics.read_bytes().endswith(b"\n"):
            atomic_write_text(self.metrics, "".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
        return [r["step"] for r in keep]

    def eval_dir(self, benchmark: str) -> Path:
        return self.path / "eval" / benchmark

    def eval_step_dir(self, benchmark: str, step: int) -> Path:
        return self.eval_dir(benchmark) / f"step{step}"

    def validation_dump(self, step: int) -> Path:
        return self.validation / f"{step}.jsonl"

    def attempt_log(self, attempt: int) -> Path:
        return self.verl_logs / f"attempt-{attempt:03d}.jsonl"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:06d}"

    def weights_dir(self, step: int) -> Path:
        """A verl run's model at ``step``, kept from verl's checkpoint of it (in verl's format)."""
        return self.weights / f"step_{step:06d}"

    def saved_steps(self) -> list[int]:
        """Steps with a checkpoint directory renamed into place (complete when written; see io.verify_checksums)."""
        if not self.checkpoints.is_dir():
            return []
        return sorted(int(p.name[5:]) for p in self.checkpoints.glob("step_*") if p.name[5:].isdigit())
