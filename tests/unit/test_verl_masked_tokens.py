"""App. D on the verl backend: masked token ids counted in verl's own ppo_loss, written per rank, read per step.

Faked: the trainer and the worker around the patched methods (their real classes need Ray and an engine); the loss
runs in verl's real ``ppo_loss``. Not run here: a verl training step end to end.
"""

import json
from types import SimpleNamespace

import torch
from test_topk_loss import DELTA, RESPONSES, config, inputs
from verl.utils import tensordict_utils as tu
from verl.workers.utils import losses as verl_losses

from dppo_bench.masked_token_files import read_rank_files, step_file, write_counts
from dppo_bench.methods.masked_tokens import MaskedTokenCounts
from dppo_bench.verl_plugin import masked_tokens
from dppo_bench.verl_plugin.contract import MASKED_TOKENS_DIR_ENV


def with_ids(gen, data):
    """Response ids 0..9 at random, in the micro-batch's nested layout."""
    ids = torch.randint(0, 10, (len(RESPONSES), max(RESPONSES)), generator=gen)
    data["responses"] = torch.nested.as_nested_tensor(
        [ids[i, :n] for i, n in enumerate(RESPONSES)], layout=torch.jagged
    )
    return ids


class FakeWorker:
    """A TrainingWorker whose train_mini_batch runs one ppo_loss call on the micro-batch it is given."""

    def __init__(self, model_output, dp_rank=0):
        self.model_output = model_output
        self.engine = SimpleNamespace(get_data_parallel_rank=lambda: dp_rank)

    def train_mini_batch(self, data):
        return verl_losses.ppo_loss(config("dppo_topk_tv"), self.model_output, data)


def test_a_step_writes_the_ids_of_its_masked_tokens_per_advantage_sign(gen, tmp_path, monkeypatch):
    data, model_output, log_pi, log_mu, adv, mask, div = inputs(gen)
    ids = with_ids(gen, data)
    tu.assign_non_tensor(data, **{masked_tokens.STEP_KEY: 7})
    train_mini_batch = masked_tokens._counting(FakeWorker.train_mini_batch)
    train_mini_batch(FakeWorker(model_output), data)  # the directory unset: nothing is collected
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(MASKED_TOKENS_DIR_ENV, str(tmp_path))
    train_mini_batch(FakeWorker(model_output, dp_rank=3), data)
    pi, mu = log_pi.exp(), log_mu.exp()
    masked = (((adv > 0) & (pi > mu)) | ((adv < 0) & (pi < mu))) & (div["tv"] > DELTA) & mask
    expected = MaskedTokenCounts()
    expected.add(ids, masked, adv)
    assert masked.any()
    written = json.loads(step_file(tmp_path, 7, 3, 0).read_text())
    assert written == expected.as_record()
    assert masked_tokens.current_counter() is None  # closed with the call


def test_reading_keeps_one_file_per_data_parallel_rank_and_sums_them(tmp_path):
    def counts(pos):
        c = MaskedTokenCounts()
        c.counts["pos"].update(pos)
        return c

    write_counts(step_file(tmp_path, 2, 0, 0), counts({5: 2}))
    write_counts(step_file(tmp_path, 2, 0, 1), counts({5: 2}))  # a tensor-parallel peer: the same tokens
    write_counts(step_file(tmp_path, 2, 1, 2), counts({5: 1, 8: 4}))
    write_counts(step_file(tmp_path, 3, 0, 0), counts({1: 1}))
    assert read_rank_files(tmp_path) == {2: {"pos": {"8": 4, "5": 3}, "neg": {}}, 3: {"pos": {"1": 1}, "neg": {}}}


def test_the_driver_hands_the_step_to_the_workers():
    seen = {}

    def original(self, batch, metrics):
        seen.update(batch.extra_info)

    trainer = SimpleNamespace(global_steps=12)
    masked_tokens._with_step(original)(trainer, SimpleNamespace(extra_info={}), {})
    assert seen == {masked_tokens.STEP_KEY: 12}


def test_the_patches_are_installed_on_verls_classes():
    from verl.trainer.ppo.v1 import trainer_base
    from verl.workers import engine_workers

    assert hasattr(trainer_base.PPOTrainer._update_actor, "__dppo_bench_patched__")
    assert hasattr(engine_workers.TrainingWorker.train_mini_batch, "__dppo_bench_patched__")
