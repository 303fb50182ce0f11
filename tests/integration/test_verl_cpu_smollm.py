"""The cluster path with a real LM: verl 0.9.1's own trainer and vLLM's CPU build on SmolLM2-135M-Instruct
(recipes/settings/verl_cpu_smollm.yaml), driven by the pipeline as on a cluster (data prepare, train through the verl
launcher, evaluate verl's validation dumps). The experiment trains DPPO-Binary-TV and PG-IS (`make verl-cpu`); the
test plans both and trains DPPO-Binary-TV alone: each verl run spends about 3 of its minutes starting Ray, its
workers and vLLM, and one run is what the suite's time allows.

What the miniature's character-level model cannot show, checked on the real model's real outputs: its chat template
(with a system prompt) fits the prompt budget, so verl drops no problem; its responses stop at <|im_end|> or are cut
off by the token limit, and verl counts those; the rewards are math-verify's grades of the decoded text, the same
sample for sample offline; no special token reaches an extracted answer.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from real_lm import REAL_LM, real_lm  # noqa: F401 (a fixture)
from snakemake_fixtures import job_counts, snakemake
from verl_memory import one_more_verl_run

from dppo_bench.config import find_setting

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM's CPU build is not installed"),
]

SETTING, EXPERIMENT, BENCHMARK = "verl_cpu_smollm", "verl_cpu_smollm", "arith_words"
METHODS = ("dppo_binary_tv", "pg_is")  # the experiment's
METHOD = "dppo_binary_tv"  # the one the test trains
MODEL = f"results/models/{REAL_LM}"
SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def run_dir(workdir: Path, method: str) -> Path:
    return workdir / "results" / "runs" / SETTING / method / "seed0"


def rows(workdir: Path, method: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir(workdir, method) / "metrics.jsonl").read_text().splitlines()]


def dump(workdir: Path, method: str, step: int) -> list[dict]:
    path = run_dir(workdir, method) / "validation" / f"{step}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def verl_log(workdir: Path, method: str) -> list[tuple[int, dict]]:
    """verl's own FileLogger rows (every key verl logged, the canonical ones and the rest)."""
    (log,) = sorted((run_dir(workdir, method) / "verl_logs").glob("attempt-*.jsonl"))
    return [(row["step"], row["data"]) for row in map(json.loads, log.read_text().splitlines())]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, real_lm):  # noqa: F811
    workdir = tmp_path_factory.mktemp("verl_cpu_smollm")
    plan = snakemake(workdir, "-n", EXPERIMENT)
    assert plan.returncode == 0, plan.stderr[-3000:]
    # the pipeline builds the model first (the packaged_model rule) ...
    assert job_counts(plan.stdout) == {
        "packaged_model": 1, "prepare_data": 2, "train": 2, "evaluate": 2, "aggregate_figure": 1,
        "aggregate_table": 1, EXPERIMENT: 1,
    }  # fmt: skip
    # ... which the session has built once already (tests/real_lm.py): linked in, not converted again
    shutil.copytree(real_lm, workdir / MODEL, copy_function=os.link)
    target = f"results/runs/{SETTING}/{METHOD}/seed0/eval/{BENCHMARK}/summary.json"
    with one_more_verl_run(tmp_path_factory):  # not beside two of the toy module's (tests/verl_memory.py)
        done = snakemake(workdir, "--cores", "2", target, timeout=3600)  # a guard against a hang: 18 minutes in CI
    assert done.returncode == 0, done.stderr[-5000:]
    return workdir


def test_verls_trainer_ran_its_steps_on_the_real_lm(workdir):
    run = run_dir(workdir, METHOD)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["verl"]["version"] == "0.9.1"
    setting = find_setting(SETTING)
    records = rows(workdir, METHOD)
    assert [r["step"] for r in records] == list(range(setting.train.steps + 1))
    for r in records[1:]:
        assert r["perf/step_s"] > 0 and r["train/entropy_mean"] > 0 and 0 <= r["tr/mask_frac"] <= 1
        assert 0 < r["mismatch/abs_diff_mean"] < 0.1  # vLLM bf16 against the trainer, at equal parameters
        assert 0 < r["train/response_length_mean"] < setting.train.max_response_length
        # rewards are 0/1 grades: a batch all wrong (or all right) has no advantage and no gradient; a gradient
        # needs mixed rewards. With 4 prompts a step either happens (one of three runs earned nothing at step 1),
        # so the test asks for consistency, not for a reward: that the model earns some is the validation's check
        assert 0 <= r["train/reward_mean"] <= 1
        if r["train/reward_mean"] in (0, 1):
            assert r["train/grad_norm"] == 0
        if r["train/grad_norm"] > 0:
            assert 0 < r["train/reward_mean"] < 1
    assert {r["step"] for r in records if f"eval/{BENCHMARK}/avg@4" in r} == {0, setting.train.steps}


def test_responses_stop_at_im_end_or_are_counted_as_cut_off(workdir):
    """vLLM ends a response at the model's eos (<|im_end|>, id 2) or at the token limit. A wrong eos (transformers'
    GGUF reader says <|im_start|>) would let every response run past <|im_end|> and its newline into a new turn, and
    stop there: decoded without special tokens, each would end in that newline. verl's clip ratio counts responses as
    long as the batch's longest; the record keeps it only where the longest reached the limit."""
    limit = find_setting(SETTING).train.max_response_length
    logged = {step: row for step, row in verl_log(workdir, METHOD) if "response_length/clip_ratio" in row}
    records = {r["step"]: r for r in rows(workdir, METHOD)}
    assert sorted(logged) == [1, 2]
    for step, row in logged.items():
        assert row["response_length/min"] < limit and row["response_length/max"] <= limit
        cut_off = row["response_length/clip_ratio"] if row["response_length/max"] == limit else 0.0
        assert records[step]["train/response_clip_frac"] == cut_off < 1
    outputs = [s["output"] for step in (0, 2) for s in dump(workdir, METHOD, step)]
    assert not any(token in o for o in outputs for token in SPECIAL)
    assert not any("\nuser\n" in o or "\nassistant\n" in o for o in outputs)  # no turn of the template after it
    assert sum(o.endswith("\n") for o in outputs) < len(outputs) / 4


def test_the_chat_template_and_its_system_prompt_fit_the_prompt_budget(workdir):
    """verl renders every problem with the model's chat template and drops (filter_overlong_prompts) those longer
    than max_prompt_length: none is dropped, every held-out problem was validated n times."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workdir / MODEL)
    budget = find_setting(SETTING).train.max_prompt_length
    for name in ("arith_words_train", BENCHMARK):
        prompts = pq.read_table(workdir / "results" / "data" / "verl" / f"{name}.parquet").column("prompt").to_pylist()
        lengths = [len(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True)) for p in prompts]
        assert max(lengths) <= budget, name
    rendered = tokenizer.apply_chat_template(prompts[0], add_generation_prompt=True, tokenize=False)
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("<|im_start|>assistant\n")
    samples = dump(workdir, METHOD, 0)
    assert len(samples) == len(prompts) * 4 and len({s["problem_id"] for s in samples}) == len(prompts)
    assert all(s["input"].startswith("system\nYou are a helpful AI assistant named SmolLM") for s in samples)


def test_rewards_are_math_verify_grades_of_the_decoded_responses(workdir):
    """Online, verl's reward (our extraction + math-verify) graded the decoded text; offline, `dppo-bench evaluate`
    re-scored the same dumps to the same Avg@4. The answers came from the text, with no special token in them."""
    from transformers import AutoTokenizer

    from dppo_bench.eval.grading import grade

    added = set(AutoTokenizer.from_pretrained(workdir / MODEL).get_added_vocab())  # <|im_end|>, <file_sep>, ...
    steps = find_setting(SETTING).train.steps
    samples = dump(workdir, METHOD, 0) + dump(workdir, METHOD, steps)
    for sample in samples:
        verdict = grade(sample["output"], str(sample["gts"]), "integer")
        assert float(verdict.correct) == sample["acc"] == sample["score"]
        assert (verdict.extracted or "") == sample["pred"]
        assert not any(token in sample["pred"] for token in added)
        if sample["pred"]:
            assert sample["pred"] in sample["output"]
    accuracy = [s["acc"] for s in samples]
    assert 0 < sum(accuracy) < len(accuracy)  # right some of the time: real grades, not a constant
    summary = run_dir(workdir, METHOD) / "eval" / BENCHMARK / "summary.json"
    scored = {int(k): v for k, v in json.loads(summary.read_text())["steps"].items()}
    online = {r["step"]: r[f"eval/{BENCHMARK}/avg@4"] for r in rows(workdir, METHOD) if f"eval/{BENCHMARK}/avg@4" in r}
    assert set(scored) == set(online) == {0, steps}
    assert scored == pytest.approx(online, abs=1e-9)


def test_a_response_decoded_as_verl_decodes_it_is_graded_on_its_text(real_lm):  # noqa: F811
    """verl decodes a response with skip_special_tokens=True before the reward sees it: the <|im_end|> that ended it
    is gone. Kept, it would hide the answer from extraction (no rule reads a value followed by "<|im_end|>"), and a
    right answer would score 0: the real model's tokenizer must mark its stop token special."""
    from transformers import AutoTokenizer

    from dppo_bench.eval.grading import grade

    tokenizer = AutoTokenizer.from_pretrained(real_lm)
    assert set(SPECIAL) <= set(tokenizer.all_special_tokens)
    text = "Sam has 7 boxes with 8 books in each box, so 7 * 8 = 56 books in total."  # a real response (step 0)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == text and grade(decoded, "56", "integer").correct
    kept = tokenizer.decode(ids, skip_special_tokens=False)
    assert kept.endswith("<|im_end|>") and not grade(kept, "56", "integer").correct
