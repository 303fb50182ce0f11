"""Rules of the trust-region methods a researcher compares DPPO with, each on the shared surrogate.

Each is written from the public implementation its recipe cites (repository, file, commit); where that code and
the method's paper could be read two ways, the recipe says which reading this is. All are anchored to the rollout
policy mu (verl's bypass mode): the token weight is pi/mu as in the paper's methods. Zero-advantage tokens are never
masked (their gradient is zero either way), as in the paper's rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dppo_bench import divergence
from dppo_bench.methods.params import Param, Values
from dppo_bench.methods.registry import Tokens, register_mask
from dppo_bench.methods.rules import DELTA, binary_tv, both_sides

if TYPE_CHECKING:
    import torch

RATIO_LOG_BOUND = 20.0  # verl's rollout-correction bound (rollout_corr_helper.SAFETY_BOUND): exp(+-20)


def _ratio(t: Tokens, bound: float = RATIO_LOG_BOUND) -> torch.Tensor:
    """pi / anchor per token, its log bounded at +-``bound``."""
    return t.log_ratio.clamp(-bound, bound).exp()


# -- IcePop (Ring-1T, arXiv 2510.18855) ---------------------------------------------------------------------------
ICEPOP = "IcePop (Ling team, arXiv 2510.18855)"


@register_mask(
    "icepop",
    anchors=("rollout",),
    params=(
        Param("ratio_min", "IcePop's alpha: tokens with pi/mu below it are dropped", f"{ICEPOP}: alpha = 0.5", 0.5,
              gt=0.0),
        Param("ratio_max", "IcePop's beta: tokens with pi/mu above it are dropped", f"{ICEPOP}: beta = 5", 5.0,
              gt=0.0),
    ),
)  # fmt: skip
def icepop(t: Tokens, ratio_min: float, ratio_max: float) -> torch.Tensor:
    """Keep a token (weight r = pi/mu) only when ratio_min <= r <= ratio_max, whatever the advantage's sign."""
    r = _ratio(t)
    return (t.up | t.down) & ((r < ratio_min) | (r > ratio_max))


# -- KPop (AReaL) -------------------------------------------------------------------------------------------------
@register_mask(
    "kpop",
    anchors=("rollout",),
    params=(
        Param("delta", "threshold on max(KL_bin(pi || mu), KL_bin(mu || pi)) of the sampled token",
              "AReaL examples/math/gsm8k_kpop.yaml (rejection_sampling.upper = 2.0)", 2.0, ge=0.0),
    ),
)  # fmt: skip
def kpop(t: Tokens, delta: float) -> torch.Tensor:
    """Drop a token whose binary KL exceeds delta in either direction, whatever the advantage's sign."""
    forward = divergence.binary_kl(t.log_pi, t.log_anchor, p=t.pi)
    reverse = divergence.binary_kl(t.log_anchor, t.log_pi, p=t.anchor)
    return (t.up | t.down) & (forward.maximum(reverse) > delta)


# -- DPPO-Binary-TV + KL penalty (prime-rl's default loss from ff4b125) ---------------------------------------------
def kl_penalty(log_ratio: torch.Tensor, t: Tokens, values: Values) -> torch.Tensor:
    """tau * (log pi/mu)^2 on every response token (Kimi K2.5's form), its gradient through log pi."""
    return values.kl_coef * log_ratio.square()


@register_mask(
    "dppo_binary_tv_kl_penalty",
    anchors=("rollout",),
    params=(
        DELTA,
        Param("kl_coef", "tau of the per-token penalty tau * (log pi/mu)^2",
              "prime-rl src/prime_rl/configs/trainer.py @ ff4b125 (kl_tau = 1e-3)", 1e-3, ge=0.0),
    ),
    arguments=both_sides,
    penalty=kl_penalty,
)  # fmt: skip
def binary_tv_with_penalty(t: Tokens, low: float, high: float) -> torch.Tensor:
    """DPPO-Binary-TV's mask; the penalty is the rule's other part."""
    return binary_tv(t, low, high)


# -- GSPO's sequence ratio and sequence clip (arXiv 2507.18071), as verl 0.9.1 computes it ---------------------------
GSPO_LOG_BOUND = 10.0  # verl's compute_policy_loss_gspo (and prime-rl) bound log s at 10: no gradient beyond it
GSPO = "GSPO (Zheng et al. 2025, arXiv 2507.18071); verl examples/gspo_trainer/run_qwen3_8b_fsdp.sh"


@register_mask(
    "gspo_sequence_clip",
    anchors=("rollout",),
    params=(
        Param("eps_low", "sequence clip, A < 0: dropped where s < 1 - eps_low", f"{GSPO}: 3e-4", 3e-4, ge=0.0),
        Param("eps_high", "sequence clip, A > 0: dropped where s > 1 + eps_high", f"{GSPO}: 4e-4", 4e-4, ge=0.0),
    ),
    ratio="sequence",
)  # fmt: skip
def sequence_clip(t: Tokens, eps_low: float, eps_high: float) -> torch.Tensor:
    """PPO's clip on the length-normalised sequence ratio s = exp(mean_t log pi_t/anchor_t), for every token of the
    sequence; tokens of a sequence with log s > 10 get no gradient, as in verl."""
    log_s = t.sequence_mean(t.log_ratio)
    s = log_s.clamp(max=GSPO_LOG_BOUND).exp()
    clipped = (t.up & (s > 1 + eps_high)) | (t.down & (s < 1 - eps_low))
    return clipped | ((t.up | t.down) & (log_s > GSPO_LOG_BOUND))


# -- SAPO's soft gate (arXiv 2511.20347), as verl 0.9.1 computes it -------------------------------------------------
SAPO = "SAPO (Gao et al. 2025, arXiv 2511.20347); verl 0.9.1 actor.yaml tau_pos / tau_neg"


@register_mask(
    "sapo_soft_gate",
    anchors=("rollout",),
    params=(
        Param("tau_pos", "temperature of the gate for A > 0", f"{SAPO}: 1.0", 1.0, gt=0.0),
        Param("tau_neg", "temperature of the gate for A <= 0", f"{SAPO}: 1.05", 1.05, gt=0.0),
    ),
    gate="soft",
)  # fmt: skip
def sapo_gate(t: Tokens, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO's loss -A f(r), f(r) = 4/tau sigmoid(tau (r - 1)), has the gradient -A r f'(r) grad log pi: the
    surrogate's weight r times the gate f'(r) = 4 sigmoid(tau (r - 1)) (1 - sigmoid(tau (r - 1))), 1 at r = 1.
    verl bounds log r at +-20 with a clamp that stops the gradient beyond: the gate is 0 there."""
    log_r = t.log_ratio
    r = log_r.clamp(-RATIO_LOG_BOUND, RATIO_LOG_BOUND).exp()
    tau = r.new_full(r.shape, tau_neg).masked_fill(t.up, tau_pos)
    s = (tau * (r - 1.0)).sigmoid()
    return 4.0 * s * (1.0 - s) * (log_r.abs() <= RATIO_LOG_BOUND).to(r.dtype)


# -- VACO's sequence divergence mask, as open-instruct computes it (arXiv 2603.01365) -------------------------------
OPEN_INSTRUCT_LOG_BOUND = 10.0  # open-instruct's compute_rho_correction bounds log rho at +-10


@register_mask(
    "vaco",
    anchors=("rollout",),
    params=(
        Param("delta", "threshold on the sequence mean of |pi/mu - 1| (open-instruct's rho_mask_upper_bound)",
              "ours: open-instruct ships none (0 = off); see the vaco recipe"),
    ),
)  # fmt: skip
def vaco(t: Tokens, delta: float) -> torch.Tensor:
    """Drop the tokens that move pi away from mu (sign(log pi/mu) * A > 0) in sequences whose mean |pi/mu - 1|
    exceeds delta; the others pass."""
    log_r = t.log_ratio.clamp(-OPEN_INSTRUCT_LOG_BOUND, OPEN_INSTRUCT_LOG_BOUND)
    divergent = t.sequence_mean((log_r.exp() - 1.0).abs()) > delta
    moving_away = (t.up & (log_r > 0)) | (t.down & (log_r < 0))
    return divergent & moving_away
