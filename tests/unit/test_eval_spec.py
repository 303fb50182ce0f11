"""Benchmark and dataset specs: the committed files, the paper's values, and one clear error per bad input."""

import argparse
from pathlib import Path

import pytest

from dppo_bench.commands.eval import _max_tokens
from dppo_bench.config import ConfigError, find_setting
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_any, load_benchmark, load_benchmarks, load_dataset_spec

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def test_headline_benchmarks_hold_the_paper_protocol():
    for name in ("aime24", "aime25"):
        b = load_benchmark(name)
        assert (b.n, b.sampling.temperature, b.sampling.top_p) == (32, 0.7, 0.95)
        assert (b.answer_type, b.prompt, b.split) == ("integer", "dapo_answer", "test")
        assert b.sources.local.sha256 is not None and b.sources.hub.sha256 is None


def test_sanity_evaluation_shares_aime24_problems_with_its_own_protocol():
    s, a = load_benchmark("aime24_sanity"), load_benchmark("aime24")
    assert s.sources == a.sources and s.problems_from == "aime24"
    assert (s.n, s.sampling.temperature, s.sampling.top_p) == (32, 0.6, 0.95)
    assert s.prompt == "r1_boxed"
    # verl validates online with at most the training response length: offline generation matches it
    assert s.sampling.max_tokens == find_setting("sanity_r1d_1p5b").train.max_response_length == 6976


@pytest.mark.parametrize(
    "max_tokens, setting, expected",
    [(None, None, 16384), (None, "dense_base", 8000), (None, "moe_base", 16384), (123, "dense_base", 123)],
)
def test_generation_length_comes_from_the_flag_then_the_setting_then_the_benchmark(max_tokens, setting, expected):
    args = argparse.Namespace(max_tokens=max_tokens, setting=setting)
    assert _max_tokens(load_benchmark("aime24"), args) == expected


def test_every_committed_spec_loads_and_names_an_existing_template():
    specs = [*load_benchmarks().values(), load_dataset_spec("dapo_math_17k"), load_dataset_spec("sanity_r1d_1p5b")]
    for spec in specs:
        load_prompt(spec.prompt)
    dapo = load_dataset_spec("dapo_math_17k")
    assert dapo.sources.hub.revision == "65877096c24ffa7abc4e4fa5edb95cf3413a5674"
    assert dapo.default_source() == "hub" and dapo.split == "train"
    assert load_any("sanity_r1d_1p5b").sources.hub.repo == "sail/Sanity-Test-R1D-1.5B"


def test_prompt_templates_are_exact():
    dapo = load_prompt("dapo_answer").messages("What is $\\{1\\}$?")
    assert dapo == [{"role": "user", "content": DAPO_PREFIX + "What is $\\{1\\}$?" + DAPO_SUFFIX}]
    boxed = load_prompt("r1_boxed").messages("P")[0]["content"]
    assert boxed == "P\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert load_prompt("as_is").messages("{x}")[0]["content"] == "{x}"


GOOD = """
title: T
data_source: t
answer_type: integer
prompt: dapo_answer
n: 4
sampling: {temperature: 0.7, top_p: 0.95, max_tokens: 16}
sources:
  local: {path: data.jsonl, sha256: null}
"""


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "edit, field, message",
    [
        (lambda t: t + "extra_key: 1\n", "extra_key", "unknown key"),
        (lambda t: t.replace("n: 4", "n: 0"), "n", "greater than or equal to 1"),
        (lambda t: t.replace("top_p: 0.95", "top_p: 1.5"), "sampling.top_p", "less than or equal to 1"),
        (lambda t: t.replace("answer_type: integer", "answer_type: int"), "answer_type", "'auto', 'integer'"),
        (lambda t: t.replace("sha256: null", "sha256: abc"), "sources.local.sha256", "should match pattern"),
        (lambda t: t.replace(", sha256: null", ""), "sources.local.sha256", "Field required"),
        (
            lambda t: t.replace("sources:\n  local: {path: data.jsonl, sha256: null}", "sources: {}"),
            "sources",
            "at least one",
        ),
        (lambda t: t + "id: x\n", "id", "the id is the file name"),
        (lambda t: t.replace("sources:", "sources:\n  default: hub"), "sources", "no sources.hub"),
    ],
)
def test_bad_benchmark_yaml_names_file_and_field(tmp_path, edit, field, message):
    path = write(tmp_path, "bench", edit(GOOD))
    with pytest.raises(ConfigError, match=message) as e:
        load_benchmark("bench", tmp_path)
    assert e.value.path == str(path) and e.value.field == field


def test_bad_field_rule_regex(tmp_path):
    text = GOOD.replace(
        "local: {path: data.jsonl, sha256: null}",
        "local: {path: d.jsonl, sha256: null, fields: {id: {column: u, pattern: '(['}, problem: p, answer: a}}",
    )
    write(tmp_path, "bench", text)
    with pytest.raises(ConfigError, match="not a valid regex") as e:
        load_benchmark("bench", tmp_path)
    assert e.value.field == "sources.local.fields.id.pattern"


@pytest.mark.parametrize("key", ["n", "sampling"])
def test_a_training_set_has_no_sampling(tmp_path, key):
    text = GOOD if key == "n" else GOOD.replace("n: 4\n", "")
    write(tmp_path, "train", text)
    with pytest.raises(ConfigError, match=f"a training dataset has no {key}") as e:
        load_dataset_spec("train", tmp_path)
    assert e.value.field == key


def test_problems_from_rules(tmp_path):
    write(tmp_path, "base", GOOD)
    shared = GOOD.replace("sources:\n  local: {path: data.jsonl, sha256: null}\n", "problems_from: base\n")
    write(tmp_path, "child", shared)
    assert load_benchmark("child", tmp_path).sources == load_benchmark("base", tmp_path).sources
    write(tmp_path, "grandchild", shared.replace("problems_from: base", "problems_from: child"))
    with pytest.raises(ConfigError, match="itself shares its problems"):
        load_benchmark("grandchild", tmp_path)
    write(tmp_path, "both", GOOD + "problems_from: base\n")
    with pytest.raises(ConfigError, match="either sources or problems_from"):
        load_benchmark("both", tmp_path)
    write(tmp_path, "dangling", shared.replace("problems_from: base", "problems_from: nope"))
    with pytest.raises(ConfigError, match="no benchmark 'nope'"):
        load_benchmark("dangling", tmp_path)


def test_unknown_ids_list_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown benchmark 'aime23'; known: aime24, aime24_sanity, aime25"):
        load_benchmark("aime23")
    with pytest.raises(ConfigError, match="unknown benchmark or dataset 'nope'; known: .*dapo_math_17k"):
        load_any("nope")
    write(tmp_path / "eval", "dup", GOOD)
    training = GOOD.replace("n: 4\n", "").replace("sampling: {temperature: 0.7, top_p: 0.95, max_tokens: 16}\n", "")
    write(tmp_path / "datasets", "dup", training)
    with pytest.raises(ConfigError, match="is both a benchmark"):
        load_any("dup", tmp_path / "eval", tmp_path / "datasets")
