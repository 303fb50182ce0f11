"""Rule 7: math-verify's own last resort, for a finished completion with no box, no Answer marker and no phrase.

The paper grades with verl's math-verify reward, which parses the whole completion with ``ExprExtractionConfig()``
and ``LatexExtractionConfig()`` (their defaults). When nothing anchors an answer there (no box, no "answer", no
"final answer is"), ``math_verify.parse`` falls back to its patterns without an anchor: every LaTeX math
environment (``$...$``, ``$$...$$``, ``\\[...\\]``, ``\\(...\\)``, up to five joined by "and"/"or"/","),
``\\frac{a}{b}``, number (``1,234``, ``12.5``, ``40%``) and plain expression (``3/4``), and it takes the one that
ends last. Here the same patterns, taken from math-verify itself (so they follow its version), run on the
completion's closing part, and the match that ends last is the answer as math-verify reads it: a closing
sentence "the area of the garden is 48 square meters." gives ``48``, a last line ``$x = 12$`` gives ``x = 12``.

Two differences, both deliberate: only the last ``tex.CONTEXT_CHARS`` characters are searched (a value stated
further back is not a closing statement, and the bound keeps the patterns' cost linear); and the last match is
taken whether or not it parses (math-verify would try the one before it; that takes a parser, which is the
verifier's work under its CPU-time limit, not extraction's).
"""

from __future__ import annotations

import re
from functools import cache

from dppo_bench.tex import CONTEXT_CHARS, outside_math


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], bool], ...]:
    """(pattern, is a plain number/expression pattern) for each pattern math-verify uses only without an anchor."""
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, get_extraction_regexes

    def compiled(without_anchor: bool) -> list[tuple[re.Pattern[str], bool]]:
        configs = [
            ExprExtractionConfig(try_extract_without_anchor=without_anchor),
            LatexExtractionConfig(try_extract_without_anchor=without_anchor),
        ]
        return [
            (pattern, isinstance(config, ExprExtractionConfig))
            for patterns, config in get_extraction_regexes(configs)
            for pattern, _ in patterns
        ]

    anchored = {pattern.pattern for pattern, _ in compiled(False)}
    return tuple((p, is_expr) for p, is_expr in compiled(True) if p.pattern not in anchored)


def _closing_part(text: str) -> str:
    """The last CONTEXT_CHARS characters, from a paragraph or line boundary (else from where no math is open on
    the last line), so that no math is split."""
    start = max(0, len(text) - CONTEXT_CHARS)
    if start == 0:
        return text
    for boundary in ("\n\n", "\n"):
        if (at := text.find(boundary, start)) >= 0:
            return text[at:]
    return text[outside_math(text, start) :]


def _expression(match: re.Match[str]) -> str | None:
    """A number or plain expression as math-verify reads it ("1,234" is 1234, "12,5" is 12.5, "40%" a percent),
    or None where math-verify cannot read it ("48**" from "**48**": it goes on to the match before)."""
    from math_verify.parser import extract_expr

    try:  # sympy's reading of the string, unevaluated: no arithmetic is done here
        parsed, text = extract_expr(match)
    except Exception:  # noqa: BLE001  (a number math-verify itself would fail on)
        return None
    if parsed is None or not text:
        return None
    return text.strip() + ("\\%" if match.groupdict().get("percent") else "")


def _latex(groups: dict[str, str | None]) -> str:
    """The contents of a match's math environments, joined with ", " (math-verify makes them one set)."""
    parts = []
    for prefix in ["first_"] + [f"next{i}_" for i in range(1, 6)]:
        content = next((v for k, v in groups.items() if k.startswith(prefix + "latex") and v), None)
        if content is not None:
            parts.append(content.strip() + ("\\%" if groups.get(prefix + "percent") else ""))
    return ", ".join(parts)


def closing_value(text: str) -> str | None:
    """The value math-verify's last resort reads from the end of ``text``, or None when there is none."""
    tail = _closing_part(text)
    matches = [
        (m.end(), -m.start(), i, m, is_expr) for i, (p, is_expr) in enumerate(_patterns()) for m in p.finditer(tail)
    ]
    for *_, match, is_expr in sorted(matches, key=lambda x: x[:3], reverse=True):  # math-verify's order: the
        value = _expression(match) if is_expr else _latex(match.groupdict())  # match ending last, then the longest
        if value:
            return value
    return None
