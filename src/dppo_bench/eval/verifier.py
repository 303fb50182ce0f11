"""math-verify, called the way this suite grades, with its timeouts recorded instead of swallowed.

Gold and prediction are each wrapped in ``\\boxed{...}`` and parsed with LaTeX extraction first, then plain
expressions (the configuration verl's own ``math_verify`` reward uses); ``verify`` is called gold first (it is not
symmetric). math-verify's timeouts use SIGALRM, so this module only runs on a process's main thread:
``grading`` routes every other caller through a process pool. Its ``TimeoutException`` subclasses BaseException,
so ``except Exception`` would miss it; it is caught by name here.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from importlib.metadata import version

NAME = "math-verify"


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
    from math_verify.errors import TimeoutException

    try:
        return parse("\\boxed{" + text + "}", _configs(), parsing_timeout=timeout_s, raise_on_error=True), False
    except TimeoutException:
        return [], True
    except Exception:  # noqa: BLE001  (math-verify's own non-timeout failures mean "could not parse")
        return [], False


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
    from math_verify import verify
    from math_verify.errors import TimeoutException

    gold, gold_timeout = _parsed_gold(answer, timeout_s)
    pred, pred_timeout = _parse(prediction, timeout_s)
    if not gold or not pred:
        return False, gold_timeout or pred_timeout
    timed_out = False
    for g in gold:
        for p in pred:
            try:
                if verify(g, p, timeout_seconds=timeout_s, raise_on_error=True):
                    return True, False
            except TimeoutException:
                timed_out = True
            except Exception:  # noqa: BLE001  (a pair math-verify cannot compare is not equal)
                continue
    return False, timed_out
