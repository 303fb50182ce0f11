"""verl 0.9.1's own policy-loss modes as methods: each one's hyperparameters declared once, with the verl key that
carries it and the meaning verl gives that key.

A recipe with ``verl_loss: <mode>`` runs verl's own function on both backends: on verl through the keys below, on
the local trainer by calling the same function with an ``ActorConfig`` built from the same keys and values
(:func:`actor_config`), so the two agree by construction. The recompute anchor runs verl's decoupled mode, whose
rollout correction (IS weights and rejection of pi_old against mu, :data:`DECOUPLED_CORRECTION`) verl's driver
computes once per batch and the local trainer computes with verl's same helper (:func:`rollout_correction`).
``bypass_mode`` is verl's own rollout-anchored loss with its correction inside the loss (IcePop as
``rollout_is_threshold: "0.5_5.0"``, REINFORCE or PPO-clip by ``loss_type``).

The declarations import without torch or verl; the functions that run verl import it when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dppo_bench.errors import UnknownNameError
from dppo_bench.methods.params import REQUIRED, Anchor, Param, Values, validate_values

if TYPE_CHECKING:
    import torch

ACTOR = "actor_rollout_ref.actor"
DECOUPLED = "algorithm.rollout_correction"  # verl's driver computes this correction (decoupled mode)
IN_LOSS = f"{ACTOR}.policy_loss.rollout_correction"  # the bypass_mode loss computes this one, in the workers
ACTOR_YAML = "verl 0.9.1 verl/trainer/config/actor/actor.yaml (default)"
CORRECTION_YAML = "verl 0.9.1 verl/trainer/config/algorithm/rollout_correction.yaml (default)"
CORE_ALGOS = "verl 0.9.1 verl/trainer/ppo/core_algos.py"


def _eps(side: str, key: str, doc: str) -> Param:
    return Param(f"eps_{side}", doc, ACTOR_YAML, 0.2, ge=0.0, key=f"{ACTOR}.{key}")


EPS_LOW = _eps("low", "clip_ratio_low", "PPO clip, lower side: the ratio is clipped at 1 - eps_low")
EPS_HIGH = _eps("high", "clip_ratio_high", "PPO clip, upper side: the ratio is clipped at 1 + eps_high")
DUAL_CLIP_C = Param("dual_clip_c", "dual-clip PPO's C: for A < 0 the loss is at most -A C (arXiv 1912.09729)",
                    ACTOR_YAML, 3.0, gt=1.0, key=f"{ACTOR}.clip_ratio_c")  # fmt: skip


def _correction(scope: str, rollout_is_default: str | None) -> tuple[Param, ...]:
    """verl's rollout-correction options (RolloutCorrectionConfig), under ``scope``."""
    source = CORRECTION_YAML
    return (
        Param("rollout_is", "IS weight level of pi over mu: token, sequence, or null (none)", source,
              rollout_is_default, kind=str, nullable=True, choices=("token", "sequence"), key=f"{scope}.rollout_is"),
        Param("rollout_is_threshold", 'upper bound of the IS weights (TIS), or "lower_upper" (IcePop: zero outside)',
              source, 2.0, kind=(float, str), key=f"{scope}.rollout_is_threshold"),
        Param("rollout_is_batch_normalize", "normalise the IS weights to mean 1 over the batch", source, False,
              kind=bool, key=f"{scope}.rollout_is_batch_normalize"),
        Param("rollout_rs", "rejection-sampling options (token_k1, seq_mean_k3, ...; comma-separated), or null",
              source, None, kind=str, nullable=True, key=f"{scope}.rollout_rs"),
        Param("rollout_rs_threshold", "their thresholds (one, or one per option; k1: lower_upper)", source, None,
              kind=(float, str), nullable=True, key=f"{scope}.rollout_rs_threshold"),
    )  # fmt: skip


DECOUPLED_CORRECTION = _correction(DECOUPLED, None)  # a recompute-anchored verl mode's correction, in the driver
BYPASS_CORRECTION = (
    Param("loss_type", "the bypass_mode loss: ppo_clip (vanilla's clip on pi/mu) or reinforce (-w A log pi)",
          "verl 0.9.1 RolloutCorrectionConfig (default)", "ppo_clip", kind=str, choices=("ppo_clip", "reinforce"),
          key=f"{IN_LOSS}.loss_type"),
    *_correction(IN_LOSS, "sequence"),  # RolloutCorrectionConfig's own default, what the workers would read unset
)  # fmt: skip


@dataclass(frozen=True)
class VerlLoss:
    """One of verl's loss modes and its hyperparameters (each with its verl key)."""

    mode: str
    doc: str
    params: tuple[Param, ...] = ()
    anchors: tuple[Anchor, ...] = ("rollout", "recompute")

    def params_for(self, anchor: Anchor) -> tuple[Param, ...]:
        """The mode's own hyperparameters, and in decoupled mode (recompute anchor) the driver's correction."""
        return self.params + (DECOUPLED_CORRECTION if anchor == "recompute" else ())

    def values(self, anchor: Anchor, **given) -> Values:
        return validate_values(f"verl loss {self.mode!r}", self.params_for(anchor), given)

    def keys(self, anchor: Anchor, values: Values) -> dict[str, Any]:
        """verl config key -> value, every declared hyperparameter included (defaults too): what both backends run."""
        return {p.key: getattr(values, p.name) for p in self.params_for(anchor)}


def _loss(mode: str, doc: str, *params: Param, anchors: tuple[Anchor, ...] = ("rollout", "recompute")) -> VerlLoss:
    return VerlLoss(mode, f"{doc} ({CORE_ALGOS}, {mode!r})", tuple(params), anchors)


def _policy_loss(name: str, doc: str, default: Any, **bounds) -> Param:
    return Param(name, doc, ACTOR_YAML, default, key=f"{ACTOR}.policy_loss.{name}", **bounds)


_DELTA_KEYS = {"delta_low": "clip_ratio_low", "delta_high": "clip_ratio_high"}
DPPO = tuple(
    Param(name, f"DPPO's divergence threshold, {side} side (verl reads it from {key})", ACTOR_YAML, 0.2, ge=0.0,
          key=f"{ACTOR}.{key}")
    for (name, key), side in zip(_DELTA_KEYS.items(), ("A < 0", "A > 0"), strict=True)
) + (Param("is_cap", "C of the weight min(pi/old, C) (verl reads it from clip_ratio_c)", ACTOR_YAML, 3.0, ge=1.0,
           key=f"{ACTOR}.clip_ratio_c"),)  # fmt: skip

VERL_LOSSES: dict[str, VerlLoss] = {
    loss.mode: loss
    for loss in (
        _loss("vanilla", "PPO's clipped objective with dual clip", EPS_LOW, EPS_HIGH, DUAL_CLIP_C),
        _loss("dppo_tv", "DPPO-Binary-TV, contributed to verl by the paper's authors", *DPPO),
        _loss("dppo_kl", "DPPO-Binary-KL, contributed to verl by the paper's authors", *DPPO),
        _loss("gspo", "GSPO: PPO's clip on the length-normalised sequence ratio", EPS_LOW, EPS_HIGH),
        _loss("sapo", "SAPO: a smooth sigmoid gate in place of the clip (always seq-mean-token-mean)",
              Param("tau_pos", "gate temperature for A > 0", ACTOR_YAML, 1.0, gt=0.0, key=f"{ACTOR}.tau_pos"),
              Param("tau_neg", "gate temperature for A <= 0", ACTOR_YAML, 1.05, gt=0.0, key=f"{ACTOR}.tau_neg")),
        _loss("gpg", "GPG: -A log pi, no ratio"),
        _loss("clip_cov", "Clip-Cov: PPO clip, plus a random share of high-covariance tokens masked (torch's "
              "global RNG)", EPS_LOW, EPS_HIGH,
              _policy_loss("clip_cov_ratio", "share of tokens masked", 2e-4, gt=0.0),
              _policy_loss("clip_cov_lb", "lower bound of the covariance of maskable tokens", 1.0),
              _policy_loss("clip_cov_ub", "upper bound of the covariance of maskable tokens", 5.0)),
        _loss("kl_cov", "KL-Cov: a |log r| penalty on the highest-covariance tokens",
              _policy_loss("kl_cov_ratio", "share of tokens penalised", 2e-4, gt=0.0),
              _policy_loss("ppo_kl_coef", "coefficient of their |log r| penalty", 0.1, ge=0.0)),
        _loss("geo_mean", "GMPO: the geometric mean of the clipped token ratios (log clip at -eps_low, eps_high)",
              EPS_LOW, EPS_HIGH),
        _loss("dro", "DRO: -(A log pi - beta/2 (log r)^2)",
              _policy_loss("dro_beta", "beta of the quadratic log-ratio penalty", REQUIRED, gt=0.0)),
        _loss("cispo", "CISPO: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi", EPS_LOW, EPS_HIGH),
        _loss("bypass_mode", "verl's rollout-anchored loss with its rollout correction inside", EPS_LOW, EPS_HIGH,
              DUAL_CLIP_C, *BYPASS_CORRECTION, anchors=("rollout",)),
    )
}  # fmt: skip


def get_verl_loss(mode: str) -> VerlLoss:
    try:
        return VERL_LOSSES[mode]
    except KeyError:
        raise UnknownNameError(f"unknown verl loss mode {mode!r}; verl 0.9.1 has: {', '.join(VERL_LOSSES)}") from None


# -- running verl's own function ------------------------------------------------------------------------------------
def actor_config(loss: VerlLoss, anchor: Anchor, values: Values, loss_agg_mode: str, batch_info: dict):
    """verl's ``ActorConfig`` as its workers build it for this mode: every actor key of :meth:`VerlLoss.keys`
    (the bypass_mode loss's correction stays a dict, as Hydra leaves it), and ``batch_info`` as its
    ``global_batch_info`` (``agg_loss``'s normalisers)."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    actor: dict[str, Any] = {}
    policy_loss: dict[str, Any] = {"loss_mode": loss.mode}
    for key, value in loss.keys(anchor, values).items():
        if key.startswith(f"{IN_LOSS}."):
            policy_loss.setdefault("rollout_correction", {})[key.removeprefix(f"{IN_LOSS}.")] = value
        elif key.startswith(f"{ACTOR}.policy_loss."):
            policy_loss[key.removeprefix(f"{ACTOR}.policy_loss.")] = value
        elif key.startswith(f"{ACTOR}."):
            actor[key.removeprefix(f"{ACTOR}.")] = value
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=loss_agg_mode,
                         policy_loss=PolicyLossConfig(**policy_loss), **actor)  # fmt: skip
    config.global_batch_info.update(batch_info)
    return config


def rollout_correction(
    values: Values, old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """Decoupled mode's correction, with verl's own helper as its driver calls it once per batch: the IS weights
    (None without), the response mask after rejection, and verl's rollout_corr metrics."""
    from verl.protocol import DataProto
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    options = {p.name: getattr(values, p.name) for p in DECOUPLED_CORRECTION}
    config = RolloutCorrectionConfig(bypass_mode=False, **options)
    batch = DataProto.from_dict(tensors={"old_log_probs": old_log_prob, "rollout_log_probs": rollout_log_prob,
                                         "response_mask": response_mask.long()})  # fmt: skip
    batch, metrics = compute_rollout_correction_and_add_to_batch(batch, config)
    weights = batch.batch["rollout_is_weights"] if "rollout_is_weights" in batch.batch.keys() else None
    return weights, batch.batch["response_mask"].bool(), metrics
