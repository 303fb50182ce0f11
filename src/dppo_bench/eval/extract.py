"""Final-answer extraction from a model completion: pure string work, linear time, no verifier.

The rules, in order (they are the suite's documented extraction; cases in ``tests/cases/grading.json``):

1. **Region.** When the completion contains ``</think>``, only the text after the last ``</think>`` is searched:
   an answer inside the reasoning is a draft, not the final answer (R1-distilled and Qwen3 thinking models).
2. **Last marker wins.** The candidates are the last non-empty ``\\boxed{...}`` (or ``\\fbox{...}``) whose braces
   balance and the last ``Answer:`` line (case-insensitive, markdown bold allowed: ``**Answer:** 25``; the answer
   may stand on the next non-blank line, as the DAPO template asks: ``Answer:\\n25``). Whichever starts later in
   the text is the answer. ``Answer: \\boxed{25}`` therefore yields the box content.
3. **Fallback.** With neither marker, the last "the answer is X" / "final answer is X" phrase, up to the end of
   its sentence.
4. **Nothing else.** There is deliberately no "last number in the text" fallback: it rewards unfinished or
   unformatted completions (the templates ask for a box or an ``Answer:`` line), and it turns a completion with
   no answer into a lottery over the numbers it happens to mention.

``as_integer`` then reads an extracted answer as an integer when it is one written plainly ("025", "1,000",
"$25$", "\\text{25}", "25^\\circ", "204 minutes"): AIME answers compare as integers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_END = "</think>"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
_ANSWER_WORD = re.compile(r"(?i)\banswer")  # the slow path of _answer_words
_LINE_TAIL = re.compile(r"[ \t]*(?:\*\*|__)?[ \t]*[:：]")  # after "answer": "Answer:", "**Answer**:", "Answer :"
_BLANK_LINES = re.compile(r"(?:[ \t]*(?:\*\*|__)?[ \t]*\n)+")  # "Answer:" then the answer on a line of its own
_PHRASE_TAIL = re.compile(r"[ \t]+is[ \t]*:?[ \t]*", re.IGNORECASE)  # after "answer": " is", " is:"
_PHRASE_HEAD = ("the ", "final ")  # before "answer"
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_TOKEN = re.compile(r"[^\s$]+")
_WRAPPERS = ("\\boxed", "\\fbox", "\\text", "\\textbf", "\\mathbf", "\\mathrm", "\\mbox", "\\textrm", "\\bm")
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SPACING = re.compile(r"\\[,!;: ]|~|\\quad|\\qquad|\\displaystyle")
_INTEGER = re.compile(r"[+-]?\d+(?:\.0+)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_UNIT_SUFFIX = re.compile(  # degrees, percent, or a unit in words: "25^\circ", "204 \text{ minutes}", "204 minutes"
    r"(?:\^\{?\\circ\}?|\\%|%|\\(?:text|mbox)\{[A-Za-z ]*\}|\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*)$"
)
_MAX_INTEGER_CHARS = 80
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*")


@dataclass(frozen=True)
class Extraction:
    text: str  # the answer as written, outer math delimiters stripped
    rule: str  # "boxed" | "answer_line" | "answer_phrase"


def extract_answer(completion: str) -> Extraction | None:
    """The completion's final answer by the rules above, or None when it states none."""
    text = completion.rsplit(THINK_END, 1)[1] if THINK_END in completion else completion
    boxed = last_box(text)
    words = _answer_words(text)
    line = _last_answer_line(text, words)
    if boxed and line:
        best = boxed if boxed[0] > line[0] else line
    else:
        best = boxed or line
    if best:
        return best[1]
    return _last_answer_phrase(text, words)


def last_box(text: str) -> tuple[int, Extraction] | None:
    """(position, content) of the last non-empty, balanced \\boxed{} (or \\fbox{}) of ``text``, or None."""
    starts = [m for m in _BOX.finditer(text)]
    if not starts:
        return None
    closing = _matching_braces(text, starts[0].start())
    for m in reversed(starts):
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            end = closing.get(i)
            if end is None:
                continue  # unbalanced (e.g. cut off by max_tokens): try the box before it
            content = text[i + 1 : end]
            if not content.strip():
                continue  # an empty box states nothing: the box before it stands
        else:
            # "\boxed 25": the TeX form without braces takes the next token
            token = _TOKEN.match(text, i)
            if token is None:
                continue
            content = token.group(0)
        return m.start(), Extraction(strip_delimiters(content), "boxed")
    return None


def _matching_braces(text: str, start: int) -> dict[int, int]:
    """Position of each unescaped '{' from ``start`` on -> its matching '}' (one linear pass)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for m in _BRACE_OR_ESCAPE.finditer(text, start):
        token = m.group(0)
        if token == "{":
            stack.append(m.start())
        elif token == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _answer_words(text: str) -> list[int]:
    """The start of every word "answer" in the text (any case), last first.

    str.rfind on the lower-cased text is ~10x faster than a case-insensitive regex on long completions; the regex
    is kept for the rare text whose lower-casing changes its length (positions would no longer line up)."""
    lower = text.lower()
    if len(lower) != len(text):
        return [m.start() for m in reversed(list(_ANSWER_WORD.finditer(text)))]
    starts, pos = [], len(lower)
    while (pos := lower.rfind("answer", 0, pos)) >= 0:
        if pos == 0 or not (lower[pos - 1].isalnum() or lower[pos - 1] == "_"):
            starts.append(pos)
    return starts


def _last_answer_line(text: str, words: list[int]) -> tuple[int, Extraction] | None:
    for start in words:
        m = _LINE_TAIL.match(text, start + len("answer"))
        if m:
            after = m.end()
            if (blank := _BLANK_LINES.match(text, after)) is not None:
                after = blank.end()
            content = _clean_markdown(_rest_of_line(text, after))
            if content:
                return start, Extraction(content, "answer_line")
    return None


def _last_answer_phrase(text: str, words: list[int]) -> Extraction | None:
    for start in words:
        m = _PHRASE_TAIL.match(text, start + len("answer"))
        if m and any(text[max(0, start - len(h)) : start].lower() == h for h in _PHRASE_HEAD):
            sentence = _SENTENCE_END.split(_rest_of_line(text, m.end()), maxsplit=1)[0]
            content = _clean_markdown(sentence)
            if content:
                return Extraction(content, "answer_phrase")
    return None


def _rest_of_line(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start : end if end >= 0 else len(text)]


def _clean_markdown(s: str) -> str:
    s = s.strip().strip("*_").strip()
    s = s.removesuffix(".").strip()
    return strip_delimiters(s)


def strip_delimiters(s: str) -> str:
    """Remove outer math delimiters ($...$, \\(...\\), \\[...\\]) and surrounding space."""
    s = s.strip()
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMITERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                changed = True
    return s


def _unwrap(s: str) -> str:
    """Strip \\boxed{...}, \\text{...}, \\mathbf{...} ... when one of them wraps the whole string."""
    changed = True
    while changed:
        changed = False
        s = strip_delimiters(s)
        for w in _WRAPPERS:
            if s.startswith(w + "{") and s.endswith("}") and _matching_braces(s, 0).get(len(w)) == len(s) - 1:
                s = s[len(w) + 1 : -1].strip()
                changed = True
    return s


def as_integer(answer: str) -> int | None:
    """The integer an answer writes plainly ("025", "1,000", "\\text{25}", "25^\\circ", "n = 25"), else None.

    Anything that needs arithmetic to become an integer ("\\frac{50}{2}", "5^2") is left to the verifier.
    """
    if len(answer) > _MAX_INTEGER_CHARS:
        return None  # no plainly written integer is this long; also keeps the regexes below cheap
    s = _SPACING.sub("", _unwrap(answer)).replace("{,}", ",").strip().removesuffix(".").strip()
    s = _ASSIGNMENT.sub("", s)
    s = _UNIT_SUFFIX.sub("", s).strip()
    s = _unwrap(s)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if _INTEGER.fullmatch(s):
        return int(s.split(".")[0])
    return None
