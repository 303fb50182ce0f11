"""The mismatch probe on the local backend: one rollout batch of the base model, no update.

The rollout engine samples the setting's batch (prompts_per_step x responses_per_prompt) exactly as the trainer's
first step would, with its kept set widened to the whole vocabulary, so mu's full next-token distribution is known
at every position; the trainer then makes one forward at the same parameters. The TV is exact (the tiny vocabulary
is summed over), where the verl probe can only sum over mu's top-K.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dppo_bench.config import Setting
from dppo_bench.io import read_complete_jsonl
from dppo_bench.local.batching import prompt_ids
from dppo_bench.local.model import load_model, response_logits
from dppo_bench.local.rollout import RolloutEngine
from dppo_bench.local.trainer import generator


@torch.no_grad()
def probe_mismatch(setting: Setting, base_model: Path, train_problems: Path, seed: int) -> dict:
    """Per generated token: mu and pi of the sampled token and the exact TV of the two distributions."""
    from transformers import AutoTokenizer

    local, train = setting.local, setting.train
    policy = load_model(base_model)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    vocab = policy.config.vocab_size
    engine = RolloutEngine(policy, local.rollout, top_k=vocab)
    problems = read_complete_jsonl(train_problems)
    g = generator(seed, 0)
    chosen = torch.randperm(len(problems), generator=g)[: train.prompts_per_step].tolist()
    prompts = [prompt_ids(tokenizer, problems[i]["problem"]) for i in chosen for _ in range(train.responses_per_prompt)]
    roll = engine.sample(
        prompts,
        max_new_tokens=train.max_response_length,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        temperature=train.temperature,
        generator=g,
    )
    ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
    attn = torch.cat([roll.prompt_mask, roll.response_mask], dim=1)
    log_pi = torch.log_softmax(response_logits(policy, ids, attn, roll.prompt_ids.shape[1]) / train.temperature, -1)
    mu_full = torch.zeros_like(log_pi).scatter_(-1, roll.mu_topk_ids, roll.mu_topk_logprobs.exp())
    mask = roll.response_mask
    pi_sampled = log_pi.gather(-1, roll.response_ids[..., None]).squeeze(-1).exp()
    tv = 0.5 * (mu_full - log_pi.exp()).abs().sum(-1)
    return {
        "mu": roll.mu_logprobs.exp()[mask].numpy(),
        "pi": pi_sampled[mask].numpy(),
        "tv": tv[mask].numpy(),
        "meta": {
            "setting": setting.id,
            "setting_sha256": setting.sha256(),
            "setting_config": setting.model_dump(mode="json"),  # judged by today's identity rule
            "backend": "local",
            "seed": seed,
            "sequences": len(prompts),
            "tv_over": f"the whole vocabulary ({vocab} tokens)",
            "rollout": local.rollout.describe(),
        },
    }
