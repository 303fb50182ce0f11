import subprocess
import sys

from dppo_bench.cli import main


def test_methods_list_and_overrides(capsys):
    assert main(["methods", "list"]) == 0
    out = capsys.readouterr().out
    assert "dppo_binary_tv" in out and "DPPO-Binary-TV" in out
    assert main(["methods", "overrides", "pg_tis", "--profile", "scaling"]) == 0
    assert '"is_cap":5.0' in capsys.readouterr().out  # pg_tis at scale: C = 5, in our channel to verl's workers


def test_unknown_method_is_a_clear_error(capsys):
    assert main(["methods", "overrides", "no_such_method"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'no_such_method'" in err and "dppo_binary_tv" in err


def test_installed_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "dppo_bench", "methods", "list"], capture_output=True, text=True)
    assert proc.returncode == 0 and "minirl_tis" in proc.stdout
