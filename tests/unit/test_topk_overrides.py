"""What a Top-K recipe becomes in verl's config, and that K reaches every reader of it."""

import pytest

from dppo_bench.config import load_methods
from dppo_bench.verl_launch.compose import compose_ppo_config, to_dataclasses
from dppo_bench.verl_launch.overrides import method_overrides
from dppo_bench.verl_plugin.topk.fields import rollout_topk_k

RECIPES = load_methods()
MINIMAL = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]


@pytest.mark.parametrize("name", ["dppo_topk_tv", "dppo_topk_kl"])
def test_paper_k_rides_in_rollout_custom_without_raising_vllms_cap(name):
    overrides = method_overrides(RECIPES[name], "scaling")
    assert overrides[-3:] == [
        "++actor_rollout_ref.rollout.custom.dppo_topk_k=20",
        "actor_rollout_ref.model.use_fused_kernels=False",
        "trainer.use_v1=True",
    ]
    cfg = compose_ppo_config(overrides + MINIMAL)
    typed = to_dataclasses(cfg)
    assert rollout_topk_k(typed["rollout"]) == 20  # what verl's vLLM server holds as self.config
    assert rollout_topk_k(cfg.actor_rollout_ref.rollout) == 20  # what the agent loop holds
    assert "max_logprobs" not in typed["rollout"].engine_kwargs["vllm"]
    assert typed["actor"].policy_loss.loss_mode == name and typed["rollout_correction"].bypass_mode is True


def test_k_above_twenty_raises_vllms_max_logprobs():
    cfg = compose_ppo_config(method_overrides(RECIPES["dppo_topk_tv"], "scaling", topk=32) + MINIMAL)
    typed = to_dataclasses(cfg)
    assert rollout_topk_k(typed["rollout"]) == 32
    assert typed["rollout"].engine_kwargs["vllm"]["max_logprobs"] == 32


def test_non_topk_recipes_get_no_topk_keys():
    assert not any("dppo_topk_k" in o or "use_v1" in o for o in method_overrides(RECIPES["dppo_binary_tv"], "sanity"))


@pytest.mark.parametrize("bad", [0, -3])
def test_a_nonpositive_k_is_refused(bad):
    with pytest.raises(ValueError, match="K >= 1"):
        method_overrides(RECIPES["dppo_topk_kl"], "scaling", topk=bad)
    with pytest.raises(ValueError, match="positive integer"):
        rollout_topk_k({"custom": {"dppo_topk_k": bad}})


def test_k_is_absent_unless_set():
    assert rollout_topk_k({"custom": None}) is None and rollout_topk_k({"custom": {"other": 1}}) is None
