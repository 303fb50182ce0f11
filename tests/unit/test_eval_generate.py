"""Generation: HF backend on a tiny random model (seeded, global RNG untouched, resumable), vLLM through fakes of
its objects, and model resolution (HF directory, verl checkpoint, hub id)."""

import json
import shutil
import string
import sys
import types

import pytest
import torch

from dppo_bench.cli import main
from dppo_bench.config.prompts import load_prompt
from dppo_bench.eval.generate import (
    HFBackend,
    SamplingConfig,
    VLLMBackend,
    problem_seed,
    prompt_ids,
    resolve_model,
    run_generation,
)
from dppo_bench.eval.samples import SamplesError, SamplesWriter, read_samples
from dppo_bench.problem_sets.load import Problem

PROBLEMS = [Problem("p1", "What is $1+1$?", "2"), Problem("p2", "What is $2+3$?", "5"), Problem("p3", "Hi?", "7")]
SAMPLING = SamplingConfig(n=3, temperature=1.0, top_p=0.95, max_tokens=6, seed=0)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 1-layer Llama with a character-level tokenizer and a chat template, saved as an HF directory."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    vocab |= {c: i + 4 for i, c in enumerate(sorted(set(string.printable)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.linspace(-0.5, 0.5, p.numel()).reshape(p.shape).sin())  # deterministic weights
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def hf(tiny_model):
    return HFBackend(str(tiny_model), SAMPLING)


def run(backend, tiny_model, out, sampling=SAMPLING, problems=PROBLEMS, chunk=1):
    model = resolve_model(str(tiny_model))
    return run_generation(
        backend, model, problems, load_prompt("dapo_answer"), sampling, out,
        benchmark="aime24", data_sha256="d" * 64, chunk=chunk,
    )  # fmt: skip


def test_hf_sampling_is_seeded_per_problem_and_leaves_the_global_rng_alone(hf):
    ids, _ = prompt_ids(hf.tokenizer, load_prompt("dapo_answer"), PROBLEMS[:1])
    state = torch.get_rng_state()
    first = hf.generate(ids, [11])
    assert torch.equal(state, torch.get_rng_state())
    assert first == hf.generate(ids, [11]) and first != hf.generate(ids, [12])
    assert len(first[0]) == 3 and len(set(first[0])) > 1  # n distinct samples of one prompt


def test_prompt_ids_use_the_chat_template_without_extra_special_tokens(hf):
    ids, digest = prompt_ids(hf.tokenizer, load_prompt("dapo_answer"), PROBLEMS[:1])
    text = hf.tokenizer.decode(ids[0])
    assert text.startswith("<user>Solve the following math problem") and text.endswith("<assistant>")
    assert ids[0][0] != hf.tokenizer.bos_token_id
    assert digest == prompt_ids(hf.tokenizer, load_prompt("dapo_answer"), PROBLEMS[:1])[1]


class Interrupt(Exception):
    pass


class DiesAfter:
    """The HF backend, killed after ``calls`` generate calls (as a pre-empted job would be)."""

    def __init__(self, backend, calls):
        self.backend, self.calls, self.tokenizer = backend, calls, backend.tokenizer

    def describe(self):
        return self.backend.describe()

    def generate(self, ids, seeds):
        if self.calls == 0:
            raise Interrupt
        self.calls -= 1
        return self.backend.generate(ids, seeds)


def test_an_interrupted_generation_resumes_to_the_same_samples(hf, tiny_model, tmp_path):
    whole = tmp_path / "whole.jsonl.gz"
    assert run(hf, tiny_model, whole)["generated"] == 3
    part = tmp_path / "part.jsonl.gz"
    with pytest.raises(Interrupt):
        run(DiesAfter(hf, 1), tiny_model, part)
    assert {r["problem_id"] for r in read_samples(part).rows} == {"p1"}
    summary = run(hf, tiny_model, part)
    assert (summary["already_complete"], summary["generated"]) == (1, 2)
    assert run(hf, tiny_model, part)["generated"] == 0  # nothing left: no duplicates
    key = lambda r: (r["problem_id"], r["sample"])  # noqa: E731
    assert sorted(read_samples(part).rows, key=key) == sorted(read_samples(whole).rows, key=key)
    header = read_samples(part).header
    assert header["sampling"] == {"n": 3, "temperature": 1.0, "top_p": 0.95, "max_tokens": 6, "seed": 0}
    assert header["model"]["kind"] == "hf" and len(header["model"]["fingerprint"]) == 64
    assert header["prompt"]["template"] == "dapo_answer" and len(header["prompt"]["prompts_sha256"]) == 64


def test_a_resume_inside_a_chunk_writes_the_bytes_of_an_uninterrupted_run(hf, tiny_model, tmp_path, monkeypatch):
    """Killed between two appends of one chunk: the chunk is made again whole, its missing problems appended."""
    whole = tmp_path / "whole.jsonl.gz"
    run(hf, tiny_model, whole, chunk=2)
    part = tmp_path / "part.jsonl.gz"
    append = SamplesWriter.append

    def dies_after_p1(writer, problem_id, texts):
        if problem_id != "p1":
            raise Interrupt
        append(writer, problem_id, texts)

    with monkeypatch.context() as m:
        m.setattr(SamplesWriter, "append", dies_after_p1)
        with pytest.raises(Interrupt):
            run(hf, tiny_model, part, chunk=2)
    assert run(hf, tiny_model, part, chunk=2)["generated"] == 2
    assert read_samples(part).rows == read_samples(whole).rows


def test_samples_depend_on_the_problem_and_the_sample_index_only(tiny_model):
    """Not on the batch size, the other problems of a call, or their order (the seeds of a resumed evaluation)."""
    ids, _ = prompt_ids(HFBackend(str(tiny_model), SAMPLING).tokenizer, load_prompt("as_is"), PROBLEMS)
    seeds = [problem_seed(0, p.id) for p in PROBLEMS]
    reference = HFBackend(str(tiny_model), SAMPLING, batch_size=1).generate(ids, seeds)
    assert len({t for texts in reference for t in texts}) > 3  # really sampled
    for batch_size in (2, 3, 9):
        backend = HFBackend(str(tiny_model), SAMPLING, batch_size=batch_size)
        assert backend.generate(ids, seeds) == reference
        assert backend.generate(ids[::-1], seeds[::-1]) == reference[::-1]
        assert backend.generate(ids[1:], seeds[1:]) == reference[1:]


def test_nucleus_sampling_keeps_the_smallest_set_reaching_top_p():
    from dppo_bench.eval.generate import RowSampler

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    drawn = set()
    for seed in range(200):
        scores = RowSampler([seed], temperature=1.0, top_p=0.8)(None, logits.clone())
        assert torch.isfinite(scores).sum() == 1
        drawn.add(int(scores.argmax()))
    assert drawn == {0, 1}  # 0.5 + 0.3 reaches 0.8: tokens 2 and 3 are outside the nucleus


def test_resuming_with_other_sampling_is_refused(hf, tiny_model, tmp_path):
    out = tmp_path / "s.jsonl.gz"
    run(hf, tiny_model, out, problems=PROBLEMS[:1])
    hotter = SamplingConfig(n=3, temperature=0.7, top_p=0.95, max_tokens=6, seed=0)
    with pytest.raises(SamplesError, match="header field 'sampling'"):
        run(HFBackend(str(tiny_model), hotter), tiny_model, out, sampling=hotter, problems=PROBLEMS[:1])


@pytest.fixture
def fake_vllm(monkeypatch, hf):
    """vLLM's LLM / SamplingParams / RequestOutput shapes; outputs come back out of sample order."""
    calls = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, model, seed, **kw):
            calls["init"] = {"model": model, "seed": seed, **kw}

        def get_tokenizer(self):
            return hf.tokenizer

        def generate(self, prompts, params):
            calls["generate"] = (prompts, [p.kw for p in params])
            out = []
            for p in params:
                samples = [types.SimpleNamespace(index=i, text=f"{p.kw['seed']}-{i}") for i in range(p.kw["n"])]
                out.append(types.SimpleNamespace(outputs=samples[::-1]))
            return out

    module = types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams, __version__="0.0-fake")
    monkeypatch.setitem(sys.modules, "vllm", module)
    return calls


def test_vllm_backend(fake_vllm, hf, tiny_model, tmp_path):
    backend = VLLMBackend(str(tiny_model), SAMPLING, tensor_parallel_size=2)
    out = tmp_path / "v.jsonl.gz"
    run(backend, tiny_model, out, chunk=64)
    assert fake_vllm["init"] == {"model": str(tiny_model), "seed": 0, "tensor_parallel_size": 2}
    prompts, params = fake_vllm["generate"]
    assert prompts == [
        {"prompt_token_ids": ids} for ids in prompt_ids(hf.tokenizer, load_prompt("dapo_answer"), PROBLEMS)[0]
    ]
    seeds = [problem_seed(0, p.id) for p in PROBLEMS]
    assert params == [{"n": 3, "temperature": 1.0, "top_p": 0.95, "max_tokens": 6, "seed": s} for s in seeds]
    rows = read_samples(out).rows
    assert [(r["problem_id"], r["sample"], r["completion"]) for r in rows[:3]] == [
        ("p1", i, f"{seeds[0]}-{i}") for i in range(3)
    ]
    assert read_samples(out).header["model"]["backend"] == "vllm"


def test_problem_seeds_are_stable_and_distinct():
    assert problem_seed(0, "aime2024-I-01") == problem_seed(0, "aime2024-I-01")
    assert len({problem_seed(s, p) for s in range(3) for p in ("a", "b", "c")}) == 9
    assert 0 <= problem_seed(123, "x") < 2**31


def test_resolve_model(tiny_model, tmp_path):
    assert resolve_model(str(tiny_model)).kind == "hf"
    assert resolve_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B").kind == "hub"
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        resolve_model("./missing")
    with pytest.raises(FileNotFoundError, match="neither an HF model directory"):
        resolve_model(str(tmp_path))

    root = tmp_path / "checkpoints"
    actor = root / "global_step_20" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (root / "latest_checkpointed_iteration.txt").write_text("20")
    merged = []

    def merge(src, dst, backend):
        merged.append((src, dst, backend))
        shutil.copytree(tiny_model, dst)

    got = resolve_model(str(root), merge=merge)
    assert merged == [(actor, actor / "huggingface_merged.partial", "fsdp")]  # renamed into place when whole
    assert not (actor / "huggingface_merged.partial").exists()
    assert (got.kind, got.path) == ("verl", str(actor / "huggingface_merged"))
    assert got.fingerprint == resolve_model(str(tiny_model)).fingerprint
    assert resolve_model(str(root), merge=merge) == got and len(merged) == 1  # merged once

    shutil.copytree(tiny_model, actor / "huggingface", dirs_exist_ok=True)  # saved with hf_model
    assert resolve_model(str(actor)).path == str(actor / "huggingface")

    megatron = tmp_path / "megatron" / "global_step_5" / "actor"  # verl's Megatron layout v2: the model is HF
    shutil.copytree(tiny_model, megatron / "model" / "huggingface")
    (megatron / "optimizer").mkdir()
    assert resolve_model(str(megatron.parent)).path == str(megatron / "model" / "huggingface")
    (megatron / "model" / "huggingface" / "adapter").mkdir()  # LoRA: those are the base model's weights
    with pytest.raises(ValueError, match="adapter: a LoRA adapter; generating from a LoRA checkpoint is not supported"):
        resolve_model(str(megatron))


def test_a_merge_cut_short_leaves_no_model_behind(tiny_model, tmp_path):
    actor = tmp_path / "global_step_4" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")

    def killed(src, dst, backend):
        shutil.copytree(tiny_model, dst)
        raise KeyboardInterrupt  # the job was cancelled while the merger wrote

    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(actor), merge=killed)
    assert not (actor / "huggingface_merged").exists()
    merged = resolve_model(str(actor), merge=lambda src, dst, backend: shutil.copytree(tiny_model, dst))
    assert merged.path == str(actor / "huggingface_merged")


def test_generate_then_score_on_cpu(tiny_model, tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer}) + "\n" for p in PROBLEMS)
    )
    samples = tmp_path / "s.jsonl.gz"
    common = ["--benchmark", "aime24", "--data", str(data), "--n", "2"]
    gen = ["eval", "generate", *common, "--model", str(tiny_model), "--backend", "hf", "--max-tokens", "4"]
    assert main([*gen, "--out", str(samples)]) == 0
    assert "3 problems generated, 0 already complete" in capsys.readouterr().out
    assert main([*gen, "--out", str(samples)]) == 0
    assert "0 problems generated, 3 already complete" in capsys.readouterr().out
    scores = tmp_path / "scores.json"
    assert main(["score", *common, "--samples", str(samples), "--out", str(scores), "--workers", "1"]) == 0
    result = json.loads(scores.read_text())
    assert result["sampling"]["max_tokens"] == 4 and result["n"] == 2 and len(result["problems"]) == 3
    assert result["avg@2"] == sum(p["c"] for p in result["problems"]) / 6


def test_hf_backend_batches_whole_problems_with_left_padding(tiny_model):
    """Greedy decoding is the same whether problems share a (left-padded) generate call or not."""
    greedy = SamplingConfig(n=1, temperature=0.0, top_p=1.0, max_tokens=6, seed=0)
    template = load_prompt("as_is")
    alone = HFBackend(str(tiny_model), greedy, batch_size=1)
    ids, _ = prompt_ids(alone.tokenizer, template, PROBLEMS)
    assert len({len(x) for x in ids}) > 1  # prompts of different lengths: padding matters
    together = HFBackend(str(tiny_model), greedy, batch_size=3)  # all three problems in one call
    seeds = [problem_seed(0, p.id) for p in PROBLEMS]
    assert together.generate(ids, seeds) == alone.generate(ids, seeds)
    sampled = HFBackend(str(tiny_model), SAMPLING, batch_size=9)
    first, again = sampled.generate(ids, seeds), sampled.generate(ids, seeds)
    assert first == again and [len(t) for t in first] == [3, 3, 3]
