"""Offline evaluation of a verl run: a benchmark it did not validate online (or validated as an earlier version of
it) is generated from the weights the run kept, step 0 from its base model; verl's checkpoint callback keeps those
weights past verl's deletion of the checkpoint."""

import json
import os
import shutil

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.protocol import spec_sha256
from dppo_bench.eval.run_eval import evaluate_run
from dppo_bench.eval.samples import read_samples
from dppo_bench.local.model import build_model, save_model
from dppo_bench.local.tokenizer import build_tokenizer
from dppo_bench.rundir import RunDir
from dppo_bench.verl_plugin.contract import KEEP_WEIGHTS
from dppo_bench.verl_plugin.keep_weights import KeepWeights

PROBLEMS = [{"id": "t1", "problem": "2+3=", "answer": "5"}, {"id": "t2", "problem": "4+4=", "answer": "8"}]
ARCH = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
TINY = load_benchmark("tiny_arith")
ONLINE_SAMPLING = {"n": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 32}


def tiny_model(path, seed):
    tok = build_tokenizer()
    save_model(build_model(ARCH, tok, seed=seed), tok, path)
    return path


@pytest.fixture
def verl_run(tmp_path):
    """A finished verl run of 8 steps: its base model, the weights kept at step 4 (not at 8), the online validation
    dumps of tiny_arith at steps 0 and 4, and the held-out problems."""
    run = RunDir(tmp_path / "run").create()
    base = tiny_model(tmp_path / "base", seed=0)
    tiny_model(run.weights_dir(4), seed=1)
    run.write_run(
        {
            "setting": "tiny_verl",
            "method": "dppo_binary_tv",
            "seed": 0,
            "backend": "verl",
            "last_step": 8,
            "model": {"path": str(base), "revision": None, "local": True},
            "setting_config": {"train": {"max_prompt_length": 16, "max_response_length": 32}},
            "inputs": {"val": [{"id": "tiny_arith", "spec_sha256": spec_sha256(TINY), "sampling": ONLINE_SAMPLING}]},
        }
    )
    (run.path / "validation").mkdir()
    for step in (0, 4):
        rows = [
            {
                "input": p["problem"],
                "output": f"\\boxed{{{p['answer']}}}",
                "gts": p["answer"],
                "step": step,
                "problem_id": p["id"],
            }
            for p in PROBLEMS
            for _ in range(4)
        ]
        (run.path / "validation" / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = tmp_path / "heldout.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return run, problems


def test_a_benchmark_the_run_never_validated_is_generated_from_the_kept_weights(verl_run):
    run, problems = verl_run
    summary = evaluate_run(run.path, "tiny_arith_greedy", [0, 4, 8], problems)
    assert summary["source"] == "saved weights" and summary["not_saved"] == [8]  # verl kept nothing of step 8
    assert set(summary["steps"]) == {"0", "4"}
    samples = {s: run.eval_step_dir("tiny_arith_greedy", s) / "samples.jsonl.gz" for s in (0, 4)}
    models = {s: read_samples(path).header["model"] for s, path in samples.items()}
    assert models[0]["path"] == str(run.path.parent / "base")  # step 0: the base model run.json names
    assert models[4]["path"] == str(run.weights_dir(4))
    scores = json.loads((run.eval_step_dir("tiny_arith_greedy", 4) / "scores.json").read_text())
    assert scores["sampling"] == {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 32, "seed": 0}


def test_the_validated_benchmark_is_scored_from_its_dumps(verl_run):
    run, problems = verl_run
    summary = evaluate_run(run.path, "tiny_arith", [0, 4], problems)
    assert summary["source"] == "online validation" and summary["steps"] == {"0": 1.0, "4": 1.0}


def test_an_online_benchmark_edited_after_the_run_is_scored_from_the_weights_replacing_the_dumps_scores(
    verl_run, monkeypatch
):
    run, problems = verl_run
    evaluate_run(run.path, "tiny_arith", [0, 4], problems)  # from the dumps, as validated
    edited = TINY.model_copy(update={"sampling": TINY.sampling.model_copy(update={"temperature": 0.9})})
    monkeypatch.setattr("dppo_bench.eval.run_eval.load_benchmark", lambda b, *a: edited if b == "tiny_arith" else TINY)
    summary = evaluate_run(run.path, "tiny_arith", [0, 4], problems)
    assert summary["source"] == "saved weights"  # the dumps were sampled at 0.6; the dumps themselves stay
    header = read_samples(run.eval_step_dir("tiny_arith", 4) / "samples.jsonl.gz").header
    assert header["sampling"]["temperature"] == 0.9 and header["model"]["path"] == str(run.weights_dir(4))
    assert (run.path / "validation" / "4.jsonl").is_file()


def test_verl_runs_the_callback_that_keeps_each_checkpoints_model(tmp_path):
    """Through verl's own callback factory: the model part of the actor checkpoint is linked, not copied, and
    outlives verl's deletion of the checkpoint; the optimizer and extra state are not kept."""
    run = RunDir(tmp_path / "run")
    actor = run.checkpoints / "global_step_4" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    files = {
        "model_world_size_1_rank_0.pt": b"model",
        "optim_world_size_1_rank_0.pt": b"optimizer",
        "extra_state_world_size_1_rank_0.pt": b"rng",
        "fsdp_config.json": b"{}",
        "huggingface/config.json": b"{}",
    }
    for name, data in files.items():
        (actor / name).write_bytes(data)
    config = OmegaConf.create(
        {"trainer": {"checkpoint_callback_class": KEEP_WEIGHTS, "default_local_dir": str(run.checkpoints)}}
    )
    callback = build_checkpoint_callback(config)
    assert isinstance(callback, KeepWeights)
    callback.on_save(trainer=None, global_step=4, checkpoint_dir=str(actor.parent))
    kept = run.weights_dir(4)
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "fsdp_config.json", "huggingface/config.json", "model_world_size_1_rank_0.pt",
    ]  # fmt: skip
    assert os.path.samefile(kept / "model_world_size_1_rank_0.pt", actor / "model_world_size_1_rank_0.pt")
    shutil.rmtree(actor.parent)  # verl's rotation of old checkpoints
    assert (kept / "model_world_size_1_rank_0.pt").read_bytes() == b"model"
    assert not any(p.name.endswith(".partial") for p in run.weights.iterdir())
