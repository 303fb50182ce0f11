"""Getting the trainer's top-K divergence, pi's entropy and mu's log-probs to a registered policy loss.

verl 0.9.1's ``ppo_loss`` drops the divergence the engine put in ``model_output``, the per-token entropy and the
rollout's log-probs. So ``ppo_loss`` is wrapped: for our loss modes it slices the first two to the response layout
with verl's own ``no_padding_2_padding`` (the same call that produces ``log_prob``, so they align token for token),
takes ``rollout_log_probs`` from the micro-batch in decoupled mode, and exposes them for exactly the duration of that
one ``ppo_loss`` call (:mod:`dppo_bench.verl_plugin.loss_inputs`), with the response ids while a step counts its
masked tokens (App. D). When the micro-batch carries the rollout's top-K, the wrapper also adds the mean probability
mass of mu's kept set (Fig. 12) to the returned metrics. verl's own loss modes go straight to verl's function.

Patched where the name is bound: ``verl.workers.utils.losses.ppo_loss`` and the copy that
``verl.workers.engine_workers`` imports (the worker binds ``partial(ppo_loss, config=...)``
in ``init_model``, after the patch).
"""

from __future__ import annotations

from types import ModuleType

import torch

from dppo_bench.methods import MaskRule, get_mask
from dppo_bench.verl_plugin.contract import PROBE_DIR_ENV
from dppo_bench.verl_plugin.loss_inputs import LossInputs, exposed
from dppo_bench.verl_plugin.masked_tokens import current_counter
from dppo_bench.verl_plugin.probe_dump import dump_if_probing
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS, TOPK_LOGPROBS
from dppo_bench.verl_plugin.topk.hooks import wrap
from dppo_bench.verl_plugin.topk.layout import response_rows, sequence_lengths

TOPK_MASS_METRIC = "actor/rollout_topk_mass_mean"
ROLLOUT_LOG_PROBS = "rollout_log_probs"  # mu's log-probs in verl's batch, in both modes


def our_rule(loss_mode: str) -> MaskRule | None:
    """The mask rule of one of our loss modes; None for verl's own."""
    try:
        return get_mask(loss_mode)
    except KeyError:
        return None


@torch.no_grad()
def rollout_topk_mass(data) -> float:
    """Mean over the micro-batch's response tokens of the probability mass of mu's kept top-K set."""
    _, response_lens = sequence_lengths(data)
    rows = response_rows(data[TOPK_LOGPROBS], response_lens, TOPK_LOGPROBS).float()
    return rows.exp().sum(-1).mean().item() if rows.numel() else float("nan")


def with_loss_inputs(original):
    def ppo_loss(config, model_output, data, dp_group=None):
        rule = our_rule(config.policy_loss.get("loss_mode", "vanilla"))
        if rule is None:
            return original(config, model_output, data, dp_group)
        from verl.workers.utils.padding import no_padding_2_padding

        topk = None
        if rule.topk_kind is not None:
            topk = no_padding_2_padding(model_output[_divergence_key(rule, model_output)], data)
        entropy = model_output.get("entropy", None)
        if entropy is not None:
            entropy = no_padding_2_padding(entropy, data)
        mass = rollout_topk_mass(data) if TOPK_LOGPROBS in data.keys() else None
        if topk is not None:
            _probe_dump(model_output, data, topk)
        ids = _padded(data, "responses") if current_counter() is not None else None
        decoupled = "rollout_is_weights" in data.keys() and ROLLOUT_LOG_PROBS in data.keys()
        mu = _padded(data, ROLLOUT_LOG_PROBS) if decoupled else None
        with exposed(LossInputs(topk, entropy, ids, mu)):
            loss, metrics = original(config, model_output, data, dp_group)
        if mass is not None:
            from verl.utils.metric import AggregationType, Metric

            metrics[TOPK_MASS_METRIC] = Metric(AggregationType.MEAN, mass)
        return loss, metrics

    return ppo_loss


def _padded(data, key: str) -> torch.Tensor:
    """One field of the micro-batch in the padded (batch, response_len) layout, as verl's ppo_loss reads its own."""
    return data.select(key).to_padded_tensor()[key]


def _probe_dump(model_output, data, topk: torch.Tensor) -> None:
    """Fig. 2's probe run (dppo_bench.verl_launch.probe) writes this call's tokens; any other run returns at once."""
    import os

    if not os.environ.get(PROBE_DIR_ENV):
        return
    from verl.workers.utils.padding import no_padding_2_padding

    padded = data.select("old_log_probs", "response_mask").to_padded_tensor()
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    dump_if_probing(log_prob, padded["old_log_probs"], topk, padded["response_mask"])


def _divergence_key(rule: MaskRule, model_output) -> str:
    key = DIVERGENCE_KEYS[rule.topk_kind]
    if key not in model_output:
        raise RuntimeError(
            f"loss mode {rule.name!r} needs the per-token top-K divergence '{key}' in the "
            "engine's model_output, and it is missing: the micro-batch carried no rollout top-K "
            "(actor_rollout_ref.rollout.custom.dppo_topk_k unset, the v0 trainer, or a multi-turn loop), "
            "or the engine is not one dppo-bench patches (FSDP, Megatron)"
        )
    return key


def patch_ppo_loss(module: ModuleType) -> None:
    """Rebind ``module.ppo_loss`` (verl's losses module, or one that imported the name) to the wrapper."""
    wrap(module, "ppo_loss", ("config", "model_output", "data", "dp_group"), with_loss_inputs)
