"""`dppo-bench methods check-config`: verl's own config composition and checks, on a laptop, for a setting's runs."""

from dppo_bench.cli import main
from dppo_bench.verl_launch import run_config


def test_the_papers_methods_compose_into_a_valid_verl_config(capsys):
    assert main(["methods", "check-config", "--setting", "sanity_r1d_1p5b", "dppo_binary_tv", "pg_tis"]) == 0
    out = capsys.readouterr().out
    assert "sanity_r1d_1p5b x dppo_binary_tv: verl config OK" in out and "x pg_tis: verl config OK" in out


def test_a_config_verl_refuses_is_reported_with_its_method(capsys, monkeypatch):
    real = run_config.run_overrides
    monkeypatch.setattr(run_config, "run_overrides", lambda *a, **k: [*real(*a, **k), "actor_rollout_ref.no_key=1"])
    assert main(["methods", "check-config", "--setting", "sanity_r1d_1p5b", "dppo_binary_tv"]) == 1
    assert "sanity_r1d_1p5b x dppo_binary_tv: FAILED" in capsys.readouterr().out


def test_a_local_setting_has_no_verl_config(capsys):
    assert main(["methods", "check-config", "--setting", "tiny_smoke"]) == 2
    assert "'tiny_smoke' trains with the local backend" in capsys.readouterr().err
