"""The rollout engine: the trainer's weights on a different numeric path, as an inference engine.

A copy of the policy in the setting's rollout format (:mod:`dppo_bench.local.formats`: bf16, fp8 or integer
weights, fp8 activations, bf16 compute; all fp32 for the no-mismatch control) samples with a KV cache, token by
token, optionally adding Gaussian noise to its logits. mu is the distribution it actually samples from (noise
included), so mu differs from the trainer's pi at equal parameters the way an inference engine does. It records mu's
log-prob of every sampled token and mu's kept top-K set (the paper's replacement rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dppo_bench.config import RolloutFormat
from dppo_bench.divergence import topk_of_log_probs
from dppo_bench.local.formats import build_engine_model, load_weights


@dataclass
class RolloutBatch:
    prompt_ids: torch.Tensor  # (B, L) left-padded
    prompt_mask: torch.Tensor  # (B, L) bool
    response_ids: torch.Tensor  # (B, T) right-padded; includes the eos token when one was sampled
    response_mask: torch.Tensor  # (B, T) bool
    mu_logprobs: torch.Tensor  # (B, T) log mu of the sampled token
    mu_topk_ids: torch.Tensor  # (B, T, K) mu's kept set (sampled token included)
    mu_topk_logprobs: torch.Tensor  # (B, T, K)


class RolloutEngine:
    """The policy's copy in the rollout ``fmt``, which samples and records mu."""

    def __init__(self, policy: torch.nn.Module, fmt: RolloutFormat, top_k: int):
        self.fmt, self.top_k = fmt, top_k
        self.model = build_engine_model(policy, fmt)
        self.sync(policy)

    def sync(self, policy: torch.nn.Module) -> None:
        """Load the trainer's current weights through the engine's format."""
        load_weights(self.model, policy, self.fmt)

    @torch.no_grad()
    def sample(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        eos_id: int,
        pad_id: int,
        temperature: float,
        generator: torch.Generator,
    ) -> RolloutBatch:
        """Sample on the engine's device; ``generator`` must be on that device too."""
        B, L = len(prompts), max(len(p) for p in prompts)
        prompt_ids = torch.full((B, L), pad_id, dtype=torch.long)
        prompt_mask = torch.zeros(B, L, dtype=torch.bool)
        for i, p in enumerate(prompts):
            prompt_ids[i, L - len(p) :] = torch.tensor(p)
            prompt_mask[i, L - len(p) :] = True
        device = next(self.model.parameters()).device
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        attention = prompt_mask.long()
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=prompt_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
        next_pos = positions[:, -1:] + 1

        tokens, logps, top_ids, top_lps = [], [], [], []
        done = torch.zeros(B, dtype=torch.bool, device=device)
        alive = []
        for _ in range(max_new_tokens):
            logits = logits.float()
            if self.fmt.logit_noise > 0:
                logits = logits + self.fmt.logit_noise * torch.randn(logits.shape, generator=generator, device=device)
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            token = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            alive.append(~done)
            tokens.append(token)
            logps.append(logprobs.gather(-1, token[:, None]).squeeze(-1))
            k_ids, k_lp = topk_of_log_probs(logprobs, self.top_k, token)
            top_ids.append(k_ids)
            top_lps.append(k_lp)
            done = done | (token == eos_id)
            if done.all():  # a host sync per token, as an engine's stop check
                break
            attention = torch.cat([attention, attention.new_ones(B, 1)], dim=-1)
            out = self.model(
                input_ids=token[:, None],
                attention_mask=attention,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1]
            next_pos = next_pos + 1
        mask = torch.stack(alive, dim=1)
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=torch.stack(tokens, dim=1),
            response_mask=mask,
            mu_logprobs=torch.stack(logps, dim=1).masked_fill(~mask, 0.0),
            mu_topk_ids=torch.stack(top_ids, dim=1),
            mu_topk_logprobs=torch.stack(top_lps, dim=1),
        )
