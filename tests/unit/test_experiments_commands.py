"""experiments/README.md says how to run each experiment: on this machine when every job runs on the CPU, through
SLURM when a setting needs GPUs."""

from dppo_bench.commands.experiments import render_index, run_command
from dppo_bench.config import EXPERIMENTS_DIR, find_setting, load_experiment
from dppo_bench.plan import on_gpus


def test_each_experiment_gets_the_command_of_its_backend():
    index = render_index()
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        e = load_experiment(path)
        settings = [g.setting for g in e.runs] + e.probes  # trained or probed
        gpus = any(on_gpus(find_setting(s)) for s in settings)
        expected = f"snakemake --profile profiles/slurm {e.id}" if gpus else f"snakemake --cores 2 {e.id}"
        assert run_command(e) == expected
        assert f"| `{expected}` |" in index
    assert "`snakemake --cores 2 tiny_smoke`" in index and "`snakemake --profile profiles/slurm fig3_sanity`" in index
    assert "Add `-n` to any command to plan it" in index
    assert "| `fig8_moe_base` | Fig. 8 | 8 | moe_base, moe_base_r3 | 18,432 |" in index  # 8 x 4 nodes x 8 GPUs x 72 h
    assert "| `fig2_mismatch` | Fig. 2 | 1 probe(s) | moe_base | 32 |" in index  # 4 nodes x 8 GPUs x the probe's 1 h
    # verl on the CPU (verl.device: cpu): no GPU-hours, no cluster needed
    assert "| 12 | tiny_verl | CPU | `snakemake --cores 2 verl_cpu` |" in index
    assert "| 1 probe(s) | tiny_verl | CPU | `snakemake --cores 2 verl_cpu_mismatch` |" in index
