"""One run's facts, resolved once: its setting, method recipe and seed, and the specs of the data it reads (the
setting's benchmarks and, for verl, its training set). A command resolves them when it starts and hands the result
to the backend, the launcher and the records, so that no part reads a spec again (and none can read a different
version of it mid-command).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dppo_bench.config.loader import locate
from dppo_bench.config.methods import MethodRecipe, find_method
from dppo_bench.config.settings import SETTINGS_DIR, Setting, load_setting
from dppo_bench.config.specs import BenchmarkSpec, DatasetSpec, load_any, load_benchmark
from dppo_bench.config.suite import check_setting

# The local backend's training problems: the tiny task's train split, described by this training spec.
TINY_TRAIN_DATA = "tiny_arith_train"


@dataclass(frozen=True)
class ResolvedRun:
    setting: Setting
    recipe: MethodRecipe
    seed: int
    benchmarks: Mapping[str, BenchmarkSpec]  # every benchmark of the setting (online and offline), by id
    train_data: DatasetSpec  # the training set's spec (a local setting's: the tiny task's, TINY_TRAIN_DATA)

    @property
    def online(self) -> tuple[BenchmarkSpec, ...]:
        """The benchmarks verl validates on during training, in the setting's order (that of --val-data)."""
        return tuple(self.benchmarks[b] for b in self.setting.eval.online)


class OfResolvedRun:
    """A backend's run object that holds a ``resolved`` run: its setting, recipe and seed read from there."""

    resolved: ResolvedRun

    @property
    def setting(self) -> Setting:
        return self.resolved.setting

    @property
    def recipe(self) -> MethodRecipe:
        return self.resolved.recipe

    @property
    def seed(self) -> int:
        return self.resolved.seed


def setting_benchmarks(settings: Iterable[Setting]) -> dict[str, BenchmarkSpec]:
    """The specs of every benchmark the settings evaluate, each read once (for all the runs of a command)."""
    return {b: load_benchmark(b) for s in settings for b in s.eval.benchmarks}


def resolve_run(setting: Setting | str, recipe: MethodRecipe | str, seed: int) -> ResolvedRun:
    """The run's facts; a setting or recipe given by id is loaded. Fails now, not mid-run, on a recipe without the
    setting's hyperparameter profile or on a benchmark the setting cannot evaluate (the error names the setting's
    file; for a setting built in code, the file a setting of its id would have)."""
    if isinstance(setting, str):
        path = locate("setting", setting, SETTINGS_DIR)
        setting = load_setting(path)
    else:
        path = SETTINGS_DIR / f"{setting.id}.yaml"
    if isinstance(recipe, str):
        recipe = find_method(recipe)
    recipe.profile(setting.hyperparameter_profile)
    benchmarks = setting_benchmarks([setting])
    check_setting(setting, path, benchmarks)
    train_data = load_any(setting.verl.train_data if setting.verl is not None else TINY_TRAIN_DATA)
    return ResolvedRun(setting, recipe, seed, benchmarks, train_data)
