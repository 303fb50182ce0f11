"""Generation of ``n`` samples per problem into a resumable samples file, with vLLM (GPU) or HF ``generate`` (CPU).

A problem's samples depend only on the run seed, the problem id and the sample index (HF: each sample has a
generator of its own; vLLM: each problem a request seed): not on which other problems were generated with them, in
what order, or whether the run was interrupted and resumed (see :func:`run_generation` for byte-identical
resumption). Both backends prompt with the same token ids: the chat template rendered as text (as verl renders
it), then tokenized without adding special tokens.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from dppo_bench.config import canonical_sha256
from dppo_bench.config.prompts import PromptTemplate
from dppo_bench.errors import UserError
from dppo_bench.eval.samples import SamplesError, SamplesWriter
from dppo_bench.problem_sets.load import Problem

_FINGERPRINT_BYTES = 1 << 20


@dataclass(frozen=True)
class SamplingConfig:
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int


def problem_seed(seed: int, problem_id: str) -> int:
    """A 31-bit seed of one problem's samples (stable across runs, orders and resumes)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{problem_id}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def sample_seed(problem_seed: int, index: int) -> int:
    """The seed of one sample of a problem (the HF backend samples every row with a generator of its own)."""
    return int.from_bytes(hashlib.sha256(f"{problem_seed}:{index}".encode()).digest()[:8], "big") & (2**63 - 1)


# -- models ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedModel:
    path: str  # what the backend loads: an HF directory or a hub id
    given: str  # what the user named (a checkpoint, a run's checkpoint root, ...)
    kind: str  # "hf" | "verl" | "hub"
    fingerprint: str | None  # of the config and weight files (see model_fingerprint); None for hub ids


def _has_weights(d: Path) -> bool:
    return (d / "config.json").is_file() and any(
        p.suffix in (".safetensors", ".bin") or p.name.endswith(".safetensors.index.json") for p in d.iterdir()
    )


def model_fingerprint(d: Path) -> str:
    """sha256 over config.json and, per weight file, its name, size and first and last MiB: cheap (no full read
    of tens of GB) and changes whenever the weights are rewritten."""
    h = hashlib.sha256((d / "config.json").read_bytes())
    for p in sorted(d.iterdir()):
        if p.suffix in (".safetensors", ".bin"):
            size = p.stat().st_size
            h.update(f"{p.name}:{size}".encode())
            with open(p, "rb") as f:
                h.update(f.read(_FINGERPRINT_BYTES))
                f.seek(max(0, size - _FINGERPRINT_BYTES))
                h.update(f.read())
    return h.hexdigest()


def _verl_actor_dir(d: Path) -> Path | None:
    """The ``actor`` directory of a verl checkpoint named by ``d``: a checkpoint root (with
    latest_checkpointed_iteration.txt), a ``global_step_N`` directory, or the actor directory itself (or the model
    part of one, as :class:`dppo_bench.verl_plugin.keep_weights.KeepWeights` keeps it)."""
    tracker = d / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        d = d / f"global_step_{int(tracker.read_text().strip())}"
    if (d / "actor").is_dir():
        d = d / "actor"
    fsdp = (d / "huggingface").is_dir() and (any(d.glob("model_world_size_*")) or (d / "dist_ckpt").is_dir())
    megatron = (d / "model" / "huggingface").is_dir() or (d / "model" / "dist_ckpt").is_dir()  # verl's layout v2
    return d if fsdp or megatron else None


def resolve_model(given: str, merge: Callable[[Path, Path, str], None] | None = None) -> ResolvedModel:
    """An HF checkpoint directory, a verl checkpoint (its HF weights when it has them, else merged to HF format once,
    next to it, by verl's model merger), or a hub model id."""
    d = Path(given)
    if not d.exists():
        if d.is_absolute() or given.startswith("."):
            raise FileNotFoundError(f"{given}: no such model directory")
        return ResolvedModel(given, given, "hub", None)
    if d.is_dir() and _has_weights(d):
        return ResolvedModel(str(d), given, "hf", model_fingerprint(d))
    actor = _verl_actor_dir(d)
    if actor is None:
        raise FileNotFoundError(f"{given}: neither an HF model directory (config.json + weights) nor a verl checkpoint")
    # HF weights verl wrote itself: FSDP with hf_model in checkpoint.save_contents, Megatron's model with mbridge
    for hf in (actor / "huggingface", actor / "model" / "huggingface"):
        if (hf / "adapter").is_dir():  # Megatron LoRA: the base model's weights, the trained adapter beside them
            raise UserError(f"{hf / 'adapter'}: a LoRA adapter; generating from a LoRA checkpoint is not supported")
        if hf.is_dir() and _has_weights(hf):
            return ResolvedModel(str(hf), given, "verl", model_fingerprint(hf))
    merged = actor / "huggingface_merged"
    if not (merged.is_dir() and _has_weights(merged)):
        backend = "megatron" if (actor / "dist_ckpt").is_dir() or (actor / "model" / "dist_ckpt").is_dir() else "fsdp"
        partial = merged.with_name(f"{merged.name}.partial")  # a merge cut short leaves no half model behind
        shutil.rmtree(partial, ignore_errors=True)
        (merge or merge_verl_checkpoint)(actor, partial, backend)
        shutil.rmtree(merged, ignore_errors=True)
        os.replace(partial, merged)
    return ResolvedModel(str(merged), given, "verl", model_fingerprint(merged))


def merge_verl_checkpoint(actor: Path, target: Path, backend: str) -> None:
    """verl's own merger (``python -m verl.model_merger merge``) into ``target``."""
    import subprocess

    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", backend]
    subprocess.run([*cmd, "--local_dir", str(actor), "--target_dir", str(target)], check=True)


# -- backends --------------------------------------------------------------------------------------------------
class Backend(Protocol):
    tokenizer: object

    def describe(self) -> dict: ...

    def generate(self, prompt_ids: Sequence[list[int]], seeds: Sequence[int]) -> list[list[str]]:
        """n completions (text) per prompt, in sample order."""
        ...


class HFBackend:
    """transformers ``generate`` for CPU and tiny models. Every sample (a row of a generate call) draws its tokens
    from a generator of its own, seeded by (problem seed, sample index): samples do not depend on the other rows of
    their call, and the global RNG is never touched."""

    def __init__(self, model_path: str, sampling: SamplingConfig, *, device: str = "cpu", batch_size: int = 0):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.sampling, self.device = sampling, device
        self.batch_size = batch_size or sampling.n
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path).to(device).eval()
        self._torch = torch

    def describe(self) -> dict:
        return {"backend": "hf", "device": self.device, "batch_size": self.batch_size}

    def _generation_config(self):
        """Greedy over the scores :class:`RowSampler` leaves (only its drawn token is finite); explicit, so the
        checkpoint's own generation_config cannot change the sampling."""
        from transformers import GenerationConfig

        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        return GenerationConfig(
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            max_new_tokens=self.sampling.max_tokens,
            eos_token_id=eos,
            pad_token_id=pad[0] if isinstance(pad, list) else pad,
        )

    def generate(self, prompt_ids: Sequence[list[int]], seeds: Sequence[int]) -> list[list[str]]:
        """n samples per problem; rows (problem, sample) go ``batch_size`` at a time into left-padded calls."""
        n = self.sampling.n
        rows = [(ids, sample_seed(seed, j)) for ids, seed in zip(prompt_ids, seeds, strict=True) for j in range(n)]
        texts: list[str] = []
        for start in range(0, len(rows), self.batch_size):
            texts += self._sample_rows(rows[start : start + self.batch_size])
        return [texts[i * n : (i + 1) * n] for i in range(len(prompt_ids))]

    def _sample_rows(self, rows: Sequence[tuple[list[int], int]]) -> list[str]:
        """One completion per (prompt ids, sample seed), in one generate call."""
        from transformers import LogitsProcessorList

        torch, s = self._torch, self.sampling
        config = self._generation_config()
        width = max(len(ids) for ids, _ in rows)
        inputs = torch.tensor([[config.pad_token_id] * (width - len(ids)) + list(ids) for ids, _ in rows])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids, _ in rows])
        sampler = [RowSampler([seed for _, seed in rows], s.temperature, s.top_p)] if s.temperature > 0 else []
        with torch.no_grad():
            tokens = self.model.generate(
                inputs.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=config,
                logits_processor=LogitsProcessorList(sampler),
            )
        return self.tokenizer.batch_decode(tokens[:, width:], skip_special_tokens=True)


class RowSampler:
    """A logits processor that samples each row's next token (temperature, then nucleus top_p) with the row's own
    generator, and leaves only that token finite for greedy decoding to pick. A row draws one uniform per token,
    so its t-th token depends on its seed and its logits alone, whatever rows share its call."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float):
        import torch

        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        self.temperature, self.top_p = temperature, top_p

    def __call__(self, input_ids, scores):
        import torch

        probs = torch.softmax(scores.double() / self.temperature, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the more likely tokens
        sorted_probs = sorted_probs.masked_fill(before >= self.top_p, 0.0)  # outside the nucleus (never the first)
        cdf = sorted_probs.cumsum(-1)
        u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in self.generators])
        rank = torch.searchsorted(cdf, (u.to(cdf.device) * cdf[:, -1])[:, None]).clamp(max=cdf.shape[-1] - 1)
        token = order.gather(-1, rank)
        return torch.full_like(scores, -math.inf).scatter_(-1, token, 0.0)


class VLLMBackend:
    """One vLLM ``LLM``; per problem ``SamplingParams(n, temperature, top_p, max_tokens, seed)``."""

    def __init__(self, model_path: str, sampling: SamplingConfig, **llm_kwargs):
        from vllm import LLM

        self.sampling, self.llm_kwargs = sampling, llm_kwargs
        self.llm = LLM(model=model_path, seed=sampling.seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def describe(self) -> dict:
        import vllm

        return {"backend": "vllm", "vllm": vllm.__version__, **self.llm_kwargs}

    def generate(self, prompt_ids: Sequence[list[int]], seeds: Sequence[int]) -> list[list[str]]:
        from vllm import SamplingParams

        s = self.sampling
        params = [
            SamplingParams(n=s.n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=seed)
            for seed in seeds
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params)
        return [[o.text for o in sorted(out.outputs, key=lambda o: o.index)] for out in outputs]


# -- the run ---------------------------------------------------------------------------------------------------
def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The text a model is prompted with: its chat template when it has one (as verl renders it), else the
    message contents joined by blank lines (base models without a template)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in messages)


def prompt_ids(tokenizer, template: PromptTemplate, problems: Sequence[Problem]) -> tuple[list[list[int]], str]:
    """Token ids of each problem's prompt, and the sha256 of the rendered prompt texts."""
    texts = [render_chat(tokenizer, template.messages(p.problem)) for p in problems]
    ids = [
        list(tokenizer(t, add_special_tokens=not getattr(tokenizer, "chat_template", None))["input_ids"]) for t in texts
    ]
    return ids, canonical_sha256({p.id: t for p, t in zip(problems, texts, strict=True)})


def samples_header(
    benchmark: str, data_sha256: str, model: ResolvedModel, backend: dict, sampling: SamplingConfig, prompt: dict
) -> dict:
    model_info = {**asdict(model), **backend}
    sampling_info = asdict(sampling)
    return {
        "benchmark": benchmark,
        "data_sha256": data_sha256,
        "model": model_info,
        "model_sha256": canonical_sha256(model_info),
        "sampling": sampling_info,
        "sampling_sha256": canonical_sha256(sampling_info),
        "prompt": prompt,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def run_generation(
    backend: Backend,
    model: ResolvedModel,
    problems: Sequence[Problem],
    template: PromptTemplate,
    sampling: SamplingConfig,
    out: Path,
    *,
    benchmark: str,
    data_sha256: str,
    chunk: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Generate the missing problems' samples into ``out`` (resuming it), ``chunk`` problems per backend call.

    The chunks are fixed slices of ``problems``; a chunk some of whose problems are already written is generated
    whole again and only the missing ones are appended, so a resumed file is byte for byte the uninterrupted one.

    Returns what happened: problems already complete, problems generated, bytes of an interrupted write dropped.
    """
    ids, prompts_sha = prompt_ids(backend.tokenizer, template, problems)
    prompt_info = {"template": template.id, "template_sha256": template.sha256(), "prompts_sha256": prompts_sha}
    header = samples_header(benchmark, data_sha256, model, backend.describe(), sampling, prompt_info)
    writer = SamplesWriter(out, header)
    todo = []
    for i, p in enumerate(problems):
        have = sum((p.id, s) in writer.keys for s in range(sampling.n))
        if 0 < have < sampling.n:  # cannot happen with whole-problem appends: the file was edited
            raise SamplesError(f"{out}: problem {p.id!r} has {have} of {sampling.n} samples; not resumable")
        if have == 0:
            todo.append(i)
    done = len(problems) - len(todo)
    pending = set(todo)
    for start in range(0, len(problems), chunk):  # fixed chunks: a resumed run makes the very calls of a whole one
        part = range(start, min(start + chunk, len(problems)))
        if pending.isdisjoint(part):
            continue
        completions = backend.generate(
            [ids[i] for i in part], [problem_seed(sampling.seed, problems[i].id) for i in part]
        )
        for i, texts in zip(part, completions, strict=True):
            if len(texts) != sampling.n:
                raise RuntimeError(
                    f"backend returned {len(texts)} samples for {problems[i].id!r}, expected {sampling.n}"
                )
            if i in pending:
                writer.append(problems[i].id, texts)
                done += 1
        if progress:
            progress(done, len(problems))
    return {
        "path": str(out),
        "already_complete": len(problems) - len(todo),
        "generated": len(todo),
        "dropped_bytes": writer.dropped_bytes,
    }
