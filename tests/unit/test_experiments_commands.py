"""experiments/README.md says how to run each experiment: on this machine, or through SLURM for verl settings."""

from dppo_bench.commands.experiments import render_index, run_command
from dppo_bench.config import EXPERIMENTS_DIR, find_setting, load_experiment


def test_each_experiment_gets_the_command_of_its_backend():
    index = render_index()
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        e = load_experiment(path)
        verl = any(find_setting(g.setting).backend == "verl" for g in e.runs)
        expected = f"snakemake --profile profiles/slurm {e.id}" if verl else f"snakemake --cores 2 {e.id}"
        assert run_command(e) == expected
        assert f"| `{expected}` |" in index
    assert "`snakemake --cores 2 tiny_smoke`" in index and "`snakemake --profile profiles/slurm fig3_sanity`" in index
    assert "Add `-n` to any command to plan it" in index
