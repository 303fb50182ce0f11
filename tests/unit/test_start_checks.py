"""The checks across files that stop a bad combination at start (dppo_bench.start_checks, load_experiment)."""

import pytest
import yaml

from dppo_bench.config import EXPERIMENTS_DIR, SETTINGS_DIR, ConfigError, load_experiment, load_setting, read_yaml
from dppo_bench.config.specs import load_benchmarks
from dppo_bench.config.suite import check_eval_metrics, check_setting
from dppo_bench.start_checks import load_suite


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_checkout_passes_every_start_check():
    suite = load_suite()
    assert "tiny_smoke" in suite.experiments and "tiny_smoke" in suite.settings


@pytest.mark.parametrize("benchmark", ["math500", "aime24"])
def test_a_local_setting_naming_a_benchmark_the_tiny_model_cannot_answer_is_an_error(tmp_path, benchmark):
    data = read_yaml(SETTINGS_DIR / "tiny_sanity.yaml")
    data["eval"]["offline"] = ["tiny_arith", benchmark]
    path = write(tmp_path / "tiny_bad.yaml", data)
    setting = load_setting(path)  # valid on its own: the benchmark exists
    with pytest.raises(ConfigError, match=f"tiny_bad.yaml: field 'eval.offline.1': benchmark '{benchmark}' cannot"):
        check_setting(setting, path, load_benchmarks())


def test_a_verl_setting_may_evaluate_any_benchmark():
    path = SETTINGS_DIR / "moe_base.yaml"
    check_setting(load_setting(path), path, load_benchmarks())


def experiment(tmp_path, **changes):
    data = {**read_yaml(EXPERIMENTS_DIR / "tiny_smoke.yaml"), **changes}
    return write(tmp_path / "zz_experiment.yaml", data)


def test_a_misspelt_panel_metric_is_an_error_naming_file_and_field(tmp_path):
    path = experiment(tmp_path, panels=[{"title": "x", "metrics": ["mismatch/abs_diff_mean", "tr/mask_fraction"]}])
    with pytest.raises(ConfigError, match=r"zz_experiment.yaml: field 'panels.0.metrics.1': 'tr/mask_fraction' is not"):
        load_experiment(path)


def test_a_misspelt_column_metric_is_an_error_naming_file_and_field(tmp_path):
    path = experiment(tmp_path, columns=[{"title": "x", "metric": "train/rewardmean", "stat": "final"}])
    with pytest.raises(ConfigError, match=r"field 'columns.0.metric'.*did you mean 'train/reward_mean'"):
        load_experiment(path)


def test_a_benchmark_the_settings_do_not_evaluate_is_an_error(tmp_path):
    path = experiment(tmp_path, columns=[{"title": "AIME24", "metric": "eval/aime24/avg@32", "stat": "peak"}])
    with pytest.raises(ConfigError, match=r"field 'columns.0.metric': no setting of it evaluates 'aime24'"):
        load_experiment(path)


def test_a_panel_of_a_setting_without_runs_is_an_error(tmp_path):
    path = experiment(tmp_path, panels=[{"title": "x", "metrics": ["train/reward_mean"], "setting": "tiny_sanity"}])
    with pytest.raises(ConfigError, match=r"field 'panels.0.setting': setting 'tiny_sanity' has no runs"):
        load_experiment(path)


def test_a_score_with_another_n_than_the_benchmarks_is_an_error(tmp_path):
    path = experiment(tmp_path, columns=[{"title": "x", "metric": "eval/tiny_arith/avg@32", "stat": "final"}])
    with pytest.raises(ConfigError, match=r"field 'columns.0.metric': 'tiny_arith' is scored with n = 4"):
        check_eval_metrics(load_experiment(path), path, load_benchmarks())
