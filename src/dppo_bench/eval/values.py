"""Reading an extracted answer: as an integer when it is one written plainly, and as the verifier compares it.

``as_integer`` reads "025", "1,000", "$25$", "\\text{25}", "25^\\circ", "40°", "11^{\\text{th}}", "204 minutes" as
integers (AIME answers compare as integers); anything that needs arithmetic ("\\frac{50}{2}", "5^2") is left to
math-verify. ``comparable`` gives math-verify the same reading of degree signs and ordinals.
"""

from __future__ import annotations

import re

from dppo_bench.eval.answer_line import NAME_EQUALS
from dppo_bench.tex import matching_braces, strip_delimiters

_WRAPPERS = ("\\boxed", "\\fbox", "\\text", "\\textbf", "\\mathbf", "\\mathrm", "\\mbox", "\\textrm", "\\bm")
_SPACING = re.compile(r"\\[,!;: ]|~|\\quad|\\qquad|\\displaystyle")
_INTEGER = re.compile(r"[+-]?\d+(?:\.0+)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_ORDINAL = re.compile(
    r"(?<=\d)\s*(?:\^\{?\\(?:text|mathrm)\{(?:st|nd|rd|th)\}\}?|\^\{?(?:st|nd|rd|th)\}?|"
    r"\\(?:text|mathrm)\{\s*(?:st|nd|rd|th)\}|(?:st|nd|rd|th)\b)"
)
_UNIT_SUFFIX = re.compile(  # degrees, percent, or a unit in words: "25^\circ", "204 \text{ minutes}", "204 minutes"
    r"(?:\^\{?\\circ\}?|\\%|%|\\(?:text|mbox)\{[A-Za-z ]*\}|\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*[²³]?|\s+[A-Za-z][²³])$"
)
_DEGREE = re.compile(r"\s*\\degree(?![A-Za-z])")  # the gensymb/siunitx degree sign
_MAX_INTEGER_CHARS = 80


def _unwrap(s: str) -> str:
    """Strip \\boxed{...}, \\text{...}, \\mathbf{...} ... when one of them wraps the whole string."""
    changed = True
    while changed:
        changed = False
        s = strip_delimiters(s)
        for w in _WRAPPERS:
            if s.startswith(w + "{") and s.endswith("}") and matching_braces(s, 0).get(len(w)) == len(s) - 1:
                s = s[len(w) + 1 : -1].strip()
                changed = True
    return s


def comparable(answer: str) -> str:
    """An extracted answer as the verifiers read it: "40°" and "40 \\degree" are "40^\\circ", "11^{\\text{th}}" is
    "11"."""
    return _ORDINAL.sub("", _DEGREE.sub(r"^\\circ", answer.replace("°", "^\\circ")))


def as_integer(answer: str) -> int | None:
    """The integer an answer writes plainly ("025", "1,000", "\\text{25}", "25^\\circ", "n = 25"), else None.

    Anything that needs arithmetic to become an integer ("\\frac{50}{2}", "5^2") is left to the verifier.
    """
    if len(answer) > _MAX_INTEGER_CHARS:
        return None  # no plainly written integer is this long; also keeps the regexes below cheap
    s = _SPACING.sub("", _unwrap(comparable(answer))).replace("{,}", ",").strip().removesuffix(".").strip()
    s = NAME_EQUALS.sub("", s)
    s = _UNIT_SUFFIX.sub("", s).strip()
    s = _unwrap(s)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if _INTEGER.fullmatch(s):
        return int(s.split(".")[0])
    return None
