"""Every yaml of the suite loaded and checked against the others, and every data file the specs pin that is present
checked against its pin: what ``snakemake`` checks at start, so that a bad combination stops there, naming the file
and the field.

Above ``config`` (the yaml and its cross-file checks, :mod:`dppo_bench.config.suite`) and ``problem_sets`` (reading
and pinning the data, :mod:`dppo_bench.problem_sets.pins`), which it joins.
"""

from __future__ import annotations

from dataclasses import dataclass

from dppo_bench.config.experiments import Experiment, experiment_paths, load_experiment
from dppo_bench.config.methods import MethodRecipe, load_methods
from dppo_bench.config.settings import Setting, load_setting, setting_paths
from dppo_bench.config.specs import BenchmarkSpec, load_benchmarks
from dppo_bench.config.suite import check_eval_metrics, check_profiles, check_setting
from dppo_bench.problem_sets.pins import check_present_sources, dataset_specs


@dataclass(frozen=True)
class Suite:
    experiments: dict[str, Experiment]
    settings: dict[str, Setting]
    methods: dict[str, MethodRecipe]
    benchmarks: dict[str, BenchmarkSpec]


def load_suite() -> Suite:
    """Every experiment, setting, method recipe and eval spec of the roots, each valid on its own and all
    consistent (every run of every experiment has its hyperparameter profile too); every spec's local source that is
    present normalizes to the sha256 the spec pins."""
    benchmarks = load_benchmarks()
    check_present_sources([*benchmarks.values(), *dataset_specs()])
    settings = {}
    for path in setting_paths():
        settings[path.stem] = load_setting(path)
        check_setting(settings[path.stem], path, benchmarks)
    methods = load_methods()
    experiments = {}
    for path in experiment_paths():
        experiments[path.stem] = load_experiment(path, settings)
        check_eval_metrics(experiments[path.stem], path, benchmarks)
        check_profiles(experiments[path.stem], path, settings, methods)
    return Suite(experiments, settings, methods, benchmarks)
