"""Fig. 2's probe through verl: its overrides in verl's own config, the dump in the patched ppo_loss, the record.

What is not run here: verl's trainer itself (vLLM, the engine, Ray); tests/unit/test_topk_*.py cover the engine's
top-K TV that the dump reads.
"""

import argparse
from pathlib import Path

import numpy as np
import pytest
from test_topk_loss import config, inputs
from verl.workers.utils import losses as verl_losses

from dppo_bench.commands.probe import probe_verl
from dppo_bench.config import find_setting
from dppo_bench.probe.tokens import read_tokens
from dppo_bench.verl_launch.compose import compose_ppo_config, validate
from dppo_bench.verl_launch.probe import PROBE_METHOD, collect, probe_overrides
from dppo_bench.verl_launch.run_config import RunPaths
from dppo_bench.verl_plugin.contract import PROBE_DIR_ENV

PATHS = RunPaths(
    run_dir=Path("/probe/work"),
    train_file=Path("/data/train.parquet"),
    val_files=(Path("/data/aime24.parquet"), Path("/data/aime25.parquet")),
    metrics_log=Path("/probe/work/verl_log.jsonl"),
)


@pytest.mark.parametrize("setting", ["moe_base", "sanity_r1d_1p5b"])
def test_probe_overrides_make_one_step_of_one_mini_batch_without_validation_or_checkpoint(setting):
    s = find_setting(setting)
    cfg = compose_ppo_config(probe_overrides(s, PATHS, Path("/probe/tokens")))
    typed = validate(cfg)
    assert typed["actor"].policy_loss.loss_mode == PROBE_METHOD and typed["rollout_correction"].bypass_mode
    assert cfg.trainer.total_training_steps == 1
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == s.train.prompts_per_step  # no update before a forward
    assert cfg.trainer.val_before_train is False and cfg.trainer.test_freq == -1 and cfg.trainer.save_freq == -1
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars[PROBE_DIR_ENV] == "/probe/tokens"
    assert cfg.actor_rollout_ref.rollout.custom.dppo_topk_k == 20


def test_the_patched_ppo_loss_dumps_mu_pi_and_tv_of_the_valid_tokens(gen, tmp_path, monkeypatch):
    data, model_output, log_pi, log_mu, adv, mask, div = inputs(gen)
    verl_losses.ppo_loss(config("dppo_topk_tv"), model_output, data)
    assert not list(tmp_path.iterdir())  # not a probe run: nothing written
    monkeypatch.setenv(PROBE_DIR_ENV, str(tmp_path))
    verl_losses.ppo_loss(config("dppo_topk_tv"), model_output, data)
    verl_losses.ppo_loss(config("dppo_topk_tv"), model_output, data)  # a second micro-batch: a second file
    tokens = collect(tmp_path)
    n = int(mask.sum())
    np.testing.assert_allclose(tokens["mu"][:n], log_mu.exp()[mask].numpy(), rtol=1e-6)
    np.testing.assert_allclose(tokens["pi"][:n], log_pi.exp()[mask].numpy(), rtol=1e-6)
    np.testing.assert_allclose(tokens["tv"][:n], div["tv"][mask].numpy(), rtol=1e-6)
    assert len(tokens["mu"]) == 2 * n


def test_probe_command_runs_the_trainer_then_writes_the_record(tmp_path):
    setting = find_setting("moe_base")
    seen = {}

    def fake_trainer(argv, env, nodes, gpus_per_node):  # what verl's workers would dump
        seen.update(argv=argv, nodes=nodes, gpus=gpus_per_node)
        dump = Path(next(a for a in argv if PROBE_DIR_ENV in a).partition("=")[2])
        dump.mkdir(parents=True)
        np.savez(dump / "tokens-h-1-0.npz", mu=np.array([0.5, 0.9]), pi=np.array([0.6, 0.9]), tv=np.array([0.1, 0.0]))
        return 0, {}

    out = tmp_path / "probes" / "moe_base" / "mismatch.npz"
    args = argparse.Namespace(
        out=out, train_data=tmp_path / "t.parquet", val_data=[str(tmp_path / "v.parquet")], seed=0, verl_command=None
    )
    assert probe_verl(args, setting, trainer=fake_trainer) == 0
    tokens = read_tokens(out)
    np.testing.assert_allclose(tokens.ratio, [1.2, 1.0], rtol=1e-6)
    assert tokens.meta["backend"] == "verl" and tokens.meta["setting_sha256"] == setting.sha256()
    assert (seen["nodes"], seen["gpus"]) == (4, 8) and "trainer.total_training_steps=1" in seen["argv"]
    assert not out.with_name("mismatch.npz.work").exists()  # the dumps are gone once joined

    def failing(argv, env, nodes, gpus_per_node):
        return 1, {}

    with pytest.raises(RuntimeError, match="exited with 1"):
        probe_verl(args, setting, trainer=failing)
