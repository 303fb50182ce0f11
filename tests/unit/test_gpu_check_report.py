"""benchmarks/gpu_check.py's parts in this process: the parity's count of mask flips, and its report (the script end
to end, in its reduced form: tests/integration/test_gpu_check.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from dppo_bench.config import find_setting

REPO_ROOT = Path(__file__).resolve().parents[2]  # not conftest's: "conftest" may name tests/slurm's under xdist


@pytest.fixture(scope="module")
def gpu_check():
    """The script as a module; the import refusal it installs and the path it adds are undone for the other tests."""
    meta_path, path, had_topk = list(sys.meta_path), list(sys.path), "topk_divergence" in sys.modules
    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.meta_path[:], sys.path[:] = meta_path, path
        if not had_topk:
            sys.modules.pop("topk_divergence", None)
    return module


def test_the_parity_gives_the_mask_of_the_loss_it_ran(gpu_check):
    data = gpu_check.parity_inputs(2, 16, 64, 8)
    recipe = next(r for r in gpu_check.load_methods().values() if r.id == "dppo_binary_tv")
    loss = gpu_check.Loss.of(recipe, find_setting("gpu_check").hyperparameter_profile, "token-mean", {})
    _, _, stats, masked = gpu_check.loss_and_grad(loss, data, torch.device("cpu"), torch.float32)
    assert masked.shape == data["response_mask"].shape and not (masked & ~data["response_mask"]).any()
    assert masked.sum().item() / data["response_mask"].sum().item() == pytest.approx(stats["mask_frac"])


def test_mask_decisions_differing_counts_flips_in_both_directions_token_by_token(gpu_check, monkeypatch):
    """A device that drops one token the CPU keeps and keeps one it drops has the CPU's mask_frac: the two flips
    count 2, not 0 (a difference of the two fractions would cancel them)."""
    real, calls, flips = gpu_check.rule_loss, [], []

    def rule_loss(loss, log_pi, log_softmax, batch, on_masked):
        device_call = len(calls) % 2 == 1  # each case runs the CPU's path, then the device's
        calls.append(device_call)
        seen = []
        value, stats = real(loss, log_pi, log_softmax, batch, seen.append)
        masked = seen[0]
        if device_call:
            kept = batch.response_mask & ~masked
            swap = bool(masked.any() and kept.any())
            if swap:
                flat = masked.flatten().clone()
                flat[int(flat.nonzero()[0])] = False
                flat[int(kept.flatten().nonzero()[0])] = True
                masked = flat.view_as(masked)
            flips.append(2 if swap else 0)
        if on_masked is not None:
            on_masked(masked)
        return value, stats  # the mask's count is unchanged: so is every fraction in the stats

    monkeypatch.setattr(gpu_check, "rule_loss", rule_loss)
    profile = find_setting("gpu_check").hyperparameter_profile
    rows = gpu_check.parity(torch.device("cpu"), (2, 16, 64), profile)["cases"]
    assert any(flips) and len(flips) == len(rows)
    assert [r["mask_decisions_differing"] for r in rows] == flips


def test_on_the_cpu_the_parity_takes_the_batch_in_reverse_order_and_can_fail(gpu_check, monkeypatch):
    """--cpu's parity compares no computation with itself: a loss that weighed the first sequence apart from the
    others gives another value on the reversed batch, and fails."""
    real, cpu = gpu_check.rule_loss, torch.device("cpu")
    profile = find_setting("gpu_check").hyperparameter_profile
    honest = gpu_check.parity(cpu, (2, 16, 64), profile)
    assert honest["passed"] and honest["against"] == "the CPU, sequences in reverse order"

    def first_sequence_apart(loss, log_pi, log_softmax, batch, on_masked):
        value, stats = real(loss, log_pi, log_softmax, batch, on_masked)
        return value + log_pi[0].sum(), stats

    monkeypatch.setattr(gpu_check, "rule_loss", first_sequence_apart)
    assert not any(r["passed"] for r in gpu_check.parity(cpu, (2, 16, 64), profile)["cases"])


def test_a_run_of_no_steps_is_reported_as_n_a(gpu_check, capsys):
    none = {"status": "stopped", "last_step": 0, **gpu_check.summary([])}
    assert none["steps"] == 0 and none["step_s_median"] is None
    gpu_check.print_report({"trainer": {"passed": False, "pg_is": none, "dppo_binary_tv": none}})
    out = capsys.readouterr().out
    assert "pg_is: stopped after 0 steps (n/a s/step); reward n/a -> n/a; |pi - mu| n/a -> n/a (largest n/a)" in out
    assert "dppo_binary_tv: stopped after 0 steps" in out


def test_the_report_is_written_before_it_is_printed(gpu_check, monkeypatch, tmp_path):
    for part in ("parity", "topk_cost", "local_trainer"):
        monkeypatch.setattr(gpu_check, part, lambda *args: {"passed": True})

    def print_report(report):
        raise RuntimeError("printing failed")

    monkeypatch.setattr(gpu_check, "print_report", print_report)
    monkeypatch.setattr(gpu_check.transformers.utils.logging, "disable_progress_bar", lambda: None)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--cpu", "--out", str(tmp_path)])
    with pytest.raises(RuntimeError, match="printing failed"):
        gpu_check.main()
    report = json.loads((tmp_path / "report.json").read_text())
    assert all(report[part]["passed"] for part in ("parity", "topk", "trainer"))
