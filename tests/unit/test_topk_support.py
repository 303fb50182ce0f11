"""Shared by the Top-K tests (no tests here): run a script in a fresh Python process."""

import json
import os
import subprocess
import sys


def run_python(code: str, *argv: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` with ``argv`` in a fresh interpreter (``env`` added); fail with its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


def result_of(proc: subprocess.CompletedProcess) -> dict:
    """The JSON the script printed on its ``RESULT`` line."""
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])
