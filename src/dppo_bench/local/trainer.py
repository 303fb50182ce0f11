"""The local RL trainer: rollout engine -> verifier rewards -> GRPO advantages -> mini-batch updates.

Every method runs through the shared surrogate (:func:`dppo_bench.methods.surrogate_loss`). The
rollout anchor uses mu from the engine and makes no extra pass; the recompute anchor runs one
no-grad trainer forward for pi_old, as verl's decoupled mode does.

Determinism: all randomness of step ``s`` comes from a generator seeded by (seed, s), so a run
resumed from a checkpoint replays exactly the steps an uninterrupted run would have taken.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from dppo_bench import canonical
from dppo_bench.config import MethodRecipe, Setting
from dppo_bench.divergence import topk_divergence
from dppo_bench.eval.grading import grade
from dppo_bench.local.batching import decode_responses, prompt_ids
from dppo_bench.local.model import load_model, response_logits, save_model
from dppo_bench.local.rollout import RolloutBatch, RolloutEngine
from dppo_bench.local.task import read_jsonl
from dppo_bench.methods import get_mask, surrogate_loss
from dppo_bench.methods.masked_tokens import MaskedTokenCounts
from dppo_bench.rundir import RunDir

MIN_STATS = {"pi_mu_diff_min"}
MAX_STATS = {"pi_mu_abs_diff_max", "pi_mu_diff_max", "is_ratio_max"}


def generator(*keys: int) -> torch.Generator:
    """A generator seeded by a tuple of integers (seed, step, ...), stable across runs."""
    seed = 0
    for k in keys:
        seed = (seed * 1_000_003 + k) % (2**63 - 1)
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class LocalRun:
    setting: Setting
    recipe: MethodRecipe
    seed: int
    base_model: Path  # HF dir from the pretraining stage
    train_problems: Path  # normalized jsonl of the training split


class LocalTrainer:
    def __init__(
        self,
        run: LocalRun,
        run_dir: RunDir,
        *,
        progress: bool = True,
        log_rows: Callable[[list[dict]], None] | None = None,
    ):
        """``log_rows``: also given every metrics row once it is in metrics.jsonl (e.g. wandb); it sees the
        record, it never changes it."""
        self.run, self.dir, self.progress, self.log_rows = run, run_dir, progress, log_rows
        s, r = run.setting, run.recipe
        self.train, self.local = s.train, s.local
        self.rule = get_mask(r.mask)
        hp = r.profile(s.hyperparameter_profile)
        self.low, self.high = self.rule.low_high(hp.values())
        self.alpha = self.rule.alpha(hp.values())
        self.is_cap = hp.is_cap
        self.recompute = r.anchor == "recompute"
        self.batch_info = {"loss_scale_factor": s.train.max_response_length} if s.loss_agg_mode.endswith("norm") else {}
        self.problems = read_jsonl(run.train_problems)
        torch.set_num_threads(self.local.threads)

    # -- state -------------------------------------------------------------------------------
    def _state_path(self) -> Path:
        return self.dir.checkpoints / "trainer_state.pt"

    def _load(self) -> int:
        """Policy, optimizer and engine, from the last checkpoint if there is one; returns its step."""
        state = torch.load(self._state_path(), weights_only=False) if self._state_path().exists() else None
        step = state["step"] if state else 0
        source = self.dir.checkpoint_dir(step) if state else self.run.base_model
        self.policy = load_model(source).train()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=self.train.lr, weight_decay=self.train.weight_decay)
        if state:
            self.opt.load_state_dict(state["optimizer"])
        self.engine = RolloutEngine(self.policy, self.local.rollout_precision, self.local.logit_noise, self.local.top_k)
        self.dir.truncate_metrics(step)
        return step

    def _record(self, rows: list[dict]) -> None:
        self.dir.append_metrics(rows)
        if self.log_rows is not None and rows:  # scalars only: the token counts stay in metrics.jsonl
            self.log_rows([{k: v for k, v in row.items() if not isinstance(v, dict)} for row in rows])

    def _checkpoint(self, step: int, rows: list[dict]) -> None:
        """Rows first, then the model, then the state file that commits them (see rundir)."""
        self._record(rows)
        save_model(self.policy, self.tokenizer, self.dir.checkpoint_dir(step))
        tmp = self._state_path().with_suffix(".tmp")
        torch.save({"step": step, "optimizer": self.opt.state_dict()}, tmp)
        tmp.replace(self._state_path())

    # -- one step ----------------------------------------------------------------------------
    def _prompts(self, step: int) -> list[dict]:
        """P problems per step, walking through seeded per-epoch permutations of the train split."""
        P, N = self.train.prompts_per_step, len(self.problems)
        out = []
        for i in range((step - 1) * P, step * P):
            epoch, j = divmod(i, N)
            perm = torch.randperm(N, generator=generator(self.run.seed, 7, epoch))
            out.append(self.problems[int(perm[j])])
        return out

    def _rewards(self, roll: RolloutBatch, problems: list[dict]) -> torch.Tensor:
        texts = decode_responses(self.tokenizer, roll.response_ids, roll.response_mask)
        G = self.train.responses_per_prompt
        return torch.tensor(
            [float(grade(t, problems[i // G]["answer"], "integer").correct) for i, t in enumerate(texts)]
        )

    def _advantages(self, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        last = mask.long().cumsum(-1).argmax(-1)  # index of the last response token
        token_rewards = torch.zeros(mask.shape)
        token_rewards[torch.arange(len(rewards)), last] = rewards
        groups = np.arange(len(rewards)) // self.train.responses_per_prompt
        adv, _ = compute_grpo_outcome_advantage(token_rewards, mask.float(), groups, norm_adv_by_std_in_grpo=False)
        return adv

    def _log_probs(self, ids: torch.Tensor, attn: torch.Tensor, prompt_len: int, targets: torch.Tensor):
        logits = response_logits(self.policy, ids, attn, prompt_len) / self.train.temperature
        logp = torch.log_softmax(logits, dim=-1)
        return logp.gather(-1, targets[..., None]).squeeze(-1), logp

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        g = generator(self.run.seed, step)
        problems = self._prompts(step)
        G = self.train.responses_per_prompt
        prompts = [prompt_ids(self.tokenizer, p["problem"]) for p in problems for _ in range(G)]
        self.engine.sync(self.policy)
        roll = self.engine.sample(
            prompts,
            max_new_tokens=self.train.max_response_length,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            temperature=self.train.temperature,
            generator=g,
        )
        rewards = self._rewards(roll, problems)
        mask = roll.response_mask
        adv = self._advantages(rewards, mask)
        ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
        attn = torch.cat([roll.prompt_mask, mask], dim=1)
        L = roll.prompt_ids.shape[1]
        t_roll = time.perf_counter()

        log_old = None
        if self.recompute:
            with torch.no_grad():
                log_old, _ = self._log_probs(ids, attn, L, roll.response_ids)
        t_recompute = time.perf_counter()

        stats, mismatch, entropy, losses, norms = [], {}, [], [], []
        masked_tokens = MaskedTokenCounts()
        for i, idx in enumerate(torch.randperm(len(prompts), generator=g).chunk(self.train.mini_batches)):
            log_pi, logp = self._log_probs(ids[idx], attn[idx], L, roll.response_ids[idx])
            with torch.no_grad():
                ent = -(logp.exp() * logp).sum(-1)
            mu = roll.mu_logprobs[idx]
            topk = None
            if self.rule.topk_kind:
                pi_at_ids = logp.detach().gather(-1, roll.mu_topk_ids[idx])
                topk = topk_divergence(roll.mu_topk_logprobs[idx], pi_at_ids, self.rule.topk_kind)
            loss, st = surrogate_loss(
                self.rule,
                log_prob=log_pi,
                mu_log_prob=mu,
                anchor_log_prob=log_old[idx] if self.recompute else mu,
                advantages=adv[idx],
                response_mask=mask[idx],
                low=self.low,
                high=self.high,
                alpha=self.alpha,
                is_cap=self.is_cap,
                loss_agg_mode=self.run.setting.loss_agg_mode,
                topk_divergence=topk,
                batch_info=self.batch_info,
                entropy=ent,
                on_masked=lambda m, idx=idx: masked_tokens.add(roll.response_ids[idx], m, adv[idx]),
            )
            if not torch.isfinite(loss):
                raise FloatingPointError(f"step {step}: the loss is {loss.item()} (mini-batch {i})")
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.train.grad_clip).item())
            self.opt.step()
            losses.append(loss.item())
            stats.append(st)
            if i == 0:  # no update yet: pi is at the rollout's parameters theta'
                mismatch = {canonical.MISMATCH[k]: st[k] for k in canonical.MISMATCH}
            entropy.append((ent[mask[idx]].sum().item(), int(mask[idx].sum())))
        t_end = time.perf_counter()
        return {
            "step": step,
            canonical.REWARD_MEAN: rewards.mean().item(),
            canonical.RESPONSE_LENGTH_MEAN: mask.sum(-1).float().mean().item(),
            canonical.ENTROPY_MEAN: sum(e for e, _ in entropy) / max(1, sum(n for _, n in entropy)),
            **mismatch,
            **{canonical.SURROGATE_STATS[k]: _reduce(k, [s[k] for s in stats]) for k in stats[0]},
            canonical.ROLLOUT_TOPK_MASS: roll.mu_topk_logprobs.exp().sum(-1)[mask].mean().item(),
            canonical.MASKED_TOKENS: masked_tokens.as_record(),
            "train/loss": sum(losses) / len(losses),
            "train/grad_norm": sum(norms) / len(norms),
            canonical.STEP_SECONDS: t_end - t0,
            "perf/rollout_s": t_roll - t0,
            "perf/recompute_s": t_recompute - t_roll,
            "perf/update_s": t_end - t_recompute,
        }

    # -- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train to the setting's last step; returns {status, last_step}.

        A non-finite loss ends the run as "diverged": a result of the method, recorded with the
        steps before it, not a crash of the pipeline.
        """
        start = self._load()
        if start == 0:
            self._checkpoint(0, [])  # step 0 = the base model, evaluated like every other step
        rows: list[dict] = []
        bar = tqdm(range(start + 1, self.train.steps + 1), desc=self.dir.path.name, disable=not self.progress)
        for step in bar:
            try:
                rows.append(self.step(step))
            except FloatingPointError as e:
                self._record(rows)
                return {"status": "diverged", "last_step": step - 1, "error": str(e)}
            bar.set_postfix(reward=f"{rows[-1][canonical.REWARD_MEAN]:.3f}")
            if step % self.train.save_every == 0 or step == self.train.steps:
                self._checkpoint(step, rows)
                rows = []
        return {"status": "completed", "last_step": self.train.steps}


def _reduce(name: str, values: list[float]) -> float:
    """Over the mini-batches; a mean skips those where the statistic is undefined (NaN: nothing masked)."""
    if name in MIN_STATS:
        return min(values)
    if name in MAX_STATS:
        return max(values)
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else math.nan
