"""Fig. 2's probe of a real LM through an inference engine, without verl: one rollout batch, no update.

A verl setting with a ``probe`` section (:class:`dppo_bench.config.settings.EngineProbe`) names its model and its
prompts (the training set's verl parquet); the engine samples the setting's batch from them and the trainer makes
one fp32 forward over the same tokens at the same weights. Engines:

- ``vllm``: vLLM itself (its CPU build here, its CUDA build on a GPU) serving the weights in bf16, the real rollout
  engine of the verl settings, with mu read from the log-probs it returns (its top-K and the sampled token);
- ``local``: the suite's own engine (:mod:`dppo_bench.local.rollout`) in one of its numeric formats (bf16 compute,
  fp8 or integer weights), the formats the miniature simulates, here on a real model.

The prompts are the chat messages of the parquet through the tokenizer's chat template with its generation prompt,
as verl's dataset builds them, and a prompt longer than ``train.max_prompt_length`` is left out, as verl's
``filter_overlong_prompts`` does. Both engines stop at the tokenizer's eos. The TV is over mu's top-K plus the rest
(the part of mu an engine returns), as in the verl probe.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import torch

from dppo_bench.config import Setting
from dppo_bench.divergence import kept_token_set, topk_divergence
from dppo_bench.errors import UserError
from dppo_bench.local.model import load_model, response_logits
from dppo_bench.local.rollout import RolloutBatch, RolloutEngine
from dppo_bench.local.trainer import generator
from dppo_bench.vllm_cpu import VLLM_CPU_ENV

TRAINER_CHUNK = 4  # sequences per trainer forward: the logits of a 49k vocabulary are 200 kB per token in fp32


def chat_prompts(setting: Setting, parquet: Path, tokenizer, seed: int) -> list[list[int]]:
    """The batch's prompt token ids: ``prompts_per_step`` prompts drawn by ``seed``, each ``responses_per_prompt``
    times."""
    train = setting.train
    frame = pd.read_parquet(parquet, columns=["prompt"])
    encoded = [
        tokenizer.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for messages in frame["prompt"]
    ]
    fitting = [ids for ids in encoded if len(ids) <= train.max_prompt_length]
    if len(fitting) < train.prompts_per_step:
        raise UserError(
            f"{parquet}: {len(fitting)} of {len(encoded)} prompts fit train.max_prompt_length "
            f"({train.max_prompt_length} tokens) of setting {setting.id!r}; the batch needs {train.prompts_per_step}"
        )
    chosen = torch.randperm(len(fitting), generator=generator(seed, 0))[: train.prompts_per_step].tolist()
    return [list(fitting[i]) for i in chosen for _ in range(train.responses_per_prompt)]


def _pad(rows: list[list], value, dtype) -> torch.Tensor:
    """Rows right-padded with ``value`` to the longest."""
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts left-padded to the longest (as the local engine lays them out), with their mask."""
    width = max(len(p) for p in prompts)
    mask = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts])
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long)
    return ids, mask


def sample_vllm(model_dir: Path, prompts: list[list[int]], setting: Setting, top_k: int, seed: int) -> RolloutBatch:
    """One batch from vLLM in bf16, with mu's kept set (its top-K, the sampled token forced in) per token."""
    for name, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: one model load
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    train = setting.train
    llm = LLM(
        model=str(model_dir),
        dtype="bfloat16",
        max_model_len=train.max_prompt_length + train.max_response_length,
        max_logprobs=top_k,
        seed=seed,
    )
    params = SamplingParams(temperature=train.temperature, max_tokens=train.max_response_length, logprobs=top_k)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    tokens, sampled, top_ids, top_lps = [], [], [], []
    for out in outputs:
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        tokens.append(ids)
        sampled.append([completion.logprobs[t][token].logprob for t, token in enumerate(ids)])
        ranked = [sorted(position.items(), key=lambda item: item[1].rank)[:top_k] for position in completion.logprobs]
        top_ids.append([[token for token, _ in r] for r in ranked])
        top_lps.append([[lp.logprob for _, lp in r] for r in ranked])
    mask = _pad([[True] * len(t) for t in tokens], False, torch.bool)
    response_ids = _pad(tokens, 0, torch.long)
    mu = _pad(sampled, 0.0, torch.float32)
    width = response_ids.shape[1]
    ids_k = torch.zeros(len(tokens), width, top_k, dtype=torch.long)
    lps_k = torch.full((len(tokens), width, top_k), float("-inf"))
    for i, (ids, lps) in enumerate(zip(top_ids, top_lps, strict=True)):
        for t, (row_ids, row_lps) in enumerate(zip(ids, lps, strict=True)):
            ids_k[i, t, : len(row_ids)] = torch.tensor(row_ids)
            lps_k[i, t, : len(row_lps)] = torch.tensor(row_lps)
    ids_k, lps_k = kept_token_set(ids_k, lps_k, response_ids, mu)
    prompt_ids, prompt_mask = left_padded(prompts)
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, mask, mu.masked_fill(~mask, 0.0), ids_k, lps_k)


@torch.no_grad()
def trainer_log_probs(policy: torch.nn.Module, roll: RolloutBatch, temperature: float) -> tuple[torch.Tensor, ...]:
    """The fp32 trainer's log pi of each sampled token and of mu's kept set, in chunks of the batch."""
    sampled, kept = [], []
    for start in range(0, roll.response_ids.shape[0], TRAINER_CHUNK):
        part = slice(start, start + TRAINER_CHUNK)
        ids = torch.cat([roll.prompt_ids[part], roll.response_ids[part]], dim=1)
        attn = torch.cat([roll.prompt_mask[part], roll.response_mask[part]], dim=1)
        log_pi = torch.log_softmax(response_logits(policy, ids, attn, roll.prompt_ids.shape[1]) / temperature, -1)
        sampled.append(log_pi.gather(-1, roll.response_ids[part, :, None]).squeeze(-1))
        kept.append(log_pi.gather(-1, roll.mu_topk_ids[part]))
    return torch.cat(sampled), torch.cat(kept)


@torch.no_grad()
def probe_engine(setting: Setting, model_dir: Path, train_parquet: Path, seed: int) -> dict:
    """Per generated token: mu and pi of the sampled token and the TV over mu's top-K plus the rest."""
    from transformers import AutoTokenizer

    probe, train = setting.probe, setting.train
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = chat_prompts(setting, train_parquet, tokenizer, seed)
    policy = load_model(model_dir)
    if probe.engine == "vllm":
        roll = sample_vllm(model_dir, prompts, setting, probe.top_k, seed)
        engine = "vLLM (bf16)"
    else:
        local = RolloutEngine(policy, probe.rollout, top_k=probe.top_k)
        roll = local.sample(
            prompts,
            max_new_tokens=train.max_response_length,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            temperature=train.temperature,
            generator=generator(seed, 1),
        )
        del local
        engine = f"the local engine ({probe.rollout.describe()})"
    log_pi, log_pi_kept = trainer_log_probs(policy, roll, train.temperature)
    mask = roll.response_mask
    tv = topk_divergence(roll.mu_topk_logprobs, log_pi_kept, "tv")
    lengths = mask.sum(1)
    ended = (roll.response_ids == tokenizer.eos_token_id) & mask
    return {
        "mu": roll.mu_logprobs.exp()[mask].numpy(),
        "pi": log_pi.exp()[mask].numpy(),
        "tv": tv[mask].numpy(),
        "meta": {
            "setting": setting.id,
            "setting_sha256": setting.sha256(),
            "setting_config": setting.model_dump(mode="json"),  # judged by today's identity rule
            "backend": f"engine:{probe.engine}",
            "rollout": engine,
            "trainer": "transformers, fp32",
            "model": str(model_dir),
            "seed": seed,
            "sequences": len(prompts),
            "truncated": int((~ended.any(1)).sum()),  # responses that reached max_response_length unfinished
            "response_tokens_mean": float(lengths.float().mean()),
            "tv_over": f"mu's top-{probe.top_k} and the rest",
        },
    }
