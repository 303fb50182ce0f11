"""verl's FileLogger rows -> canonical metrics.jsonl rows: the key map, a cut-off last line, folding attempts."""

import json

import pytest

from dppo_bench import canonical
from dppo_bench.config.specs import load_benchmark
from dppo_bench.io import CorruptFileError
from dppo_bench.rundir import RunDir
from dppo_bench.verl_launch.records import MetricMap, RecordError, apply_attempt, read_file_log


def write_log(path, rows, tail=b""):
    path.write_bytes(b"".join(json.dumps({"step": s, "data": d}).encode() + b"\n" for s, d in rows) + tail)
    return path


def test_the_map_covers_every_canonical_name_verl_can_produce():
    produced = set(canonical.VERL_KEYS.values())
    for name in (canonical.REWARD_MEAN, canonical.RESPONSE_LENGTH_MEAN, canonical.ENTROPY_MEAN, canonical.STEP_SECONDS):
        assert name in produced
    assert set(canonical.MISMATCH_STATS) <= produced
    assert set(canonical.SURROGATE_STATS.values()) <= produced
    assert canonical.VERL_KEYS["critic/score/mean"] == "train/reward_mean"
    assert canonical.VERL_KEYS["actor/mask_frac_neg"] == "tr/mask_frac_neg"
    assert canonical.VERL_KEYS["dppo_bench/mismatch/diff_min"] == "mismatch/diff_min"
    assert "actor/entropy" not in canonical.VERL_KEYS  # aggregated like the loss: not a token mean


def test_validation_keys_map_by_data_source_to_the_runs_benchmarks():
    m = MetricMap.for_benchmarks([load_benchmark("aime24"), load_benchmark("aime25")])
    assert m.name("val-core/aime24/acc/mean@32") == "eval/aime24/avg@32"
    assert m.name("val-core/aime25/acc/mean@32") == "eval/aime25/avg@32"
    assert m.name("val-aux/aime24/acc/std@32") is None
    assert m.name("val-core/math500/acc/mean@32") is None  # not a benchmark of this run
    sanity = MetricMap.for_benchmarks([load_benchmark("aime24_sanity")])  # its data_source is aime24
    assert sanity.name("val-core/aime24/acc/mean@32") == "eval/aime24_sanity/avg@32"


def test_one_run_cannot_validate_two_benchmarks_of_one_data_source():
    with pytest.raises(ValueError, match="aime24 and aime24_sanity share data_source 'aime24'"):
        MetricMap.for_benchmarks([load_benchmark("aime24"), load_benchmark("aime24_sanity")])


def test_row_keeps_mapped_numbers_only_and_nulls_non_finite():
    row = MetricMap({"aime24": "aime24"}).row(
        3,
        {
            "critic/score/mean": 0.5,
            "timing_s/step": float("inf"),
            "actor/mask_frac": 0.1,
            "val-core/aime24/acc/mean@32": 0.2,
            "training/global_step": 3,
            "actor/is_ratio_max": True,
            "actor/pi_mu_diff_min": "n/a",
        },
    )
    assert row == {
        "step": 3,
        "train/reward_mean": 0.5,
        "perf/step_s": None,
        "tr/mask_frac": 0.1,
        "eval/aime24/avg@32": 0.2,
    }


def test_a_last_line_cut_short_is_ignored_and_a_broken_middle_line_is_an_error(tmp_path):
    log = write_log(tmp_path / "a.jsonl", [(1, {"x": 1}), (2, {"x": 2})], tail=b'{"step": 3, "da')
    assert read_file_log(log) == [(1, {"x": 1}), (2, {"x": 2})]
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(b'{"step": 1, "data": {}}\n{oops\n{"step": 2, "data": {}}\n')
    with pytest.raises(CorruptFileError, match="b.jsonl: line 2 is not valid JSON; the file is damaged"):
        read_file_log(bad)
    odd = tmp_path / "c.jsonl"
    odd.write_bytes(b'{"step": "1", "data": {}}\n')
    with pytest.raises(RecordError, match="c.jsonl: line 1: expected"):
        read_file_log(odd)
    assert read_file_log(tmp_path / "absent.jsonl") == []


def test_folding_is_idempotent_and_merges_the_resumed_steps_validation(tmp_path):
    run = RunDir(tmp_path).create()
    m = MetricMap({"aime24": "aime24"})
    first = write_log(
        tmp_path / "1.jsonl",
        [(0, {"val-core/aime24/acc/mean@32": 0.1})]
        + [(s, {"critic/score/mean": s / 10, "timing_s/step": 1.0}) for s in range(1, 7)],
    )
    apply_attempt(run, first, 0, m)
    assert [r["step"] for r in run.read_metrics()] == list(range(7))
    second = write_log(
        tmp_path / "2.jsonl",
        [(4, {"val-core/aime24/acc/mean@32": 0.4})]
        + [(s, {"critic/score/mean": s / 10, "timing_s/step": 2.0}) for s in range(5, 9)],
    )
    assert apply_attempt(run, second, 4, m) == {"rows": 5, "last_step": 8}
    once = run.metrics.read_text()
    apply_attempt(run, second, 4, m)  # a killed fold, redone
    assert run.metrics.read_text() == once
    rows = {r["step"]: r for r in run.read_metrics()}
    assert sorted(rows) == list(range(9))
    assert rows[4] == {"step": 4, "train/reward_mean": 0.4, "perf/step_s": 1.0, "eval/aime24/avg@32": 0.4}
    assert [rows[s]["perf/step_s"] for s in range(1, 9)] == [1.0] * 4 + [2.0] * 4


def test_a_later_log_entry_of_the_same_step_wins(tmp_path):
    run = RunDir(tmp_path).create()
    log = write_log(tmp_path / "1.jsonl", [(1, {"critic/score/mean": 0.1}), (1, {"critic/score/mean": 0.2})])
    apply_attempt(run, log, 0, MetricMap({}))
    assert run.read_metrics() == [{"step": 1, "train/reward_mean": 0.2}]


def test_every_verl_settings_online_benchmarks_map_to_themselves():
    from dppo_bench.config import load_setting, setting_paths

    for path in setting_paths():
        s = load_setting(path)
        if s.backend == "verl":
            assert sorted(
                MetricMap.for_benchmarks(load_benchmark(b) for b in s.eval.benchmarks).benchmarks.values()
            ) == sorted(s.eval.benchmarks)
