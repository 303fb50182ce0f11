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


def test_a_user_error_is_one_line_and_exit_2(capsys):
    assert main(["methods", "overrides", "dppo_binary_tv", "--profile", "no_such_profile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("dppo-bench methods: error: method 'dppo_binary_tv' has no hyperparameter profile")


def test_our_own_bug_keeps_its_traceback():
    """A KeyError or ValueError that is not a user error is a bug of ours: its traceback shows, the exit is not 0."""
    code = (
        "import sys\nimport dppo_bench.commands.methods as m\n"
        "def broken():\n    return {}['a key our code forgot']\n"
        "m.load_methods = broken\nfrom dppo_bench.cli import main\nsys.exit(main(['methods', 'list']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode not in (0, 2), proc.stderr
    assert "Traceback" in proc.stderr and "KeyError: 'a key our code forgot'" in proc.stderr
    assert "in broken" in proc.stderr  # the frame where it went wrong


def test_debug_shows_the_traceback_of_a_user_error_too(capsys):
    assert main(["--debug", "methods", "overrides", "no_such_method"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "ConfigError" in err and "unknown method 'no_such_method'" in err
    assert err.rstrip().splitlines()[-1].startswith("dppo-bench methods: error: ")
