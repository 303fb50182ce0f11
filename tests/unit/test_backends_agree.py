"""The two trainers agree: one update of verl 0.9.1's actor (its FSDP2 engine and ``ppo_loss``, on CPU through the
plugin's CPU support) and one of the local trainer (:func:`dppo_bench.local.update.update`), on the same batch
and weights, give the same loss, gradient norm and statistics. This is what lets the local backend stand in
for verl. Every method of the miniatures is compared: rollout- and recompute-anchored, binary and Top-K, every
comparison rule (sequence ratio, soft gate, penalty), and verl's own modes, whose local backend calls verl's own
function (and, in decoupled mode, verl's own rollout correction), as verl's driver and workers do. A method of a
user's config root, with a hyperparameter the suite has never seen, runs the same way
(tests/unit/test_new_method.py).
"""

import pytest
from both_backends import one_update_on_both_backends

METHODS = [
    "pg_is",
    "pg_tis",
    "grpo_clip_higher",
    "dppo_binary_tv",
    "dppo_binary_kl",
    "dppo_topk_tv",
    "dppo_topk_kl",
    "mask_bad_updates",
    "minirl",
    "minirl_tis",
    "dppo_binary_tv_recompute",
    "grpo_relax_both_alpha0p3",
    "grpo_relax_high_alpha0p1",
    # the comparison rules: token masks, a sequence ratio and mask, a soft gate, a penalty
    "icepop",
    "kpop",
    "vaco",
    "gspo",
    "sapo",
    "dppo_binary_tv_kl",
    # verl's own modes (bypass mode), and verl's decoupled mode with its rollout correction
    "verl_vanilla",
    "verl_dppo_tv",
    "verl_dppo_kl",
    "verl_gspo",
    "verl_sapo",
    "verl_gpg",
    "verl_clip_cov",
    "verl_kl_cov",
    "verl_geo_mean",
    "verl_dro",
    "verl_cispo",
    "verl_bypass_icepop",
    "verl_decoupled_token_tis",
    "verl_decoupled_geo_rs",
]
OURS = ("mask_frac", "is_ratio_mean", "masked_mu_mean")  # every rule of ours reports these


@pytest.fixture(scope="module")
def updates():
    return one_update_on_both_backends(*METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_one_update_of_verls_actor_equals_one_of_the_local_trainer(updates, method):
    verl, local = updates[method]["verl"], updates[method]["local"]
    assert local["grad_norm"] > 0 or method == "verl_decoupled_geo_rs"  # Geo-RS may reject every sequence
    assert set(verl) == set(local) and (set(OURS) <= set(local) or method.startswith("verl_"))
    for key in local:
        assert verl[key] == pytest.approx(local[key], rel=1e-4, abs=1e-6, nan_ok=True), key


@pytest.mark.slow
def test_the_comparison_can_tell_methods_apart(updates):
    """The masks act on this batch: methods that mask differ from PG-IS, so equal numbers mean agreement."""
    masked = {m: updates[m]["local"]["mask_frac"] for m in METHODS if "mask_frac" in updates[m]["local"]}
    assert masked["pg_is"] == masked["pg_tis"] == 0
    assert all(masked[m] > 0 for m in ("grpo_clip_higher", "dppo_binary_tv", "dppo_topk_kl", "mask_bad_updates"))
    assert masked["minirl"] > 0 and masked["minirl_tis"] > 0  # pi_old != pi: the recompute anchor acts
    assert updates["dppo_binary_tv"]["local"]["loss"] != pytest.approx(updates["pg_is"]["local"]["loss"])
    assert all(masked[m] > 0 for m in ("icepop", "kpop", "vaco", "gspo", "dppo_binary_tv_kl"))
    local = {m: updates[m]["local"] for m in METHODS}
    assert local["sapo"]["gate_mean"] < 1 and local["dppo_binary_tv_kl"]["penalty_mean"] > 0
    verl_modes = [m for m in METHODS if m.startswith("verl_") and local[m]["grad_norm"] > 0]
    assert len({round(local[m]["grad_norm"], 6) for m in verl_modes}) >= len(verl_modes) - 2  # they differ
    # our IcePop is verl's own bypass-mode IcePop, in verl's engine too; verl's DPPO modes are ours in bypass mode
    for ours, theirs in [("icepop", "verl_bypass_icepop"), ("dppo_binary_tv", "verl_dppo_tv")]:
        for key in ("loss", "grad_norm"):
            assert updates[ours]["verl"][key] == pytest.approx(updates[theirs]["verl"][key], rel=1e-5), (ours, key)
