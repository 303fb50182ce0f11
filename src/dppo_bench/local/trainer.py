"""The local RL trainer: rollout engine -> verifier rewards -> GRPO advantages -> mini-batch updates.

Every method runs through the shared surrogate (:func:`dppo_bench.methods.surrogate_loss`). The
rollout anchor uses mu from the engine; the recompute anchor runs one no-grad trainer forward over the
whole batch for pi_old, as verl's decoupled mode does. The same pass, made every ``train.mismatch_every``
steps for the rollout anchor too (as our patch of verl's bypass mode does), measures the mismatch at
equal parameters and the policy's entropy over the whole batch (:mod:`dppo_bench.mismatch`).

Determinism: all randomness of step ``s`` comes from a generator seeded by (seed, s), so a run
resumed from a checkpoint replays exactly the steps an uninterrupted run would have taken (on the same device: a
CUDA generator draws other numbers than a CPU one).

Nothing here imports verl, Ray or vLLM (the advantage and the loss's aggregation are our own, tested equal to
verl's): the trainer runs on a GPU image that has only torch (benchmarks/gpu_check.sh). verl's own loss modes
import verl when they run.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from dppo_bench import canonical
from dppo_bench.config.runs import OfResolvedRun, ResolvedRun
from dppo_bench.config.specs import AnswerType
from dppo_bench.eval.grading import grade
from dppo_bench.io import CorruptFileError, read_complete_jsonl, verify_checksums
from dppo_bench.local.batching import decode_responses, prompt_ids
from dppo_bench.local.model import load_model, save_model
from dppo_bench.local.rollout import RolloutBatch, RolloutEngine
from dppo_bench.local.update import Batch, Loss, policy_log_probs, update
from dppo_bench.methods.masked_tokens import MaskedTokenCounts
from dppo_bench.methods.verl_losses import rollout_correction
from dppo_bench.mismatch import entropy_mean, mismatch_stats
from dppo_bench.rundir import RunDir

STATE_FILE = "trainer_state.pt"  # the optimizer's state, in each checkpoint directory
MIN_STATS = {"pi_mu_diff_min"}
MAX_STATS = {"pi_mu_abs_diff_max", "pi_mu_diff_max", "is_ratio_max"}


def generator(*keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on ``device`` seeded by a tuple of integers (seed, step, ...), stable across runs."""
    seed = 0
    for k in keys:
        seed = (seed * 1_000_003 + k) % (2**63 - 1)
    return torch.Generator(device=device).manual_seed(seed)


def group_advantages(rewards: torch.Tensor, response_mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO's outcome advantage without the std division (Dr.GRPO; verl's ``norm_adv_by_std_in_grpo=False``): each
    response's reward minus its group's mean, on every response token. The ``group_size`` responses of a prompt are
    consecutive; a group of one keeps its reward (verl sets such a group's mean to 0)."""
    groups = rewards.float().view(-1, group_size)
    if group_size > 1:
        groups = groups - groups.mean(dim=-1, keepdim=True)
    return groups.reshape(-1, 1) * response_mask.float()


@dataclass(frozen=True)
class LocalRun(OfResolvedRun):
    resolved: ResolvedRun  # setting, recipe, seed and the specs, resolved once by the command
    base_model: Path  # HF dir from the pretraining stage
    train_problems: Path  # normalized jsonl of the training split

    @property
    def answer_type(self) -> AnswerType:
        """How a response is graded: the answer type of the training set's spec."""
        return self.resolved.train_data.answer_type


class LocalTrainer:
    def __init__(
        self,
        run: LocalRun,
        run_dir: RunDir,
        *,
        progress: bool = True,
        log_rows: Callable[[list[dict]], None] | None = None,
        device: torch.device | str = "cpu",
    ):
        """``log_rows``: also given every metrics row once it is in metrics.jsonl (e.g. wandb); it sees the
        record, it never changes it. ``device``: where the policy, the engine and the batches live."""
        self.run, self.dir, self.progress, self.log_rows = run, run_dir, progress, log_rows
        self.device = torch.device(device)
        s, r = run.setting, run.recipe
        self.train, self.local = s.train, s.local
        batch_info = {"loss_scale_factor": s.loss_scale_factor} if s.loss_scale_factor is not None else {}
        self.loss = Loss.of(r, s.hyperparameter_profile, s.loss_agg_mode, batch_info)
        self.recompute = r.anchor == "recompute"
        self.problems = read_complete_jsonl(run.train_problems)
        torch.set_num_threads(self.local.threads)

    # -- state -------------------------------------------------------------------------------
    def _load(self) -> int:
        """Policy, optimizer and engine, from the last checkpoint if there is one; returns its step.

        The checkpoint must be intact (every file its SHA256SUMS lists, with that sha256) and metrics.jsonl must
        hold exactly the rows 1..step it covers: anything else is refused with the file named, never trained on.
        """
        saved = self.dir.saved_steps()
        step = saved[-1] if saved else 0
        source = self.dir.checkpoint_dir(step) if saved else self.run.base_model
        state = None
        if saved:
            verify_checksums(source)
            state = torch.load(source / STATE_FILE, weights_only=True, map_location="cpu")
            if state.get("step") != step:
                raise CorruptFileError(f"{source / STATE_FILE}: holds step {state.get('step')}, not {step}")
        kept = [r["step"] for r in self.dir.read_metrics() if r["step"] <= step]
        if kept != list(range(1, step + 1)):
            raise CorruptFileError(
                f"{self.dir.metrics}: the rows of steps 1..{step} (covered by {source}) are not all there exactly "
                f"once (found steps {_ranges(kept)}); the file is damaged or was written by two trainers"
            )
        self.policy = load_model(source).to(self.device).train()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=self.train.lr, weight_decay=self.train.weight_decay)
        if state:
            self.opt.load_state_dict(state["optimizer"])
        self.engine = RolloutEngine(self.policy, self.local.rollout, self.local.top_k)
        self.dir.truncate_metrics(step)
        return step

    def _record(self, rows: list[dict]) -> None:
        self.dir.append_metrics(rows)
        if self.log_rows is not None and rows:  # scalars only: the token counts stay in metrics.jsonl
            self.log_rows([{k: v for k, v in row.items() if not isinstance(v, dict)} for row in rows])

    def _checkpoint(self, step: int, rows: list[dict]) -> None:
        """Rows first, then the checkpoint that commits them: model, tokenizer and optimizer state in one directory
        with their sha256s, renamed into place whole (see rundir)."""
        self._record(rows)
        state = io.BytesIO()
        torch.save({"step": step, "optimizer": self.opt.state_dict()}, state)
        save_model(self.policy, self.tokenizer, self.dir.checkpoint_dir(step), extra={STATE_FILE: state.getvalue()})

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
        texts = decode_responses(self.tokenizer, roll.response_ids.cpu(), roll.response_mask.cpu())
        G = self.train.responses_per_prompt
        return torch.tensor(
            [float(grade(t, problems[i // G]["answer"], self.run.answer_type).correct) for i, t in enumerate(texts)],
            device=self.device,
        )

    def _rollout(self, step: int, g: torch.Generator) -> tuple[RolloutBatch, torch.Tensor]:
        """The step's rollout batch from the engine at the current parameters, and each sample's reward."""
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
        return roll, self._rewards(roll, problems)

    def _batch(self, roll: RolloutBatch, advantages: torch.Tensor) -> Batch:
        return Batch(
            input_ids=torch.cat([roll.prompt_ids, roll.response_ids], dim=1),
            attention_mask=torch.cat([roll.prompt_mask, roll.response_mask], dim=1),
            prompt_len=roll.prompt_ids.shape[1],
            responses=roll.response_ids,
            response_mask=roll.response_mask,
            mu_log_probs=roll.mu_logprobs,
            anchor_log_probs=roll.mu_logprobs,
            advantages=advantages,
            topk_ids=roll.mu_topk_ids if self.loss.topk_kind else None,
            topk_log_probs=roll.mu_topk_logprobs if self.loss.topk_kind else None,
        )

    def _at_rollout_parameters(self, step: int, batch: Batch) -> tuple[Batch, dict]:
        """One no-grad pass over the whole batch at theta', before any update, when the step needs it: pi_old for
        the recompute anchor (with verl's rollout correction for verl's own modes, once per batch as verl's driver
        computes it), and the mismatch and entropy every ``mismatch_every`` steps."""
        every = self.train.mismatch_every
        measure = bool(every) and step % every == 0
        if not (self.recompute or measure):
            return batch, {}
        with torch.no_grad():
            log_pi, log_softmax = policy_log_probs(self.policy, batch, self.train.temperature)
        measured = {}
        if measure:
            entropy = -(log_softmax.exp() * log_softmax).sum(-1)
            mask = batch.response_mask
            measured = {**mismatch_stats(log_pi, batch.mu_log_probs, mask), **entropy_mean(entropy, mask)}
        if self.recompute:
            batch = replace(batch, anchor_log_probs=log_pi)
            if self.loss.verl is not None:
                weights, mask, _ = rollout_correction(self.loss.values, log_pi, batch.mu_log_probs, batch.response_mask)
                batch = replace(batch, rollout_is_weights=weights, response_mask=mask, loss_mask=batch.response_mask)
        return batch, measured

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        g = generator(self.run.seed, step, device=self.device)
        roll, rewards = self._rollout(step, g)
        batch = self._batch(roll, group_advantages(rewards, roll.response_mask, self.train.responses_per_prompt))
        t_roll = time.perf_counter()
        batch, measured = self._at_rollout_parameters(step, batch)
        t_recompute = time.perf_counter()
        stats, losses, norms, masked_tokens = [], [], [], MaskedTokenCounts()
        order = torch.randperm(len(rewards), generator=g, device=self.device)
        for i, index in enumerate(order.chunk(self.train.mini_batches)):
            try:
                mini = batch.select(index)
                loss, norm, st = update(
                    self.policy,
                    self.opt,
                    mini,
                    self.loss,
                    temperature=self.train.temperature,
                    grad_clip=self.train.grad_clip,
                    on_masked=lambda masked, mini=mini: masked_tokens.add(mini.responses, masked, mini.advantages),
                )
            except FloatingPointError as e:
                raise FloatingPointError(f"step {step}, mini-batch {i}: {e}") from None
            losses.append(loss)
            norms.append(norm)
            stats.append(st)
        t_end = time.perf_counter()
        return {
            "step": step,
            canonical.REWARD_MEAN: rewards.mean().item(),
            canonical.RESPONSE_LENGTH_MEAN: roll.response_mask.sum(-1).float().mean().item(),
            **measured,
            **{canonical.LOSS_STATS[k]: _reduce(k, [s[k] for s in stats]) for k in _loss_stats(stats[0])},
            canonical.ROLLOUT_TOPK_MASS: roll.mu_topk_logprobs.exp().sum(-1)[roll.response_mask].mean().item(),
            canonical.MASKED_TOKENS: masked_tokens.as_record(),
            "train/loss": sum(losses) / len(losses),
            "train/grad_norm": sum(norms) / len(norms),
            canonical.STEP_SECONDS: t_end - t0,
            "perf/rollout_s": t_roll - t0,
            "perf/recompute_s": t_recompute - t_roll,
            "perf/update_s": t_end - t_recompute,
        }

    # -- the loop ----------------------------------------------------------------------------
    def fit(self, deadline: float | None = None) -> dict:
        """Train to the setting's last step; returns {status, last_step}.

        A non-finite loss ends the run as "diverged": a result of the method, recorded with the
        steps before it, not a crash of the pipeline. Past ``deadline`` (a ``time.monotonic()`` value) the run
        checkpoints the step it finished and ends as "stopped", to be resumed from there.
        """
        start = self._load()
        if not self.dir.saved_steps():
            self._checkpoint(0, [])  # step 0 = the base model, evaluated like every other step (saved once)
        rows: list[dict] = []
        bar = tqdm(range(start + 1, self.train.steps + 1), desc=self.dir.path.name, disable=not self.progress)
        for step in bar:
            try:
                rows.append(self.step(step))
            except FloatingPointError as e:
                self._record(rows)
                return {"status": "diverged", "last_step": step - 1, "error": str(e)}
            bar.set_postfix(reward=f"{rows[-1][canonical.REWARD_MEAN]:.3f}")
            stop = deadline is not None and time.monotonic() >= deadline and step < self.train.steps
            if step % self.train.save_every == 0 or step == self.train.steps or stop:
                self._checkpoint(step, rows)
                rows = []
            if stop:
                return {"status": "stopped", "last_step": step}
        return {"status": "completed", "last_step": self.train.steps}


def _loss_stats(stats: dict) -> list[str]:
    """The loss's statistics that metrics.jsonl records (verl's modes also return metrics the verl backend's records
    leave out)."""
    return [k for k in stats if k in canonical.LOSS_STATS]


def _reduce(name: str, values: list[float]) -> float:
    """Over the mini-batches; a mean skips those where the statistic is undefined (NaN: nothing masked)."""
    if name in MIN_STATS:
        return min(values)
    if name in MAX_STATS:
        return max(values)
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else math.nan


def _ranges(steps: list[int]) -> str:
    """1,2,3,5,6 -> "1-3, 5-6" (a damaged file's steps, short enough for a message)."""
    parts: list[list[int]] = []
    for s in steps:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in parts) or "none"
