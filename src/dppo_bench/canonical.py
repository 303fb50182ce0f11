"""Canonical metric names of metrics.jsonl, and the one mapping from each backend's keys.

Both backends write these names, so aggregation never knows which backend ran.
"""

from __future__ import annotations

import re

# the surrogate's per-step statistics (dppo_bench.methods.STAT_NAMES) -> canonical names
SURROGATE_STATS = {
    # Two denominators for the masked ("clipped") fraction; experiments name which one they plot:
    # over all response tokens (ours, as verl's own pg_clipfrac) ...
    "mask_frac": "tr/mask_frac",
    "mask_frac_pos": "tr/mask_frac_pos",  # masked / A > 0 tokens
    "mask_frac_neg": "tr/mask_frac_neg",  # masked / A < 0 tokens
    # ... and over tokens with A != 0, as the paper's code (Stable-RL) logs pg_clipfrac and pg_clipfrac_lower
    "mask_frac_nonzero_adv": "tr/mask_frac_nonzero_adv",
    "mask_frac_pos_nonzero_adv": "tr/mask_frac_pos_nonzero_adv",
    "mask_frac_neg_nonzero_adv": "tr/mask_frac_neg_nonzero_adv",
    # Fig. 6: the rollout probability mu and pi's entropy of the masked tokens (null on a step that masked none)
    "masked_mu_mean": "tr/masked_mu_mean",
    "masked_pi_mean": "tr/masked_pi_mean",  # and pi's: how far the policy has moved from mu where it masks
    "masked_entropy_mean": "tr/masked_entropy_mean",
    "bad_update_frac": "tr/bad_update_frac",
    "is_ratio_mean": "tr/is_ratio_mean",
    "is_ratio_max": "tr/is_ratio_max",
    "is_capped_frac": "tr/is_capped_frac",
    "pi_mu_abs_diff_mean": "tr/pi_mu_abs_diff_mean",  # during the update (pi moves), not the mismatch
    "pi_mu_abs_diff_max": "tr/pi_mu_abs_diff_max",
    "pi_mu_diff_min": "tr/pi_mu_diff_min",
    "pi_mu_diff_max": "tr/pi_mu_diff_max",
    # the parts of a rule that has them (dppo_bench.methods.surrogate.PART_STAT_NAMES)
    "gate_mean": "tr/gate_mean",  # a soft gate's mean over response tokens (SAPO)
    "penalty_mean": "tr/penalty_mean",  # a per-token penalty's mean over response tokens (prime-rl's KL term)
}
# verl's own loss modes' statistics (their actor/<name> metrics; both backends call verl's function)
VERL_LOSS_STATS = {
    "pg_clipfrac": "tr/pg_clipfrac",
    "pg_clipfrac_lower": "tr/pg_clipfrac_lower",
    "ppo_kl": "tr/ppo_kl",
}
# every statistic a loss returns, by the name it returns it under (the verl backend prefixes actor/)
LOSS_STATS = SURROGATE_STATS | VERL_LOSS_STATS

# |pi - mu| of the sampled token at the *same* parameters theta' over the whole rollout batch (pure
# training-inference mismatch; dppo_bench.mismatch): mean and max of |pi - mu|, min and max of pi - mu
MISMATCH_STATS = ("mismatch/abs_diff_mean", "mismatch/abs_diff_max", "mismatch/diff_min", "mismatch/diff_max")

# Fig. 12: the mean probability mass of mu's kept top-K set per response token (rollout top-K runs)
ROLLOUT_TOPK_MASS = "rollout/topk_mass_mean"
# App. D: token id -> count of the step's masked tokens, {"pos": {...}, "neg": {...}} (dppo_bench.methods.masked_tokens)
MASKED_TOKENS = "tr/masked_token_counts"

REWARD_MEAN = "train/reward_mean"
RESPONSE_LENGTH_MEAN = "train/response_length_mean"
ENTROPY_MEAN = "train/entropy_mean"
STEP_SECONDS = "perf/step_s"


def eval_metric(benchmark: str, n: int) -> str:
    return f"eval/{benchmark}/avg@{n}"


EVAL_METRIC = re.compile(r"eval/(?P<benchmark>[a-z0-9_]+)/avg@(?P<n>[1-9][0-9]*)")  # what eval_metric writes


# --- the verl backend: verl 0.9.1's logged keys (FileLogger rows) -> canonical names -------------------------------
# Read by dppo_bench.verl_launch.records; a key that is not here stays only in the raw attempt logs.
VERL_PATCH_PREFIX = "dppo_bench/"  # keys our verl patch (dppo_bench.verl_plugin.mismatch) logs

VERL_KEYS = {
    # The training reward. verl logs the mean sequence score of the batch; our reward function
    # (dppo_bench.eval.verl_reward) scores 1.0 correct / 0.0 wrong unless its incorrect_score is set, which
    # run_config never does: critic/score/mean is then the 0/1 accuracy the paper plots.
    "critic/score/mean": REWARD_MEAN,
    "response_length/mean": RESPONSE_LENGTH_MEAN,
    # Token-mean entropy of pi(theta') over response tokens, from the log-prob pass at the rollout's parameters
    # (decoupled mode: verl's recompute; bypass mode: our diagnostic pass). verl's own actor/entropy is aggregated
    # with the loss mode (seq-mean-token-sum-norm divides by the max length), so it is not this number.
    f"{VERL_PATCH_PREFIX}{ENTROPY_MEAN}": ENTROPY_MEAN,
    # |pi - mu| at equal parameters (both modes: see dppo_bench.verl_plugin.mismatch)
    **{f"{VERL_PATCH_PREFIX}{name}": name for name in MISMATCH_STATS},
    # the surrogate's statistics, returned by our loss modes as actor/<stat> (mean over micro-batches and ranks)
    **{f"actor/{stat}": name for stat, name in LOSS_STATS.items()},
    "actor/topk_divergence_mean": "tr/topk_divergence_mean",
    "actor/topk_divergence_max": "tr/topk_divergence_max",
    "actor/rollout_topk_mass_mean": ROLLOUT_TOPK_MASS,
    # wall clock of one training step (rollout, log-probs, update, checkpoint; not the validation)
    "timing_s/step": STEP_SECONDS,
    "timing_s/gen": "perf/rollout_s",
    "timing_s/old_log_prob": "perf/recompute_s",  # includes the bypass-mode mismatch pass
    "timing_s/update_actor": "perf/update_s",
    "timing_s/testing": "perf/validation_s",
    "actor/pg_loss": "train/loss",
    "actor/grad_norm": "train/grad_norm",
    "actor/lr": "train/lr",
    "response_length/clip_ratio": "train/response_clip_frac",
}

# online validation: val-core/<data_source>/acc/mean@<n> -> eval/<benchmark>/avg@<n>
VERL_VALIDATION_KEY = r"val-core/(?P<data_source>.+)/acc/mean@(?P<n>\d+)"

# Every per-step name either backend writes to metrics.jsonl (besides the eval_metric names): what an experiment's
# panels and columns may plot, so that a misspelt name is an error instead of an empty curve
STEP_METRICS = frozenset(
    {REWARD_MEAN, RESPONSE_LENGTH_MEAN, ENTROPY_MEAN, STEP_SECONDS, ROLLOUT_TOPK_MASS, *MISMATCH_STATS}
    | set(LOSS_STATS.values())
    | set(VERL_KEYS.values())
)
