"""Verdicts: data-driven cases, the pool against in-process grading, pathological inputs, threads, hard limits."""

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from dppo_bench.eval.grading import GradingPool, Verdict, answer_kind, grade

CASES = json.loads((Path(__file__).parents[1] / "cases" / "grading.json").read_text())["cases"]
TOWER = "The answer is \\boxed{9^{9^{9^9}}}."
PARENS = "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}"
HUGE_BOX = "\\boxed{" + "+".join(["x^{2}"] * 40_000) + "}"  # 240 kB inside one box
LONG_TEXT = "We reason at length. " * 10_000 + "\\boxed{7}"  # 210 kB of text, then a plain answer
PATHOLOGICAL = [(TOWER, "7"), (PARENS, "7"), (HUGE_BOX, "7")]


@contextmanager
def stopped_workers(pool, hard_timeout_s: float):
    """SIGSTOP makes every worker unresponsive (as inside one endless C call) under a short hard limit."""
    pool.hard_timeout_s = hard_timeout_s
    try:
        for w in pool._pool:
            os.kill(w.proc.pid, signal.SIGSTOP)
        yield
    finally:
        pool.hard_timeout_s = None


@pytest.fixture(scope="module")
def pool():
    with GradingPool(2, timeout_s=1) as p:
        yield p


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_in_process(case):
    verdict = grade(case["completion"], case["answer"], case["answer_type"])
    assert verdict == Verdict(case["correct"], False, case["extracted"])


def test_cases_in_the_pool_match(pool):
    items = [(c["completion"], c["answer"], c["answer_type"]) for c in CASES]
    assert pool.grade_many(items) == [Verdict(c["correct"], False, c["extracted"]) for c in CASES]


def test_answer_kind():
    assert answer_kind("025", "auto") == "integer"
    assert answer_kind("\\frac12", "auto") == "math"
    assert answer_kind("7", "math") == "math"
    with pytest.raises(ValueError, match="not an integer but answer_type is 'integer'"):
        answer_kind("\\frac12", "integer")
    with pytest.raises(ValueError, match="answer_type 'int' is not one of auto, integer, math"):
        answer_kind("7", "int")


def test_pathological_in_process_main_thread():
    t0 = time.perf_counter()
    assert grade(TOWER, "7", timeout_s=1) == Verdict(False, True, "9^{9^{9^9}}")
    assert grade(PARENS, "7", timeout_s=1).timeout
    assert time.perf_counter() - t0 < 8


def test_pathological_in_the_pool(pool):
    t0 = time.perf_counter()
    verdicts = pool.grade_many([(c, a, "auto") for c, a in PATHOLOGICAL] + [(LONG_TEXT, "7", "auto")])
    assert [(v.correct, v.timeout) for v in verdicts] == [(False, True)] * 3 + [(True, False)]
    assert verdicts[0].extracted == "9^{9^{9^9}}"
    assert time.perf_counter() - t0 < 15  # three 1 s limits (parse, compare) on two workers, never a hang


def test_pathological_from_threads(pool):
    """Threads cannot use SIGALRM: grade() routes them through the shared pool; the pool itself is thread-safe."""
    items = [
        (TOWER, "7", "auto"),
        (PARENS, "7", "auto"),
        (LONG_TEXT, "7", "auto"),
        ("\\boxed{\\frac{14}{2}}", "7", "auto"),
    ]
    with ThreadPoolExecutor(4) as ex:
        from_pool = list(ex.map(lambda item: pool.grade(*item), items))
    assert [(v.correct, v.timeout) for v in from_pool] == [(False, True), (False, True), (True, False), (True, False)]
    result = {}
    worker = threading.Thread(target=lambda: result.update(v=grade("\\boxed{\\frac{14}{2}}", "7")))
    worker.start()
    worker.join(timeout=60)
    assert result["v"] == Verdict(True, False, "\\frac{14}{2}")


def test_a_stuck_worker_is_killed_at_the_hard_limit(pool):
    """The items of unresponsive workers time out; the workers are replaced."""
    restarts = pool.restarts
    t0 = time.perf_counter()
    with stopped_workers(pool, 1.0):
        verdicts = pool.grade_many([("\\boxed{\\frac{14}{2}}", "7", "auto"), ("\\boxed{\\frac{21}{3}}", "7", "auto")])
    assert verdicts == [Verdict(False, True, "\\frac{14}{2}"), Verdict(False, True, "\\frac{21}{3}")]
    assert time.perf_counter() - t0 < 5
    assert pool.restarts == restarts + 2
    assert pool.grade("\\boxed{\\frac{14}{2}}", "7") == Verdict(True, False, "\\frac{14}{2}")


def test_a_crashed_worker_is_a_timeout_and_is_replaced(pool):
    future = pool.check("9^{9^{9^9}}", "7", 5)
    deadline = time.monotonic() + 10
    while not any(w.inflight for w in pool._pool) and time.monotonic() < deadline:
        time.sleep(0.01)
    busy = next(w for w in pool._pool if w.inflight)
    os.kill(busy.proc.pid, signal.SIGKILL)
    assert future.result(timeout=10) == (False, True)
    assert pool.grade("\\boxed{7}", "7") == Verdict(True, False, "7")


def test_items_queued_behind_a_killed_worker_are_not_lost():
    with GradingPool(1, timeout_s=1, hard_timeout_s=1.5) as one:
        os.kill(one._pool[0].proc.pid, signal.SIGSTOP)
        futures = one.check_many([("\\frac{14}{2}", "7"), ("\\frac{21}{3}", "7"), ("\\frac{1}{3}", "7")])
        results = [f.result(timeout=20) for f in futures]
    assert results == [(False, True), (True, False), (False, False)]


def test_identical_pairs_are_verified_once(pool):
    restarts = pool.restarts
    with stopped_workers(pool, 1.0):
        verdicts = pool.grade_many([("\\boxed{\\frac{14}{2}}", "7", "auto")] * 5)
    assert verdicts == [Verdict(False, True, "\\frac{14}{2}")] * 5 and pool.restarts == restarts + 1


def test_the_cpu_time_backstop_stops_what_swallows_math_verify_timeouts():
    """A computation that survives SIGALRM (here: it catches math-verify's TimeoutException) is still stopped."""
    from math_verify.errors import TimeoutException

    from dppo_bench.eval.verifier import guarded

    def stubborn():
        while True:
            try:
                sum(range(10_000))
            except TimeoutException:
                pass

    t0 = time.process_time()
    assert guarded(stubborn, 1) == (None, True)
    assert 1.9 < time.process_time() - t0 < 4


def test_pool_must_be_started():
    with pytest.raises(RuntimeError, match="not running"):
        GradingPool(1).grade_many([("\\boxed{\\frac{1}{2}}", "0.5", "math")])


def test_workers_and_timeout_are_validated():
    with pytest.raises(ValueError, match="workers must be >= 1"):
        GradingPool(0)
    with pytest.raises(ValueError, match="whole number of seconds"):
        GradingPool(1, timeout_s=0.5)
