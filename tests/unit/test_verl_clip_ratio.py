"""verl's clip ratio counts the responses as long as the batch's longest, not those the token limit cut off."""

import pytest

from dppo_bench.verl_launch.records import MetricMap


@pytest.mark.parametrize(
    ("longest", "clip_ratio", "recorded"),
    [
        (202.0, 0.0625, 0.0),  # none reached the limit of 256: the one counted was the longest (SmolLM2, measured)
        (256.0, 0.125, 0.125),  # the longest reached it: verl counted the cut-off ones
    ],
)
def test_the_cut_off_fraction_is_verls_only_where_the_longest_response_reached_the_limit(longest, clip_ratio, recorded):
    data = {"response_length/clip_ratio": clip_ratio, "response_length/max": longest}
    assert MetricMap({}, max_response_length=256).row(1, data)["train/response_clip_frac"] == recorded
    assert MetricMap({}).row(1, data)["train/response_clip_frac"] == clip_ratio  # no limit given: verl's number
