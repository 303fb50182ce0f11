"""An evaluation killed mid-generation and rerun writes byte-identical samples and scores to an uninterrupted one."""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from local_fixtures import build_run_inputs, write_setting

from dppo_bench.config import load_setting
from dppo_bench.eval.samples import SamplesError, read_samples
from dppo_bench.local.model import load_model, save_model
from dppo_bench.local.pretrain import task_config
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.rundir import RunDir


def evaluate_cmd(run_dir, data):
    return [
        sys.executable, "-m", "dppo_bench", "evaluate", "--run-dir", str(run_dir), "--benchmark", "tiny_arith",
        "--steps", "0", "--data", str(data), "--batch-size", "24", "--out", str(run_dir / "summary.json"),
    ]  # fmt: skip


def written_rows(samples):
    """The rows a running evaluation has written so far (none while the file holds only its header)."""
    try:
        return read_samples(samples).rows
    except SamplesError:
        return []


def samples_rows(run_dir):
    """The samples file without its header (whose creation time differs between runs)."""
    lines = gzip.decompress((run_dir / "eval/tiny_arith/step0/samples.jsonl.gz").read_bytes()).splitlines()
    return lines[1:]


@pytest.mark.slow
def test_an_evaluation_killed_mid_generation_resumes_to_the_same_bytes(tmp_path):
    setting_path = write_setting(tmp_path)
    base, _ = build_run_inputs(tmp_path, setting_path)
    local = load_setting(setting_path).local
    _, heldout = make_splits(local.task.seed, 0, 150, task_config(local))  # 150 problems: chunks of 64, 64, 22
    data = tmp_path / "heldout.jsonl"
    write_jsonl(heldout, data)
    from transformers import AutoTokenizer

    whole, killed = RunDir(tmp_path / "whole").create(), RunDir(tmp_path / "killed").create()
    for run in (whole, killed):
        record = {"setting": "tiny_test", "method": "pg_is", "seed": 0, "backend": "local"}
        run.write_run({**record, "setting_config": {"train": {"max_prompt_length": 8, "max_response_length": 32}}})
        save_model(load_model(base), AutoTokenizer.from_pretrained(base), run.checkpoint_dir(0))
    subprocess.run(evaluate_cmd(whole.path, data), check=True, capture_output=True)

    # generated into the partial file, which becomes samples.jsonl.gz only when complete
    samples = killed.path / "eval/tiny_arith/step0/samples.jsonl.gz"
    partial = samples.with_name("samples.partial.jsonl.gz")
    proc = subprocess.Popen(evaluate_cmd(killed.path, data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (partial.is_file() and written_rows(partial)):  # the first problem is written
        assert proc.poll() is None and time.monotonic() < deadline, "the evaluation ended before the kill"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # while the rest of its chunk is appended (or the next one generated)
    proc.wait()
    assert not (killed.path / "eval/tiny_arith/step0/scores.json").exists() and not samples.exists()
    assert len(written_rows(partial)) < 150 * 4
    subprocess.run(evaluate_cmd(killed.path, data), check=True, capture_output=True)
    assert not partial.exists()

    assert samples_rows(killed.path) == samples_rows(whole.path)
    scores = [json.loads((r.path / "eval/tiny_arith/step0/scores.json").read_text()) for r in (whole, killed)]
    for s in scores:
        for where in ("model", "samples", "scored_at"):  # the run directory's path and the time of day
            s.pop(where)
    assert scores[0] == scores[1] and len(scores[0]["problems"]) == 150
    shutil.rmtree(tmp_path / "whole")
