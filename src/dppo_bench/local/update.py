"""One optimizer update of the local trainer on one mini-batch: the shared surrogate, backward, clip, step.

Kept apart from the trainer's loop so that a test can run it beside one update of verl's actor on the same batch
and weights: the two must give the same loss and gradient norm (the local backend stands in for verl).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property

import torch

from dppo_bench.config import MethodRecipe
from dppo_bench.divergence import topk_divergence
from dppo_bench.local.model import response_logits
from dppo_bench.methods import MaskRule, Values, surrogate_loss
from dppo_bench.methods.verl_losses import VerlLoss, actor_config
from dppo_bench.topk import topk_log_probs


@dataclass(frozen=True)
class Batch:
    """Rollout samples as the update sees them; every per-token tensor is (samples, response_len)."""

    input_ids: torch.Tensor  # (samples, prompt_len + response_len): prompts left-padded, responses right-padded
    attention_mask: torch.Tensor
    prompt_len: int
    responses: torch.Tensor
    response_mask: torch.Tensor  # bool
    mu_log_probs: torch.Tensor  # the rollout engine's log-prob of each sampled token
    anchor_log_probs: torch.Tensor  # what the mask compares pi with: mu (rollout anchor) or pi_old (recompute)
    advantages: torch.Tensor
    topk_ids: torch.Tensor | None = None  # mu's kept set (samples, response_len, K), for the Top-K rules
    topk_log_probs: torch.Tensor | None = None
    rollout_is_weights: torch.Tensor | None = None  # verl's decoupled-mode correction, for verl's own loss modes
    loss_mask: torch.Tensor | None = None  # the response tokens before that correction's rejection (None: the same)

    def select(self, index: torch.Tensor) -> Batch:
        """The samples at ``index`` (a mini-batch)."""
        return Batch(
            **{
                f.name: value if f.name == "prompt_len" or value is None else value[index]
                for f in fields(self)
                for value in [getattr(self, f.name)]
            }
        )


@dataclass(frozen=True)
class Loss:
    """The method's loss as the recipe and setting give it: our rule on the surrogate, or verl's own loss mode."""

    rule: MaskRule | None
    values: Values
    loss_agg_mode: str
    batch_info: dict  # verl's global_batch_info that agg_loss reads (loss_scale_factor for the *-norm modes)
    verl: VerlLoss | None = None
    anchor: str = "rollout"

    @classmethod
    def of(cls, recipe: MethodRecipe, profile: str, loss_agg_mode: str, batch_info: dict) -> Loss:
        return cls(recipe.rule, recipe.profile(profile), loss_agg_mode, batch_info, recipe.verl, recipe.anchor)

    @property
    def topk_kind(self) -> str | None:
        return self.rule.topk_kind if self.rule is not None else None

    @cached_property
    def verl_config(self):
        """verl's ActorConfig of a verl mode, as its workers build it (dppo_bench.methods.verl_losses)."""
        return actor_config(self.verl, self.anchor, self.values, self.loss_agg_mode, self.batch_info)


def policy_log_probs(policy: torch.nn.Module, batch: Batch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi of each sampled token, and the full log-softmax over the vocabulary (samples, response_len, V)."""
    logits = response_logits(policy, batch.input_ids, batch.attention_mask, batch.prompt_len) / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    return log_softmax.gather(-1, batch.responses[..., None]).squeeze(-1), log_softmax


def update(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    loss_spec: Loss,
    *,
    temperature: float,
    grad_clip: float,
    on_masked: Callable[[torch.Tensor], None] | None = None,
) -> tuple[float, float, dict[str, float]]:
    """One update on ``batch``: (loss, gradient norm before clipping, the surrogate's statistics). A non-finite
    loss raises FloatingPointError before the weights are touched. ``on_masked`` is given the mask of the dropped
    response tokens."""
    log_pi, log_softmax = policy_log_probs(policy, batch, temperature)
    if loss_spec.verl is not None:
        loss, stats = verl_loss(loss_spec, log_pi, batch)
    else:
        loss, stats = rule_loss(loss_spec, log_pi, log_softmax, batch, on_masked)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip).item()
    optimizer.step()
    return loss.item(), grad_norm, stats


def rule_loss(
    loss_spec: Loss,
    log_pi: torch.Tensor,
    log_softmax: torch.Tensor,
    batch: Batch,
    on_masked: Callable[[torch.Tensor], None] | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Our rule on the shared surrogate (the top-K divergence and pi's entropy from the full log-softmax)."""
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    topk = None
    if loss_spec.topk_kind:
        log_softmax = log_softmax.detach()  # logits whose log-normaliser is 0
        pi_at_ids = topk_log_probs(log_softmax, batch.topk_ids, normalizer=log_softmax.new_zeros(log_pi.shape))
        topk = topk_divergence(batch.topk_log_probs, pi_at_ids, loss_spec.topk_kind)
    return surrogate_loss(
        loss_spec.rule,
        loss_spec.values,
        log_prob=log_pi,
        mu_log_prob=batch.mu_log_probs,
        anchor_log_prob=batch.anchor_log_probs,
        advantages=batch.advantages,
        response_mask=batch.response_mask,
        loss_agg_mode=loss_spec.loss_agg_mode,
        topk_divergence=topk,
        batch_info=loss_spec.batch_info,
        entropy=entropy,
        on_masked=on_masked,
    )


def verl_loss(loss_spec: Loss, log_pi: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's own function, called as verl's ``ppo_loss`` calls it: the anchor as ``old_log_prob`` (mu in bypass
    mode, pi_old in decoupled mode with its correction), and the normalisers verl's engine sets: the mini-batch's
    response tokens before any rejection (verl's ``loss_mask``) and its sequences. Its actor/ metrics without the
    prefix."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn  # verl's modes only: the rules run without verl

    config = loss_spec.verl_config
    loss_mask = batch.response_mask if batch.loss_mask is None else batch.loss_mask
    config.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=int(loss_mask.sum()),
        global_batch_size=len(loss_mask),
        loss_scale_factor=loss_spec.batch_info.get("loss_scale_factor"),
    )
    loss, metrics = get_policy_loss_fn(loss_spec.verl.mode)(
        old_log_prob=batch.anchor_log_probs,
        log_prob=log_pi,
        advantages=batch.advantages,
        response_mask=batch.response_mask,
        loss_agg_mode=loss_spec.loss_agg_mode,
        config=config,
        rollout_is_weights=batch.rollout_is_weights,
    )
    return loss, {k.removeprefix("actor/"): float(v) for k, v in metrics.items()}
