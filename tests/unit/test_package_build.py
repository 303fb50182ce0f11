"""The package as pip builds it: type checkers see dppo_bench as typed (PEP 561's py.typed marker ships in it)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_package_is_marked_typed_in_the_checkout_and_in_its_wheel(tmp_path):
    assert (REPO_ROOT / "src" / "dppo_bench" / "py.typed").is_file()
    source = tmp_path / "source"  # a copy: setuptools writes build/ and egg-info beside what it builds
    shutil.copytree(REPO_ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    cmd = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w"]
    subprocess.run([*cmd, str(tmp_path / "wheel")], check=True, capture_output=True, text=True)
    (wheel,) = (tmp_path / "wheel").glob("dppo_bench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dppo_bench/py.typed" in names and "dppo_bench/cli.py" in names
