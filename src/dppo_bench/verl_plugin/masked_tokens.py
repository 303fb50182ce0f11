"""App. D on the verl backend: the ids of the tokens each step's loss masked, counted per advantage sign.

verl's loss metrics are scalars averaged over micro-batches, so the counts travel beside them, in files:

* the driver's ``PPOTrainer._update_actor`` puts the step into the batch's ``extra_info`` (it reaches every
  worker's ``TrainingWorker.train_mini_batch`` as non-tensor data);
* ``train_mini_batch`` opens a counter for the call; every ``ppo_loss`` call in it adds the ids of its masked
  response tokens (the loss's ``on_masked`` hook, ids from the patched ``ppo_loss``,
  :mod:`dppo_bench.verl_plugin.topk.loss`); at the end the counter is written to
  ``$DPPO_BENCH_MASKED_TOKENS_DIR/step<N>/dp<d>-rank<r>.json``.

Ranks of one data-parallel rank (tensor or sequence parallel) see the same tokens: the reader keeps one file per
data-parallel rank and sums over them. A resumed run recomputes a step into the same file names (resumption needs
the same world size), so a step is never counted twice. Set the directory with
:func:`dppo_bench.verl_launch.run_config.run_overrides`; without it nothing is collected.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path

import torch

from dppo_bench.masked_token_files import step_file, write_counts
from dppo_bench.methods.masked_tokens import MaskedTokenCounts
from dppo_bench.verl_plugin.contract import MASKED_TOKENS_DIR_ENV
from dppo_bench.verl_plugin.topk.hooks import wrap

STEP_KEY = "dppo_bench_step"  # in the batch's extra_info
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
WORKER_MODULE = "verl.workers.engine_workers"
_COUNTER: ContextVar[MaskedTokenCounts | None] = ContextVar("dppo_bench_masked_tokens", default=None)


def current_counter() -> MaskedTokenCounts | None:
    """The counter of the ``train_mini_batch`` call in progress, when this run collects masked tokens."""
    return _COUNTER.get()


def _with_step(original):
    def _update_actor(self, batch, metrics):
        batch.extra_info[STEP_KEY] = self.global_steps
        return original(self, batch, metrics)

    return _update_actor


def _counting(original):
    def train_mini_batch(self, data):
        from verl.utils import tensordict_utils as tu

        root, step = os.environ.get(MASKED_TOKENS_DIR_ENV), tu.get_non_tensor_data(data, key=STEP_KEY, default=None)
        if not root or step is None:
            return original(self, data)
        counter = MaskedTokenCounts()
        token = _COUNTER.set(counter)
        try:
            output = original(self, data)
        finally:
            _COUNTER.reset(token)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        write_counts(step_file(Path(root), int(step), self.engine.get_data_parallel_rank(), rank), counter)
        return output

    return train_mini_batch


def patch_trainer(module) -> None:
    wrap(module.PPOTrainer, "_update_actor", ("self", "batch", "metrics"), _with_step)


def patch_worker(module) -> None:
    wrap(module.TrainingWorker, "train_mini_batch", ("self", "data"), _counting)
