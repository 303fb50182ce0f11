"""Pretraining of the tiny base model: supervised worked solutions, some of them wrong.

The result is partly competent on held-out problems, as the paper's sanity-test model is on
its training set (about 57% reward at the start), so RL has room to rise and something to lose.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from dppo_bench.config import LocalSpec
from dppo_bench.local.batching import pad_right, prompt_ids
from dppo_bench.local.model import build_model, save_model
from dppo_bench.local.task import Expression, Lexicon, TaskConfig, generate_problems, make_splits, pretraining_text
from dppo_bench.local.tokenizer import build_tokenizer


def task_config(spec: LocalSpec) -> TaskConfig:
    t = spec.task
    return TaskConfig(max_operand=t.max_operand, min_operands=t.min_operands, max_operands=t.max_operands)


def lexicon(spec: LocalSpec) -> Lexicon | None:
    """The task's long-tailed vocabulary of connective words, if it has one."""
    lex = spec.task.lexicon
    return Lexicon(lex.words, lex.zipf) if lex is not None else None


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretraining_batch(
    tokenizer, rng: random.Random, problems: list[Expression], corrupt_frac: float, lex: Lexicon | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask, loss mask (solution and eos tokens only)."""
    seqs, starts = [], []
    for p in problems:
        solution = pretraining_text(p, rng, corrupt_frac, lex)[len(p.text) :]
        prompt = prompt_ids(tokenizer, p.text)
        seqs.append(prompt + tokenizer(solution, add_special_tokens=False).input_ids + [tokenizer.eos_token_id])
        starts.append(len(prompt))
    ids, mask = pad_right(seqs, tokenizer.pad_token_id)
    loss_mask = mask.clone()
    for i, s in enumerate(starts):
        loss_mask[i, :s] = False
    return ids, mask, loss_mask


def pretrain(
    spec: LocalSpec, out: Path, *, threads: int = 1, progress: bool = True, device: torch.device | str = "cpu"
) -> dict:
    """Train the base model on ``device`` and save it as an HF dir at ``out``; returns the report."""
    torch.set_num_threads(threads)
    cfg, p, lex = task_config(spec), spec.pretrain, lexicon(spec)
    tokenizer = build_tokenizer(lex.tokens if lex else ())
    model = build_model(spec.model.model_dump(), tokenizer, seed=p.seed).to(device)
    _, heldout = make_splits(spec.task.seed, spec.task.n_train, spec.task.n_heldout, cfg)
    excluded = {h.text for h in heldout}
    rng = random.Random(p.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.0)
    pool_seed = rng.randrange(2**31)
    start, losses = time.perf_counter(), []
    model.train()
    for step in tqdm(range(p.steps), desc="pretrain", disable=not progress):
        draws = generate_problems(pool_seed + step, p.batch_size * 2, cfg, "pre")
        batch = [q for q in draws if q.text not in excluded][: p.batch_size]
        ids, mask, loss_mask = (t.to(device) for t in pretraining_batch(tokenizer, rng, batch, p.corrupt_frac, lex))
        logits = model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, p.steps, p.warmup_steps, p.lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval().cpu()
    report = {
        "steps": p.steps,
        "seconds": round(time.perf_counter() - start, 1),
        "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "parameters": sum(t.numel() for t in model.parameters()),
    }
    save_model(model, tokenizer, out, extra={"pretrain.json": (json.dumps(report, indent=2) + "\n").encode()})
    return report
