"""Evaluation of a run's saved steps on one benchmark: the one loop both backends go through.

For each step it writes ``<run>/eval/<benchmark>/step<N>/samples.jsonl.gz`` (from the run's
:mod:`~dppo_bench.eval.step_samples` source: its online validation dumps or its saved weights) and ``scores.json``
(our scorer), and returns the summary that ``summary.json`` holds, with the sha256 of the evaluation's protocol
(:mod:`dppo_bench.eval.protocol`). Steps already scored are reused, so a rerun resumes; steps past the run's last
one (it ended early: failed or diverged) are listed as not reached, and steps verl kept no weights of as not saved,
instead of failing the whole evaluation.
"""

from __future__ import annotations

from pathlib import Path

from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.grading import GradingPool
from dppo_bench.eval.protocol import protocol_sha256
from dppo_bench.eval.samples import read_samples
from dppo_bench.eval.saved_weights import NotSaved
from dppo_bench.eval.score import score_samples, write_scores
from dppo_bench.eval.step_samples import StepSamples, VerlDumpSamples, max_response_length, samples_source
from dppo_bench.io import file_sha256, read_json
from dppo_bench.problem_sets.pins import problems_for
from dppo_bench.rundir import SAMPLES, SCORES, RunDir
from dppo_bench.runlock import run_lock


def evaluate_run(
    run_path: Path,
    benchmark: str,
    steps: list[int],
    data: Path | None = None,
    *,
    engine: str = "hf",
    seed: int = 0,
    threads: int = 1,
    batch_size: int = 256,
) -> dict:
    """Score ``steps`` of the run at ``run_path`` on ``benchmark`` (problems from ``data``, a normalized file, else
    the benchmark's own source); ``engine`` generates from saved weights ("hf" or "vllm"); ``threads`` are the job's
    cores (generation's torch threads, the verifier's workers); ``seed`` seeds generation and the bootstrap
    confidence interval."""
    spec = load_benchmark(benchmark)
    problems = problems_for(spec, data)
    run = RunDir(run_path)
    info = run.read_run()
    if not info:
        raise FileNotFoundError(f"{run.run_json}: no run record (train the run first)")
    source = samples_source(run, info, spec, problems, engine=engine, seed=seed, threads=threads, batch_size=batch_size)
    summary = {
        "benchmark": spec.id,
        "n": spec.n,
        "metric": f"avg@{spec.n}",
        "source": "online validation" if isinstance(source, VerlDumpSamples) else "saved weights",
        "protocol_sha256": protocol_sha256(spec, steps, max_response_length(run, info)),
        "steps": {},
        "not_reached": [],
        "not_saved": [],
    }
    last_step = info.get("last_step")
    eval_dir = run.eval_dir(spec.id)
    with run_lock(eval_dir, "evaluate.lock"), GradingPool(threads) as pool:
        for step in steps:
            if last_step is not None and step > last_step:
                summary["not_reached"].append(step)
                continue
            try:
                avg = score_step(source, step, run.eval_step_dir(spec.id, step), spec, problems, pool, seed)
            except NotSaved as e:
                print(f"{e}: not scored", flush=True)
                summary["not_saved"].append(step)
                continue
            summary["steps"][str(step)] = avg
            print(f"{run.path} step {step}: {spec.id} avg@{spec.n} = {avg:.4f}", flush=True)
        # the sha256 of each scores.json it reports: a later change to one is damage that verify names
        summary["records"] = {
            f"step{s}/{SCORES}": file_sha256(run.eval_step_dir(spec.id, int(s)) / SCORES) for s in summary["steps"]
        }
    return summary


def score_step(source: StepSamples, step: int, step_dir: Path, spec, problems, pool, seed: int) -> float:
    """The step's avg@n: from its scores.json when the source says they are current, else its samples scored now."""
    scores_path = step_dir / SCORES
    if not source.scored(step, step_dir):
        samples = step_dir / SAMPLES
        source.write(step, samples)
        write_scores(score_samples(spec, problems, read_samples(samples), pool=pool, seed=seed), scores_path)
    return read_json(scores_path)[f"avg@{spec.n}"]
