"""math-verify, called the way this suite grades, with its timeouts recorded instead of swallowed.

Gold and prediction are each wrapped in ``\\boxed{...}`` and parsed with LaTeX extraction first, then plain
expressions (the configuration verl's own ``math_verify`` reward uses); ``verify`` is called gold first (it is not
symmetric). math-verify's timeouts use SIGALRM, so this module only runs on a process's main thread:
``grading`` routes every other caller through a process pool. Its ``TimeoutException`` subclasses BaseException,
so ``except Exception`` would miss it; it is caught by name here.

SIGALRM can fail to stop a computation: its handler raises wherever Python happens to be, and a raise inside a
``__del__`` or weakref callback is swallowed (seen in this suite's tests), after which math-verify runs on with no
limit. Every call therefore also runs under a CPU-time backstop (SIGPROF, a separate timer) that fires one second
after math-verify's own limit and then every 50 ms until one of its raises lands.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import version

NAME = "math-verify"
BACKSTOP_S = 1.0  # CPU seconds past math-verify's own limit
REFIRE_S = 0.05


class _Backstop(BaseException):
    """Raised by the CPU-time backstop (a BaseException, like math-verify's own TimeoutException)."""


_armed = False


def _on_backstop(signum, frame) -> None:
    if _armed:  # a signal arriving after the call ended does nothing
        raise _Backstop


def guarded(fn: Callable[[], object], timeout_s: int) -> tuple[object, bool]:
    """(fn(), False), or (None, True) when math-verify's timeout or the backstop stops it. Main thread only."""
    from math_verify.errors import TimeoutException

    global _armed
    old = signal.signal(signal.SIGPROF, _on_backstop)
    try:
        _armed = True
        signal.setitimer(signal.ITIMER_PROF, timeout_s + BACKSTOP_S, REFIRE_S)
        return fn(), False
    except (TimeoutException, _Backstop):
        return None, True
    finally:
        _armed = False
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def verifier_info() -> dict[str, str]:
    """Name and versions of the verifier and of the LaTeX parser it depends on (for scores.json)."""
    return {
        "name": NAME,
        "version": version("math-verify"),
        "latex2sympy2_extended": version("latex2sympy2_extended"),
        "antlr4": version("antlr4-python3-runtime"),
    }


@lru_cache(maxsize=1)
def _configs():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


def _parse(text: str, timeout_s: int) -> tuple[list, bool]:
    """(parsed targets, timed out). An ordinary parse failure is an empty list."""
    from math_verify import parse

    def run():
        try:
            return parse("\\boxed{" + text + "}", _configs(), parsing_timeout=timeout_s, raise_on_error=True)
        except Exception:  # noqa: BLE001  (math-verify's own non-timeout failures mean "could not parse")
            return []

    parsed, timed_out = guarded(run, timeout_s)
    return parsed or [], timed_out


@lru_cache(maxsize=8192)
def _parsed_gold(answer: str, timeout_s: int) -> tuple[tuple, bool]:
    # Every sample of a problem shares its gold: parse it once per process.
    parsed, timed_out = _parse(answer, timeout_s)
    return tuple(parsed), timed_out


def check(prediction: str, answer: str, timeout_s: int) -> tuple[bool, bool]:
    """(correct, timeout) of an extracted prediction against the gold answer, by math-verify.

    Each (gold, prediction) pair is verified separately so that one pair's timeout is recorded while the other
    pairs still count, which is what ``verify`` on the lists does when it swallows errors.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("verifier.check uses SIGALRM timeouts and must run on the main thread")
    try:
        return _check(prediction, answer, timeout_s)
    except _Backstop:  # landed in the instant between a call's end and its disarming
        return False, True


def _check(prediction: str, answer: str, timeout_s: int) -> tuple[bool, bool]:
    from math_verify import verify

    def equal(g, p) -> bool:
        try:
            return verify(g, p, timeout_seconds=timeout_s, raise_on_error=True)
        except Exception:  # noqa: BLE001  (a pair math-verify cannot compare is not equal)
            return False

    gold, gold_timeout = _parsed_gold(answer, timeout_s)
    pred, pred_timeout = _parse(prediction, timeout_s)
    if not gold or not pred:
        return False, gold_timeout or pred_timeout
    timed_out = False
    for g in gold:
        for p in pred:
            same, pair_timeout = guarded(lambda g=g, p=p: equal(g, p), timeout_s)
            if same:
                return True, False
            timed_out = timed_out or pair_timeout
    return False, timed_out
