"""Fig. 2's probe of the real LM through an engine (dppo_bench.probe.engines): the local engine without a
mismatch gives pi = mu, a lower-precision one does not, and vLLM's tokens, stop token and top-K are read right."""

from __future__ import annotations

import numpy as np
import pytest
from real_lm import real_lm  # noqa: F401 (a fixture)

from dppo_bench.cli import main
from dppo_bench.config import find_setting
from dppo_bench.config.settings import RolloutFormat
from dppo_bench.errors import UserError
from dppo_bench.probe.engines import chat_prompts, probe_engine

pytestmark = pytest.mark.slow


@pytest.fixture
def parquet(tmp_path, shared_data):
    out = tmp_path / "data"
    assert main(["data", "prepare", "math_level12_train", "--out", str(out)]) == 0
    return out / "math_level12_train.parquet"


def small(setting_id: str, *, rollout: RolloutFormat | None = None, prompts: int = 2, tokens: int = 12):
    """The probe setting on a batch small enough for a test."""
    setting = find_setting(setting_id)
    train = setting.train.model_copy(update={"prompts_per_step": prompts, "max_response_length": tokens})
    probe = setting.probe if rollout is None else setting.probe.model_copy(update={"rollout": rollout})
    return setting.model_copy(update={"train": train, "probe": probe})


def test_the_prompts_are_the_chat_template_of_the_parquet_and_overlong_ones_are_left_out(real_lm, parquet):  # noqa: F811
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_lm)
    setting = small("smollm_probe_bf16", prompts=3)
    prompts = chat_prompts(setting, parquet, tokenizer, seed=0)
    assert len(prompts) == 3 * setting.train.responses_per_prompt
    assert prompts == chat_prompts(setting, parquet, tokenizer, seed=0)  # the seed fixes the batch
    text = tokenizer.decode(prompts[0])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "Please reason step by step" in text
    assert all(len(p) <= setting.train.max_prompt_length for p in prompts)
    tight = setting.model_copy(update={"train": setting.train.model_copy(update={"max_prompt_length": 40})})
    with pytest.raises(UserError, match=r"prompts fit train.max_prompt_length \(40 tokens\)"):
        chat_prompts(tight, parquet, tokenizer, seed=0)


def test_an_engine_in_the_trainers_format_has_no_mismatch_and_bf16_weights_do(real_lm, parquet):  # noqa: F811
    exact = probe_engine(small("smollm_probe_bf16", rollout=RolloutFormat(weights="fp32")), real_lm, parquet, 0)
    assert exact["mu"].size > 0 and np.all((exact["mu"] > 0) & (exact["mu"] <= 1))
    # the same fp32 arithmetic, token by token with a KV cache against one pass: equal up to the order of sums
    np.testing.assert_allclose(exact["pi"], exact["mu"], atol=2e-4)
    assert exact["tv"].max() < 1e-3
    rounded = probe_engine(small("smollm_probe_bf16"), real_lm, parquet, 0)
    assert np.abs(rounded["pi"] - rounded["mu"]).max() > 10 * np.abs(exact["pi"] - exact["mu"]).max()
    assert rounded["meta"]["rollout"].startswith("the local engine (bf16 weights")
    assert rounded["meta"]["tv_over"] == "mu's top-20 and the rest"


def test_vllm_serves_the_batch_in_bf16_and_its_top_k_holds_the_sampled_token(real_lm, parquet):  # noqa: F811
    setting = small("smollm_probe_vllm", tokens=16)
    record = probe_engine(setting, real_lm, parquet, 0)
    mu, pi, tv = record["mu"], record["pi"], record["tv"]
    assert 0 < mu.size <= 2 * 16 and np.all((mu > 0) & (mu <= 1))
    assert np.all(tv >= 0) and np.all(tv <= 1)
    # bf16 serving against fp32 scoring of the same weights: close on average, never equal everywhere
    assert 0 < np.abs(pi - mu).mean() < 0.05
    meta = record["meta"]
    assert meta["rollout"] == "vLLM (bf16)" and meta["sequences"] == 2 and 0 <= meta["truncated"] <= 2
