"""What a registered policy loss needs beyond verl's loss signature, for the duration of one ``ppo_loss`` call.

verl 0.9.1's ``ppo_loss`` hands a policy loss only ``old_log_prob``, ``log_prob``, ``advantages``,
``response_mask`` and ``rollout_is_weights``. The patched ``ppo_loss`` (:mod:`dppo_bench.verl_plugin.topk.loss`)
also exposes, in the padded (batch, response_len) layout:

* the per-token top-K divergence of mu and pi (the Top-K modes);
* pi's per-token entropy (the entropy of the masked tokens, Fig. 6);
* the response ids, while a step counts its masked tokens (App. D);
* mu's log-probs themselves in decoupled mode, where ``old_log_prob`` is the recomputed pi_old: verl's rollout IS
  weights are clamped at exp(+-20), so mu cannot be recovered from them.

The ContextVar is reached only through this module's functions, so patched functions that Ray pickles by value
never capture it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

import torch


class LossInputs(NamedTuple):
    topk_divergence: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    response_ids: torch.Tensor | None = None
    rollout_log_prob: torch.Tensor | None = None


_CURRENT: ContextVar[LossInputs | None] = ContextVar("dppo_bench_loss_inputs", default=None)


@contextmanager
def exposed(inputs: LossInputs) -> Iterator[None]:
    """Make ``inputs`` visible to the policy loss called inside the block, and to nothing after it."""
    token = _CURRENT.set(inputs)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> LossInputs:
    """The inputs of the ``ppo_loss`` call in progress; every field None outside one."""
    return _CURRENT.get() or LossInputs()
