"""math-verify, called the way this suite grades, under a CPU-time budget per pair, with its timeouts recorded.

Gold and prediction are each wrapped in ``\\boxed{...}`` and parsed with LaTeX extraction first, then plain
expressions (the configuration verl's own ``math_verify`` reward uses); ``verify`` is called gold first (it is not
symmetric). Parsing the prediction and every comparison of a pair share one budget of ``cpu_limit_s`` seconds of
CPU time, not of wall-clock time (each gold is parsed once per process, under a budget of its own): math-verify's
own limits (SIGALRM, wall-clock) are switched off, because on a loaded machine a wall-clock limit times a pair out
in one run and not in the next. The limit is a CPU-time timer (SIGPROF) whose handler raises; it refires every
50 ms, because a raise inside a ``__del__`` or weakref callback is swallowed (seen in this suite's tests) and the
computation would otherwise run on unbounded. Signals are handled on a process's main thread only: ``grading``
routes every other caller through worker processes. A number too large to compute never gets here
(``magnitude``): sympy would build it inside one C call, where no signal lands.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import version

NAME = "math-verify"
# CPU seconds for one pair's parse and comparisons; with the retry's 4x, a pair costs at most about 1 s. The costliest
# pair of MATH-500's answers takes 0.15 s (benchmarks/scoring.py, (D))
DEFAULT_TIMEOUT_S = 0.2
REFIRE_S = 0.05
# math-verify warns once that its own timeouts are off, and logs each failed parse: the limits are ours, and
# every timeout is recorded in the verdicts.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class CpuLimit(BaseException):
    """Raised by the CPU-time limit (a BaseException, so that ``except Exception`` in a library does not eat it)."""


_armed = False


def _on_limit(signum, frame) -> None:
    if _armed:  # a signal arriving after the call ended does nothing
        raise CpuLimit


def guarded(fn: Callable[[], object], cpu_limit_s: float) -> tuple[object, bool]:
    """(fn(), False), or (None, True) when fn used up ``cpu_limit_s`` seconds of CPU time. Main thread only."""
    global _armed
    old = signal.signal(signal.SIGPROF, _on_limit)
    try:
        _armed = True
        signal.setitimer(signal.ITIMER_PROF, cpu_limit_s, REFIRE_S)
        return fn(), False
    except CpuLimit:
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


@lru_cache(maxsize=1)
def _warm() -> None:
    """Import math-verify, sympy and the LaTeX parser and compare once, outside any budget: an import takes about
    0.5 s of CPU, more than a pair's budget, and one cut short by the limit would leave a module half-made."""
    _matches(tuple(_parse("1")), "1")


def _parse(text: str) -> list:
    """math-verify's reading of an answer; an ordinary parse failure is an empty list."""
    from math_verify import parse

    try:
        return parse("\\boxed{" + text + "}", _configs(), parsing_timeout=None, raise_on_error=True) or []
    except Exception:  # noqa: BLE001  (math-verify's own failures mean "could not parse")
        return []


@lru_cache(maxsize=8192)
def _parsed_gold(answer: str, cpu_limit_s: float) -> tuple[tuple, bool]:
    # Every sample of a problem shares its gold: parse it once per process.
    parsed, timed_out = guarded(lambda: _parse(answer), cpu_limit_s)
    return tuple(parsed or ()), timed_out


def check(prediction: str, answer: str, cpu_limit_s: float) -> tuple[bool, bool]:
    """(correct, timeout) of an extracted prediction against the gold answer, by math-verify: the prediction's
    parse and its comparisons with the gold take at most ``cpu_limit_s`` CPU seconds together."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("verifier.check uses a CPU-time signal and must run on the main thread")
    _warm()
    try:
        gold, gold_timeout = _parsed_gold(answer, cpu_limit_s)
        if not gold:
            return False, gold_timeout
        same, timed_out = guarded(lambda: _matches(gold, prediction), cpu_limit_s)
        return bool(same), timed_out
    except CpuLimit:  # landed in the instant between a call's end and its disarming
        return False, True


def _matches(gold: tuple, prediction: str) -> bool:
    """Whether any reading of the prediction equals any reading of the gold (``verify`` on the lists would stop
    at the first error; each comparison here fails alone)."""
    from math_verify import verify

    def equal(g, p) -> bool:
        try:
            return verify(g, p, timeout_seconds=None, raise_on_error=True)
        except Exception:  # noqa: BLE001  (a pair math-verify cannot compare is not equal)
            return False

    readings = _parse(prediction)
    return any(equal(g, p) for g in gold for p in readings)
