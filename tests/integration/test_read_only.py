"""A read-only results directory: the command says what is read-only and what the user can do, with no traceback,
and a run of the pipeline's partial target logs the same message (read-only bind mounts: root only)."""

import pytest
from mounts import read_only
from snakemake_fixtures import snakemake

from dppo_bench.cli import main


def test_aggregating_into_a_read_only_directory_says_what_to_do(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    with read_only(results):
        code = main(["aggregate", "tiny_smoke", "--runs", str(results / "runs"), "--out", str(results / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{results} is read-only" in err and "Read-only file system" in err, err
    assert "chmod -R u+w" in err and "--directory" in err and "Traceback" not in err, err
    assert not (results / "out").exists()


@pytest.mark.slow
def test_the_partial_target_on_read_only_results_logs_what_is_read_only(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    with read_only(results):
        proc = snakemake(tmp_path, "--cores", "1", "tiny_smoke_partial")
    assert proc.returncode != 0
    log = (tmp_path / "logs/aggregate_partial/tiny_smoke.log").read_text()
    assert f"{results} is read-only" in log and "Traceback" not in log, log
