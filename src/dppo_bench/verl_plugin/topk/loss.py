"""Getting the trainer's top-K divergence to a registered policy loss.

verl 0.9.1's ``ppo_loss`` hands a policy loss only ``old_log_prob``, ``log_prob``,
``advantages``, ``response_mask`` and ``rollout_is_weights``; the divergence the engine put in
``model_output`` is dropped. So ``ppo_loss`` is wrapped: for a top-K loss mode it slices the
divergence to the response layout with verl's own ``no_padding_2_padding`` (the same call that
produces ``log_prob``, so the two align token for token) and exposes it for exactly the
duration of that one ``ppo_loss`` call; the registered loss reads it with
:func:`current_topk_divergence`. Every other loss mode goes straight to verl's function.

Patched where the name is bound: ``verl.workers.utils.losses.ppo_loss`` and the copy that
``verl.workers.engine_workers`` imports (the worker binds ``partial(ppo_loss, config=...)``
in ``init_model``, after the patch).
"""

from __future__ import annotations

from contextvars import ContextVar
from types import ModuleType

import torch

from dppo_bench.methods import get_mask
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS
from dppo_bench.verl_plugin.topk.hooks import wrap

_CURRENT: ContextVar[torch.Tensor | None] = ContextVar("dppo_bench_topk_divergence", default=None)


def current_topk_divergence() -> torch.Tensor | None:
    """The (batch, response_len) top-K divergence of the ``ppo_loss`` call in progress, if any."""
    return _CURRENT.get()


def topk_kind(loss_mode: str) -> str | None:
    """The top-K divergence a loss mode masks on: its mask rule's ``topk_kind``; None for others."""
    try:
        return get_mask(loss_mode).topk_kind
    except KeyError:  # one of verl's own modes
        return None


def with_topk_divergence(original):
    def ppo_loss(config, model_output, data, dp_group=None):
        mode = config.policy_loss.get("loss_mode", "vanilla")
        kind = topk_kind(mode)
        if kind is None:
            return original(config, model_output, data, dp_group)
        key = DIVERGENCE_KEYS[kind]
        if key not in model_output:
            raise RuntimeError(
                f"loss mode {mode!r} needs the per-token top-K divergence '{key}' in the "
                "engine's model_output, and it is missing: the micro-batch carried no rollout top-K "
                "(actor_rollout_ref.rollout.custom.dppo_topk_k unset, the v0 trainer, or a multi-turn loop), "
                "or the engine is not one dppo-bench patches (FSDP, Megatron)"
            )
        from verl.workers.utils.padding import no_padding_2_padding

        token = _CURRENT.set(no_padding_2_padding(model_output[key], data))
        try:
            return original(config, model_output, data, dp_group)
        finally:
            _CURRENT.reset(token)

    return ppo_loss


def patch_ppo_loss(module: ModuleType) -> None:
    """Rebind ``module.ppo_loss`` (verl's losses module, or one that imported the name) to the wrapper."""
    wrap(module, "ppo_loss", ("config", "model_output", "data", "dp_group"), with_topk_divergence)
