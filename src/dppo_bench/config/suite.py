"""The checks of one yaml against the others, so that a bad combination stops at start, naming the file and the
field, instead of yielding a silent wrong result later (an empty column, a tiny model scored on AIME).

Separate from the per-file loaders because each reads several kinds; :mod:`dppo_bench.start_checks` runs them all.
"""

from __future__ import annotations

from pathlib import Path

from dppo_bench.canonical import EVAL_METRIC
from dppo_bench.config.experiments import Experiment, metric_fields
from dppo_bench.config.methods import MethodRecipe
from dppo_bench.config.settings import Setting
from dppo_bench.config.specs import BenchmarkSpec
from dppo_bench.config.yaml_io import ConfigError


def check_setting(setting: Setting, path: Path, benchmarks: dict[str, BenchmarkSpec]) -> None:
    """A local-backend setting evaluates only the tiny task: its tiny model cannot answer any other benchmark."""
    if setting.backend != "local":
        return
    for i, benchmark in enumerate(setting.eval.offline):  # a local setting has no online benchmark
        if not benchmarks[benchmark].from_tiny_task():
            tiny = ", ".join(b for b, spec in benchmarks.items() if spec.from_tiny_task())
            message = (
                f"benchmark {benchmark!r} cannot be run by the local backend (its tiny model answers only the tiny "
                f"task's problems: {tiny}); evaluate it in a verl setting"
            )
            raise ConfigError(path, f"eval.offline.{i}", message)


def check_eval_metrics(experiment: Experiment, path: Path, benchmarks: dict[str, BenchmarkSpec]) -> None:
    """A benchmark's score is named with its own n (``eval/aime24/avg@32``): another n is never written."""
    for field, metric, _ in metric_fields(experiment):
        scored = EVAL_METRIC.fullmatch(metric)
        if scored is None:
            continue
        benchmark, n = scored["benchmark"], benchmarks[scored["benchmark"]].n
        if int(scored["n"]) != n:
            raise ConfigError(path, field, f"{benchmark!r} is scored with n = {n}: avg@{n}, not avg@{scored['n']}")


def check_profiles(
    experiment: Experiment, path: Path, settings: dict[str, Setting], methods: dict[str, MethodRecipe]
) -> None:
    """Every run has its values: each method has the hyperparameter profile its setting names."""
    for i, group in enumerate(experiment.runs):
        profile = settings[group.setting].hyperparameter_profile
        for j, method in enumerate(group.methods):
            if profile not in methods[method].hyperparameters:
                have = ", ".join(methods[method].hyperparameters)
                message = f"method {method!r} has no profile {profile!r} (setting {group.setting!r}'s); it has {have}"
                raise ConfigError(path, f"runs.{i}.methods.{j}", message)
