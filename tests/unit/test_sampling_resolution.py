"""Sampling is resolved in one place (eval.protocol.sampling_of): a flag given wins, even a zero; one not given
(None) is the spec's. The evaluation command, the verl validation config and the run records all go through it."""

import argparse

from dppo_bench.commands.eval import _sampling
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.protocol import sampling_of
from dppo_bench.verl_launch.run_config import val_sampling


def test_a_flag_given_wins_even_a_zero_and_one_not_given_is_the_specs():
    spec = load_benchmark("aime24")
    assert sampling_of(spec, 100) == {"n": 32, "temperature": 0.7, "top_p": 0.95, "max_tokens": 100}
    assert sampling_of(spec, 100, temperature=0.0, n=1)["temperature"] == 0.0
    flags = argparse.Namespace(n=None, temperature=0.0, top_p=None, max_tokens=50, setting=None)
    assert _sampling(spec, flags, None) == {"n": 32, "temperature": 0.0, "top_p": 0.95, "max_tokens": 50}


def test_verls_validation_samples_as_the_spec_says():
    spec = load_benchmark("aime24")
    assert val_sampling([spec]) == {k: v for k, v in sampling_of(spec, None).items() if k != "max_tokens"}
