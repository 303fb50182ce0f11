"""|pi - mu| at equal parameters: verl 0.9.1's own _compute_old_log_prob, patched, on fake TransferQueue and workers.

verl's trainer code runs for real here (the bypass branch that copies mu into old_log_probs, the decoupled branch
that recomputes them); only TransferQueue and the actor worker group are replaced by in-memory fakes.
"""

import copy
import math
import types
from pathlib import Path

import pytest
import torch
import transfer_queue
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from dppo_bench import canonical
from dppo_bench.config import find_method, find_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.verl_launch.compose import compose_ppo_config
from dppo_bench.verl_launch.run_config import RunPaths, run_overrides
from dppo_bench.verl_plugin import mismatch
from dppo_bench.verl_plugin.topk.hooks import PatchError, is_patched


def nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class FakeTQ:
    """TransferQueue's kv_batch_get / kv_batch_put on a dict: key -> field -> per-sample tensor."""

    def __init__(self):
        self.store: dict[str, dict[str, torch.Tensor]] = {}
        self.puts: list[set[str]] = []

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        fields = select_fields or sorted(self.store[keys[0]])
        return TensorDict({f: nested([self.store[k][f] for k in keys]) for f in fields}, batch_size=[len(keys)])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        self.puts.append(set(fields.keys()))
        for name in fields.keys():
            for key, value in zip(keys, fields[name].unbind(), strict=True):
                self.store.setdefault(key, {})[name] = value.clone()
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)


# three samples (prompt length, [pi], [mu]) and one of verl's padding samples (response mask all zero)
SAMPLES = [
    (2, [-0.1, -2.0], [-0.2, -1.0]),
    (1, [-0.5, -0.05, -3.0], [-0.5, -0.3, -2.5]),
    (3, [-1.2], [-0.01]),
]
ENTROPY = [[0.3, 0.9], [0.1, 0.2, 0.4], [1.5]]
PAD = (3, [0.0], [0.0])


class FakeActors:
    """The actor worker group: compute_log_prob writes pi's full-sequence log-probs and entropy, as verl's does."""

    def __init__(self, tq):
        self.tq, self.calls = tq, []

    def compute_log_prob(self, batch):
        self.calls.append(dict(batch.extra_info))
        for key, (prompt, pi, _), entropy in zip(batch.keys, [*SAMPLES, PAD], [*ENTROPY, [0.0]], strict=True):
            seq = prompt + len(pi)
            full = torch.full((seq,), 7.0)
            full[seq - len(pi) - 1 : seq - 1] = torch.tensor(pi)  # row t predicts token t + 1
            ent = torch.full((seq,), 7.0)
            ent[seq - len(pi) - 1 : seq - 1] = torch.tensor(entropy)
            self.tq.store[key].update(log_probs=full, entropy=ent)
        return list(batch.keys)


@pytest.fixture
def tq(monkeypatch):
    fake = FakeTQ()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)
    for i, (_, pi, mu) in enumerate(SAMPLES):
        fake.store[f"k{i}"] = {
            "response_mask": torch.ones(len(pi), dtype=torch.int64),
            "responses": torch.arange(len(pi)),
            "rollout_log_probs": torch.tensor(mu),
        }
    fake.store["pad"] = {
        "response_mask": torch.zeros(1, dtype=torch.int64),
        "responses": torch.zeros(1, dtype=torch.int64),
        "rollout_log_probs": torch.zeros(1),
    }
    return fake


@pytest.fixture(scope="module")
def configs():
    """verl's composed config of a bypass-mode and a decoupled-mode run (mismatch every 2 steps)."""
    setting = find_setting("sanity_r1d_1p5b")
    setting = setting.model_copy(update={"train": setting.train.model_copy(update={"mismatch_every": 2})})
    paths = RunPaths(Path("/run"), Path("/d/t.parquet"), (Path("/d/v.parquet"),), Path("/run/log.jsonl"))
    return {
        mode: compose_ppo_config(run_overrides(resolve_run(setting, find_method(method), 0), paths))
        for mode, method in (("bypass", "dppo_binary_tv"), ("decoupled", "minirl"))
    }


@pytest.fixture(scope="module")
def trainer_base():
    import verl.trainer.ppo.v1.trainer_base as module

    import dppo_bench.verl_plugin.entry  # noqa: F401 - installs the patches, as `import verl` does in every process

    return module


def trainer(config, tq, step):
    return types.SimpleNamespace(config=config, actor_rollout_wg=FakeActors(tq), global_steps=step)


def batch():
    keys = ["k0", "k1", "k2", "pad"]
    return KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train", extra_info={})


def expected():
    pi = torch.tensor([v for _, p, _ in SAMPLES for v in p])
    mu = torch.tensor([v for _, _, m in SAMPLES for v in m])
    diff = pi.exp() - mu.exp()
    entropy = torch.tensor([v for e in ENTROPY for v in e])
    return {
        "dppo_bench/mismatch/abs_diff_mean": diff.abs().mean().item(),
        "dppo_bench/mismatch/abs_diff_max": diff.abs().max().item(),
        "dppo_bench/mismatch/diff_min": diff.min().item(),
        "dppo_bench/mismatch/diff_max": diff.max().item(),
        "dppo_bench/mismatch/tokens": 6,
        "dppo_bench/train/entropy_mean": entropy.mean().item(),
    }


def test_the_installed_trainer_method_is_ours(trainer_base):
    method = trainer_base.PPOTrainer._compute_old_log_prob
    assert is_patched(method)
    mismatch.patch_trainer(trainer_base)  # a second application changes nothing
    assert trainer_base.PPOTrainer._compute_old_log_prob is method


def test_bypass_mode_measures_pi_at_theta_and_keeps_mu_as_the_anchor(trainer_base, configs, tq):
    t, metrics = trainer(configs["bypass"], tq, step=4), {}
    trainer_base.PPOTrainer._compute_old_log_prob(t, batch(), metrics)
    assert metrics == pytest.approx(expected())
    for i, (_, _, mu) in enumerate(SAMPLES):  # verl's bypass copy stands: old_log_probs are mu
        assert torch.equal(tq.store[f"k{i}"]["old_log_probs"], torch.tensor(mu))
    (call,) = t.actor_rollout_wg.calls
    assert call == {"calculate_entropy": True, "compute_loss": False, "temperature": 1.0}
    assert tq.puts == [{"old_log_probs"}, {"entropy"}]  # nothing but the entropy is written back
    assert torch.allclose(tq.store["k1"]["entropy"], torch.tensor(ENTROPY[1]))  # response-aligned, as decoupled


def test_bypass_mode_skips_the_pass_between_intervals(trainer_base, configs, tq):
    t, metrics = trainer(configs["bypass"], tq, step=3), {}
    trainer_base.PPOTrainer._compute_old_log_prob(t, batch(), metrics)
    assert metrics == {} and t.actor_rollout_wg.calls == []
    assert torch.equal(tq.store["k2"]["old_log_probs"], torch.tensor(SAMPLES[2][2]))


def test_decoupled_mode_reuses_verls_recompute_and_agrees_with_its_debug_metrics(trainer_base, configs, tq):
    t, metrics = trainer(configs["decoupled"], tq, step=2), {}
    trainer_base.PPOTrainer._compute_old_log_prob(t, batch(), metrics)
    assert len(t.actor_rollout_wg.calls) == 1  # verl's own pass only
    ours = {k: v for k, v in metrics.items() if k.startswith("dppo_bench/")}
    assert ours == pytest.approx(expected())
    assert metrics["dppo_bench/mismatch/abs_diff_mean"] == pytest.approx(metrics["training/rollout_probs_diff_mean"])
    assert metrics["dppo_bench/mismatch/abs_diff_max"] == pytest.approx(metrics["training/rollout_probs_diff_max"])
    assert torch.allclose(tq.store["k0"]["old_log_probs"], torch.tensor(SAMPLES[0][1]))  # pi_old = pi(theta')


def test_without_the_key_nothing_is_measured(trainer_base, configs, tq):
    config = copy.deepcopy(configs["bypass"])
    config.actor_rollout_ref.rollout.custom = {}
    t, metrics = trainer(config, tq, step=4), {}
    trainer_base.PPOTrainer._compute_old_log_prob(t, batch(), metrics)
    assert metrics == {} and t.actor_rollout_wg.calls == []


def test_mismatch_every_comes_from_rollout_custom(configs):
    assert mismatch.mismatch_every(configs["bypass"]) == 2
    assert mismatch.is_bypass(configs["bypass"]) and not mismatch.is_bypass(configs["decoupled"])
    config = copy.deepcopy(configs["bypass"])
    config.actor_rollout_ref.rollout.custom.dppo_bench_mismatch_every = -1
    with pytest.raises(ValueError, match="custom.dppo_bench_mismatch_every: expected a step interval >= 0"):
        mismatch.mismatch_every(config)


def test_mismatch_stats_closed_form_and_empty_mask():
    pi = torch.tensor([[math.log(0.8), math.log(0.5)], [math.log(0.01), 0.0]])
    mu = torch.tensor([[math.log(0.99), math.log(0.5)], [math.log(0.0001), 0.0]])
    entropy = torch.tensor([[0.5, 1.0], [1.5, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    stats = mismatch.measured(pi, mu, entropy, mask)
    assert stats["dppo_bench/mismatch/abs_diff_mean"] == pytest.approx((0.19 + 0.0 + 0.0099) / 3)
    assert stats["dppo_bench/mismatch/abs_diff_max"] == pytest.approx(0.19)
    assert stats["dppo_bench/mismatch/diff_min"] == pytest.approx(-0.19)
    assert stats["dppo_bench/mismatch/diff_max"] == pytest.approx(0.0099)
    assert stats["dppo_bench/train/entropy_mean"] == pytest.approx(1.0) and stats["dppo_bench/mismatch/tokens"] == 3
    empty = mismatch.measured(pi, mu, entropy, torch.zeros_like(mask))
    assert math.isnan(empty["dppo_bench/mismatch/abs_diff_mean"]) and empty["dppo_bench/mismatch/tokens"] == 0
    assert {canonical.VERL_KEYS[k] for k in stats if k in canonical.VERL_KEYS} == {
        *canonical.MISMATCH_STATS,
        canonical.ENTROPY_MEAN,
    }


def test_a_changed_trainer_signature_fails_loudly():
    class PPOTrainer:
        def _compute_old_log_prob(self, batch):  # not verl 0.9.1's
            return batch

    with pytest.raises(PatchError, match="not verl 0.9.1's code"):
        mismatch.patch_trainer(types.SimpleNamespace(PPOTrainer=PPOTrainer))


def test_install_refuses_another_verl(monkeypatch):
    import verl

    from dppo_bench.verl_plugin.patches import PATCHES, VerlVersionError, install

    assert (mismatch.TRAINER_MODULE, mismatch.patch_trainer) in PATCHES
    with monkeypatch.context() as m:
        m.setattr(verl, "__version__", "0.9.2")
        with pytest.raises(VerlVersionError, match="installed verl is 0.9.2"):
            install()
    install()  # the pinned verl again: the refusal is lifted for the tests that follow


@pytest.mark.slow
def test_a_fresh_process_gets_the_patch_from_import_verl_alone():
    """What every Ray worker does: import verl (our plugin loads through its entry point), then the trainer."""
    import subprocess
    import sys

    code = (
        "import verl.trainer.ppo.v1.trainer_base as t\n"
        "from dppo_bench.verl_plugin.topk.hooks import is_patched\n"
        "print(is_patched(t.PPOTrainer._compute_old_log_prob))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "True", proc.stderr[-2000:]
