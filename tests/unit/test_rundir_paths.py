"""One function names a run's directory (RunDir.of) and RunDir names every path in it: no other module of src/ or
rule of workflow/ builds a run path from its parts (Snakemake's output patterns aside, which must match it)."""

import re
from pathlib import Path

from dppo_bench.rundir import RunDir, probe_record

REPO = Path(__file__).resolve().parents[2]
RUN_PATH = re.compile(r'f"[^"]*seed\{|"(?:validation|verl_logs)"|"mismatch\.npz"')


def test_no_module_builds_a_run_path_of_its_own():
    sources = [*(REPO / "src/dppo_bench").rglob("*.py"), *(REPO / "workflow/rules").glob("*.smk")]
    built = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sources
        if path.name != "rundir.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if RUN_PATH.search(line) and "__seed" not in line and "output" not in line
    ]
    assert built == []


def test_the_pipelines_output_patterns_are_run_dirs_paths():
    run = RunDir.of("s", "m", 3)
    train = (REPO / "workflow/rules/train.smk").read_text()
    pattern = "results/runs/{setting}/{method}/seed{seed}/train.completed"
    assert pattern in train and pattern.format(setting="s", method="m", seed=3) == str(run.done)
    probe = (REPO / "workflow/rules/probe.smk").read_text()
    assert (
        '"results/probes/{setting}/mismatch.npz"' in probe and str(probe_record("s")) == "results/probes/s/mismatch.npz"
    )
