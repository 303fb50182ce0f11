"""Where the samples of a run's evaluated step come from: online validation or the saved weights.

Both sources write ``eval/<benchmark>/step<N>/samples.jsonl.gz``; :mod:`dppo_bench.eval.run_eval` scores it the same
way whichever wrote it, so aggregation never knows which backend trained the run or where the samples came from.

- :class:`VerlDumpSamples` converts the generations verl dumped while validating the step online
  (``RUN_DIR/validation/<step>.jsonl``, ``trainer.validation_data_dir``), so no model runs again. Used when the run
  validated the benchmark online (run.json's ``inputs.val``) as the benchmark is specified today: same spec, same
  sampling, same problems.
- :class:`GeneratedSamples` generates from the weights the run saved at the step (offline evaluation: every benchmark
  of a local run, a verl setting's ``eval.offline`` benchmarks, and an online one whose spec changed after the run
  validated it), with the HF backend (CPU) or vLLM (:mod:`dppo_bench.eval.saved_weights` finds the weights).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.errors import UserError
from dppo_bench.eval.generate import HFBackend, SamplingConfig, VLLMBackend, resolve_model, run_generation
from dppo_bench.eval.protocol import sampling_of, spec_sha256
from dppo_bench.eval.samples import SamplesError, read_samples
from dppo_bench.eval.saved_weights import saved_model
from dppo_bench.eval.verl_dump import VERL_VALIDATION, convert_dump
from dppo_bench.io import CorruptFileError, file_sha256, read_json
from dppo_bench.problem_sets.load import ProblemSet
from dppo_bench.rundir import PARTIAL_SAMPLES, SAMPLES, SCORES, RunDir, run_name


class StepSamples(Protocol):
    def scored(self, step: int, step_dir: Path) -> bool:
        """Whether ``step_dir/scores.json`` already holds this source's scores of ``step`` (they are reused)."""

    def write(self, step: int, samples: Path) -> None:
        """Write the step's samples file; FileNotFoundError when the step left nothing to take them from."""


class GeneratedSamples:
    """Samples generated from the weights the run saved at the step; a killed generation resumes. ``engine``: "hf"
    (transformers on the CPU) or "vllm" (on GPUs, with the run's rollout tensor parallelism)."""

    def __init__(
        self,
        run: RunDir,
        info: dict,
        spec: BenchmarkSpec,
        problems: ProblemSet,
        sampling: dict,
        *,
        engine: str,
        seed: int,
        threads: int,
        batch_size: int,
    ):
        self.run, self.info, self.spec, self.problems = run, info, spec, problems
        self.sampling = SamplingConfig(**sampling, seed=seed)
        self.engine, self.threads, self.batch_size = engine, threads, batch_size

    def scored(self, step: int, step_dir: Path) -> bool:
        """Scores of these very samples are reused, but never silently when the spec now samples differently:
        generating costs, so the old scores are not overwritten either (the user moves them away). Scores of samples
        converted from a validation dump (the benchmark was online until its spec changed) are replaced: the dump
        stays."""
        scores = readable_scores(step_dir)
        if scores is None:
            return False
        model = scores.get("model")
        if isinstance(model, dict) and model.get("kind") == VERL_VALIDATION:
            return False
        recorded = scores.get("sampling")
        if recorded != asdict(self.sampling):
            raise UserError(
                f"{step_dir / SCORES}: scored with sampling {recorded}, but {self.spec.id} now asks for "
                f"{asdict(self.sampling)}; move {step_dir.parent} away to evaluate again"
            )
        return scores_match(scores, step_dir / SAMPLES)

    def write(self, step: int, samples: Path) -> None:
        model = resolve_model(saved_model(self.run, self.info, step))
        backend = self._backend(model.path)
        # into the partial file, which resumes a killed generation and becomes the samples file when complete; a whole
        # samples file (its scores are what is missing) is only checked: same header, nothing left to generate
        partial = samples.with_name(PARTIAL_SAMPLES)
        if partial.is_file() and converted(partial):  # a conversion cut short: nothing to resume
            partial.unlink()
        generated = samples.is_file() and not converted(samples)  # converted from a dump: made again from the weights
        target = samples if generated and whole(samples, self.problems, self.spec.n) else partial
        run_generation(
            backend,
            model,
            self.problems.problems,
            load_prompt(self.spec.prompt),
            self.sampling,
            target,
            benchmark=self.spec.id,
            data_sha256=self.problems.sha256,
        )
        if target == partial:
            os.replace(partial, samples)

    def _backend(self, model_path: str):
        if self.engine == "hf":
            import torch

            torch.set_num_threads(self.threads)
            return HFBackend(model_path, self.sampling, device="cpu", batch_size=self.batch_size)
        config = self.info["setting_config"]
        verl = config.get("verl") or {}  # a local run's model is tiny: one device
        return VLLMBackend(
            model_path,
            self.sampling,
            tensor_parallel_size=verl.get("parallelism", {}).get("rollout_tensor", 1),
            max_model_len=config["train"]["max_prompt_length"] + config["train"]["max_response_length"],
            dtype="bfloat16",  # the rollout's precision (verl.precision)
        )


class VerlDumpSamples:
    """Samples converted from verl's online validation dump of the step (all online benchmarks in one file: only
    this benchmark's rows are kept). ``sampling``: what verl validated with (the benchmark's n, temperature and
    top_p; the setting's max response length)."""

    def __init__(self, run: RunDir, info: dict, spec: BenchmarkSpec, problems: ProblemSet, sampling: dict):
        self.run, self.spec, self.problems, self.sampling = run, spec, problems, sampling
        self.name = run_name(info["setting"], info["method"], info["seed"])

    def dump(self, step: int) -> Path:
        return self.run.validation_dump(step)

    def scored(self, step: int, step_dir: Path) -> bool:
        """Reused only when computed from samples converted from this very dump: a resumed attempt that validated
        the step again wrote a new one. Converting costs nothing, so other scores are simply replaced."""
        dump, samples, scores = self.dump(step), step_dir / SAMPLES, readable_scores(step_dir)
        if scores is None or not (dump.is_file() and samples.is_file() and whole(samples)):
            return False

        source = read_samples(samples).header.get("source", {})
        return source.get("sha256") == file_sha256(dump) and scores_match(scores, samples)

    def write(self, step: int, samples: Path) -> None:
        dump = self.dump(step)
        if not dump.is_file():
            raise FileNotFoundError(f"{dump}: no validation dump for step {step} of this run")
        samples.parent.mkdir(parents=True, exist_ok=True)
        tmp = samples.with_name(PARTIAL_SAMPLES)  # a converted file appears whole, or not at all
        tmp.unlink(missing_ok=True)
        convert_dump(
            dump,
            self.problems,
            tmp,
            benchmark=self.spec.id,
            model=f"verl run {self.name} step {step}",
            sampling=self.sampling,
            template=self.spec.prompt,
        )
        os.replace(tmp, samples)


def readable_scores(step_dir: Path) -> dict | None:
    """The step's scores.json, or None when there is none or it is damaged: scores are derived from the samples, so
    a damaged file is scored again (and replaced whole) rather than blocking every rerun."""
    path = step_dir / SCORES
    if not path.is_file():
        return None
    try:
        scores = read_json(path)
    except CorruptFileError as e:
        print(f"{e}; scoring the step again", flush=True)
        return None
    return scores if isinstance(scores, dict) else None


def converted(samples: Path) -> bool:
    """Whether a samples file was converted from a validation dump (its header's model kind)."""
    try:
        model = read_samples(samples, rows_required=False).header.get("model")
    except SamplesError:
        return False  # damaged: whole() says so, and it is made again
    return isinstance(model, dict) and model.get("kind") == VERL_VALIDATION


def scores_match(scores: dict, samples: Path) -> bool:
    """Whether ``scores`` were computed from the samples file as it is now (the sha256 scores.json records)."""
    recorded = scores.get("samples")
    return samples.is_file() and isinstance(recorded, dict) and recorded.get("sha256") == file_sha256(samples)


def whole(samples: Path, problems: ProblemSet | None = None, n: int | None = None) -> bool:
    """Whether a samples file reads whole (and, given ``problems``, holds ``n`` samples of each and nothing else);
    a damaged one is made again, and replaced whole when it is: it is derived from the checkpoint or the dump,
    which stay."""
    try:
        read = read_samples(samples)
    except SamplesError as e:
        print(f"{e}; making the step's samples again", flush=True)
        return False
    counts: dict[str, int] = {}
    for row in read.rows:
        counts[row["problem_id"]] = counts.get(row["problem_id"], 0) + 1
    why = f"its last {read.truncated_bytes} bytes are a write cut short" if read.truncated_bytes else None
    if why is None and problems is not None and counts != {p.id: n for p in problems.problems}:
        why = f"it does not hold {n} samples of each of the {len(problems.problems)} problems"
    if why:
        print(f"{samples}: {why}; making the step's samples again", flush=True)
    return why is None


def max_response_length(run: RunDir, info: dict) -> int:
    """The run's longest response (its setting's, as run.json recorded it): an evaluation's longest sample."""
    length = info.get("setting_config", {}).get("train", {}).get("max_response_length")
    if not isinstance(length, int):
        raise UserError(f"{run.run_json}: field 'setting_config.train.max_response_length' is missing")
    return length


def validated_online(info: dict, spec: BenchmarkSpec, problems: ProblemSet | None = None) -> dict | None:
    """The sampling verl validated the run on ``spec`` with (run.json's ``inputs.val``, written by the launcher) when
    its dumps are still samples of the benchmark: the same spec and (given ``problems``) the same problems. None:
    it is scored from the saved weights."""
    records = info.get("inputs", {}).get("val", []) if info.get("backend") == "verl" else []
    record = next((r for r in records if isinstance(r, dict) and r.get("id") == spec.id), None)
    if record is None or record.get("spec_sha256") != spec_sha256(spec):
        return None
    if problems is not None and record.get("data_sha256") not in (None, problems.sha256):
        return None
    return record["sampling"]


def samples_source(
    run: RunDir,
    info: dict,
    spec: BenchmarkSpec,
    problems: ProblemSet,
    *,
    engine: str,
    seed: int,
    threads: int,
    batch_size: int,
) -> StepSamples:
    """The run's online validation dumps of the benchmark when they are of it as it is specified now; else the
    weights it saved."""
    backend = info.get("backend")
    if backend not in ("local", "verl"):
        raise UserError(f"{run.run_json}: field 'backend': expected 'local' or 'verl', got {backend!r}")
    online = validated_online(info, spec, problems)
    if online is not None:
        return VerlDumpSamples(run, info, spec, problems, online)
    if any(isinstance(r, dict) and r.get("id") == spec.id for r in info.get("inputs", {}).get("val", [])):
        print(f"{spec.id}: the run validated another version of it online; scoring it from the saved weights")
    sampling = sampling_of(spec, max_response_length(run, info))
    return GeneratedSamples(
        run, info, spec, problems, sampling, engine=engine, seed=seed, threads=threads, batch_size=batch_size
    )
