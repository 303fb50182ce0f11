"""Canonical metric names of metrics.jsonl, and the one mapping from each backend's keys.

Both backends write these names, so aggregation never knows which backend ran.
"""

from __future__ import annotations

# the surrogate's per-step statistics (dppo_bench.methods.STAT_NAMES) -> canonical names
SURROGATE_STATS = {
    "mask_frac": "tr/mask_frac",
    "mask_frac_pos": "tr/mask_frac_pos",
    "mask_frac_neg": "tr/mask_frac_neg",
    "bad_update_frac": "tr/bad_update_frac",
    "is_ratio_mean": "tr/is_ratio_mean",
    "is_ratio_max": "tr/is_ratio_max",
    "is_capped_frac": "tr/is_capped_frac",
    "pi_mu_abs_diff_mean": "tr/pi_mu_abs_diff_mean",  # during the update (pi moves), not the mismatch
    "pi_mu_abs_diff_max": "tr/pi_mu_abs_diff_max",
    "pi_mu_diff_min": "tr/pi_mu_diff_min",
    "pi_mu_diff_max": "tr/pi_mu_diff_max",
}

# |pi - mu| of the sampled token at the *same* parameters theta' (pure training-inference mismatch)
MISMATCH = {
    "pi_mu_abs_diff_mean": "mismatch/abs_diff_mean",
    "pi_mu_abs_diff_max": "mismatch/abs_diff_max",
    "pi_mu_diff_min": "mismatch/diff_min",
    "pi_mu_diff_max": "mismatch/diff_max",
}

REWARD_MEAN = "train/reward_mean"
RESPONSE_LENGTH_MEAN = "train/response_length_mean"
ENTROPY_MEAN = "train/entropy_mean"
STEP_SECONDS = "perf/step_s"


def eval_metric(benchmark: str, n: int) -> str:
    return f"eval/{benchmark}/avg@{n}"
