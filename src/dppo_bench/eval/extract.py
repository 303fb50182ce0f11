"""Final-answer extraction from a model completion: pure string work, linear time, no verifier.

The rules, in order (documented with their reasons in the README; cases in ``tests/cases/grading.json``):

1. **Region.** Only the text after the last ``</think>`` is searched: an answer inside the reasoning is a draft.
   A completion that stops inside its reasoning has no answer, whatever the reasoning says: one that opened
   ``<think>`` and never closed it, or, when the prompt template opens the reasoning block itself
   (``opens_reasoning``), one without ``</think>``.
2. **Last marker wins.** The candidates are the last non-empty ``\\boxed{...}`` (or ``\\fbox{...}``) and the last
   ``Answer:`` marker (case-insensitive, markdown allowed: ``**Answer:** 25``, ``\\text{Answer: } 25`` inside
   display math, or a bare heading ``### Answer`` / ``**Final Answer**`` with the value on the lines below).
   Whichever starts later is the answer, so ``Answer: \\boxed{25}`` yields the box content.
3. **The value of an Answer marker** is the rest of its line or, when that is empty, the next non-blank line; a
   display block opened there (``\\[ ... \\]``, ``$$ ... $$``) is read to its end. Inside math (``\\[Answer: 5\\]``)
   the value ends at the closing delimiter. On a line that mixes prose and math, the math is the value: the first
   math when it follows the marker directly (``$7$ (without quotes)``), else the last (``The smallest such value is
   $9$.``). Plain text loses a trailing remark in parentheses, a sentence's lead-in (``... is 9``), and words after
   a number (``3 cm``). A final period, a ``name =`` in front (``x = \\dfrac{3}{7}``) and spacing are dropped.
4. **Cut off is unanswered.** A final answer that is still open when the completion ends (a ``\\boxed{`` or a
   brace or math delimiter on the Answer line that never closes, or an ``Answer:`` with nothing after it) was cut
   off by the token limit: the completion has no answer, and no earlier draft stands in for it.
5. **Fallback.** With neither marker, the last "the answer is X" / "final answer is X" phrase, up to the end of
   its sentence.
6. **Nothing else.** There is deliberately no "last number in the text" fallback: it rewards unfinished or
   unformatted completions, and it turns a completion with no answer into a lottery over the numbers it mentions.

How an extracted answer is then read (as an integer, or by math-verify) is ``values``'s concern.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

THINK_OPEN, THINK_END = "<think>", "</think>"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
_ANSWER_WORD = re.compile(r"(?i)\banswer")  # the slow path of _answer_words
_LINE_TAIL = re.compile(r"[ \t]*(?:\*\*|__)?[ \t]*[:：]")  # after "answer": "Answer:", "**Answer**:", "Answer :"
_HEADING_HEAD = re.compile(r"[ \t#>*_]*(?:final[ \t]+)?", re.IGNORECASE)  # before a bare heading "Answer"
_HEADING_TAIL = re.compile(r"[ \t]*(?:\*\*|__)?[ \t]*(?=\n|$)")  # after it: nothing else on the line
_BLANK_LINES = re.compile(r"(?:[ \t]*(?:\*\*|__)?[ \t]*\n)+")  # "Answer:" then the answer on a line of its own
_PHRASE_TAIL = re.compile(r"[ \t]+is[ \t]*:?[ \t]*", re.IGNORECASE)  # after "answer": " is", " is:"
_PHRASE_HEAD = ("the ", "final ")  # before "answer"
_SENTENCE_END = re.compile(r"\.(?=\s|$)|,\s+(?=[A-Za-z]{2})")  # "... is 25. Done", "... is 25, so we"
_TOKEN = re.compile(r"[^\s$]+")
_MATH_TOKEN = re.compile(r"\\\$|\$\$|\$|\\\[|\\\]|\\\(|\\\)")  # an escaped dollar, then the math delimiters
_CLOSER = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}
_DISPLAY = ("$$", "\\[")  # delimiters whose math may span lines
_CONTEXT_CHARS = 2000  # how far back a display block holding an Answer marker may have opened
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_EDGE_SPACING = re.compile(r"^(?:\s|\\[,!;: ]|~|\\q?quad\b|\\displaystyle\b)+|(?:\s|\\[,!;: ]|~|\\q?quad\b)+$")
_REMARK = re.compile(r"\s*\(\s*[A-Za-z]{2,}[A-Za-z0-9 ,.'-]*\)[\s.]*$")  # "7 (without quotes)", "12 (square units)"
_LEAD_IN = re.compile(r"^.*\b(?:is|are|equals)\s+", re.IGNORECASE | re.DOTALL)  # "The smallest value is 9"
_VERB = re.compile(r"\b(?:is|are|equals|gives|becomes)\b|=", re.IGNORECASE)  # "$f(3)$ is $12$": the value is last
_VALUE_LIKE = re.compile(r"[\d\\$]|^\W*\S+(?:\s+\S+)?\W*$")  # under a bare heading: math, a number or 1-2 words
_WORDS_AFTER_VALUE = re.compile(r"(?<=[\d})\]])(?:\s+[A-Za-z]{2,}\.?)+$")  # "3 cm", "12 square units"
NAME_EQUALS = re.compile(r"^[A-Za-z](?:_\{?\w+\}?|')?\s*=(?!=)\s*(?=\S)")  # "x = ", "a_1 = ", "f' = "
_TRAILING_PUNCTUATION = re.compile(r"[\s.,;]+$")
_MAX_CLEANED_CHARS = 1000  # longer values go to the verifier as they are: keeps the prose regexes linear
_MAX_MARKERS = 16  # Answer markers tried, last first, before giving up on finding a non-empty value


@dataclass(frozen=True)
class Extraction:
    text: str  # the answer as written, outer math delimiters and surrounding prose removed
    rule: str  # "boxed" | "answer_line" | "answer_phrase"


Candidate = tuple[int, Extraction | None]  # (where the answer starts, the answer or None when it was cut off)


def extract_answer(completion: str, opens_reasoning: bool = False) -> Extraction | None:
    """The completion's final answer by the rules above, or None when it states none.

    ``opens_reasoning``: the prompt template opened a reasoning block, so the completion starts inside it."""
    text = answer_region(completion, opens_reasoning)
    if text is None:
        return None
    words = _answer_words(text)
    candidates = [c for c in (_final_box(text), _final_answer_line(text, words)) if c is not None]
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    return _answer_phrase(text, words)


def answer_region(completion: str, opens_reasoning: bool = False) -> str | None:
    """The text after the reasoning, or None when the completion stops inside its reasoning (rule 1)."""
    _, closed, after = completion.rpartition(THINK_END)
    if closed:
        return None if THINK_OPEN in after else after
    if opens_reasoning or THINK_OPEN in completion:
        return None
    return completion


# -- boxes ---------------------------------------------------------------------------------------------------
def _boxes_from_last(text: str) -> Iterator[tuple[int, str | None]]:
    """(start, content) of every \\boxed{} / \\fbox{}, last first; content None for a box that never closes."""
    starts = list(_BOX.finditer(text))
    if not starts:
        return
    closing = matching_braces(text, starts[0].start())
    for m in reversed(starts):
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            end = closing.get(i)
            yield m.start(), None if end is None else text[i + 1 : end]
        elif token := _TOKEN.match(text, i):  # "\boxed 25": the TeX form without braces takes the next token
            yield m.start(), token.group(0)


def last_box(text: str) -> tuple[int, Extraction] | None:
    """(position, content) of the last non-empty, balanced \\boxed{} (or \\fbox{}) of ``text``, or None."""
    for start, content in _boxes_from_last(text):
        if content is not None and content.strip():
            return start, Extraction(strip_delimiters(content), "boxed")
    return None


def _final_box(text: str) -> Candidate | None:
    """The last non-empty box; None as its answer when it never closes (rule 4). An empty box (an echo of the
    prompt's "\\boxed{}") states nothing: the box before it stands."""
    for start, content in _boxes_from_last(text):
        if content is None:
            return start, None
        if content.strip():
            return start, Extraction(strip_delimiters(content), "boxed")
    return None


def matching_braces(text: str, start: int) -> dict[int, int]:
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


def _still_open(s: str) -> bool:
    """Whether ``s`` leaves a brace or a math delimiter open at its end."""
    depth = 0
    for m in _BRACE_OR_ESCAPE.finditer(s):
        depth += {"{": 1, "}": -1}.get(m.group(0), 0)
        depth = max(depth, 0)
    return depth > 0 or _math_pieces(s)[1] is not None


# -- Answer markers ------------------------------------------------------------------------------------------
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


def _marker_end(text: str, start: int) -> tuple[int, bool] | None:
    """(where the value of an Answer marker at ``start`` begins, whether the marker is a bare heading without a
    colon), or None when the word is not a marker."""
    word_end = start + len("answer")
    if m := _LINE_TAIL.match(text, word_end):
        return m.end(), False
    line_start = text.rfind("\n", 0, start) + 1
    if _HEADING_HEAD.fullmatch(text, line_start, start) and (m := _HEADING_TAIL.match(text, word_end)):
        return m.end(), True
    return None


def _final_answer_line(text: str, words: list[int]) -> Candidate | None:
    for start in words[:_MAX_MARKERS]:
        marker = _marker_end(text, start)
        if marker is None:
            continue
        after, bare_heading = marker
        span = _value_span(text, start, after)
        if span is None:
            return start, None  # cut off (rule 4)
        begin, end, in_math = span
        if bare_heading and not _VALUE_LIKE.search(text[begin:end].strip()):
            continue  # "**Final Answer**" over a closing sentence ("We are done."): not a stated value
        value = _clean_math(text[begin:end]) if in_math else _value_of_line(text[begin:end])
        if value:
            return start, Extraction(value, "answer_line")
    return None


def _value_span(text: str, start: int, after: int) -> tuple[int, int, bool] | None:
    """(begin, end, inside math) of the value of the marker at ``start``; None when it was cut off (rule 4)."""
    last = len(text.rstrip())
    opener = _math_open_at(text, start)
    if opener is not None:  # "\\[Answer: 5\\]", "$$\\text{Answer: } (3, -2)$$": the value ends with the math
        close = text.find(_CLOSER[opener], after, _paragraph_end(text, after))
        if close >= 0:
            return after, close, True
        end = _line_end(text, after)
        return None if end >= last else (after, end, True)
    end = _line_end(text, after)
    if not _clean_markdown(text[after:end]):  # a bare heading: the value stands on the next non-blank line
        blank = _BLANK_LINES.match(text, after)
        if blank is None or blank.end() >= last:
            return None
        after, end = blank.end(), _line_end(text, blank.end())
    opened = _math_pieces(text[after:end])[1]
    if opened in _DISPLAY:  # a display block opened on the line runs to its closing delimiter
        paragraph_end = _paragraph_end(text, end)
        close = text.find(_CLOSER[opened], end, paragraph_end)
        if close >= 0:
            end = close + len(_CLOSER[opened])
        elif paragraph_end >= last:
            return None
    if end >= last and _still_open(text[after:end]):
        return None
    return after, end, False


def _math_open_at(text: str, pos: int) -> str | None:
    """The math delimiter open at ``pos``: a display block opened earlier in the paragraph, or inline math
    opened earlier on the line (a stray dollar in earlier prose does not carry over)."""
    begin = max(text.rfind("\n\n", max(0, pos - _CONTEXT_CHARS), pos), pos - _CONTEXT_CHARS, 0)
    line_start = text.rfind("\n", 0, pos) + 1
    opened = None
    for m in _MATH_TOKEN.finditer(text, begin, pos):
        token = m.group(0)
        if opened is None:
            if token in _CLOSER and (token in _DISPLAY or m.start() >= line_start):
                opened = token
        elif token == _CLOSER[opened]:
            opened = None
    return opened


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return end if end >= 0 else len(text)


def _paragraph_end(text: str, start: int) -> int:
    """The next blank line, or the end of the text; looked for only as far as a math block can reach."""
    limit = start + _CONTEXT_CHARS
    end = text.find("\n\n", start, limit)
    return end if end >= 0 else min(limit, len(text))


def _math_pieces(s: str) -> tuple[list[tuple[bool, str]], str | None]:
    """``s`` split into (is_math, text) pieces, and the delimiter left open at its end (None if all closed)."""
    pieces: list[tuple[bool, str]] = []
    opened, begin = None, 0
    for m in _MATH_TOKEN.finditer(s):
        token = m.group(0)
        if token == "\\$":
            continue
        if opened is None and token in _CLOSER:
            pieces.append((False, s[begin : m.start()]))
            opened, begin = token, m.end()
        elif opened is not None and token == _CLOSER[opened]:
            pieces.append((True, s[begin : m.start()]))
            opened, begin = None, m.end()
    pieces.append((opened is not None, s[begin:]))
    return pieces, opened


def _value_of_line(raw: str) -> str:
    """The value on an Answer line in prose: its math if it has any (rule 3), else its cleaned text."""
    pieces, _ = _math_pieces(raw)
    maths = [i for i, (is_math, part) in enumerate(pieces) if is_math and part.strip()]
    if not maths:
        return _clean_text(raw)
    first, last = maths[0], maths[-1]
    follows_marker = not any(_clean_markdown(part) for _, part in pieces[:first])
    value_named_later = any(_VERB.search(part) for is_math, part in pieces[first:last] if not is_math)
    return _clean_math(pieces[first if follows_marker and not value_named_later else last][1])


def _clean_text(s: str) -> str:
    s = _clean_markdown(s)
    if len(s) > _MAX_CLEANED_CHARS:
        return s
    s = _REMARK.sub("", s)
    s = _LEAD_IN.sub("", s)  # a sentence: "The smallest such value is 9."
    s = _TRAILING_PUNCTUATION.sub("", s)
    s = _WORDS_AFTER_VALUE.sub("", s)
    return _clean_math(s)


def _clean_math(s: str) -> str:
    if len(s) > _MAX_CLEANED_CHARS:
        return strip_delimiters(s)
    s = _drop_unmatched_closing(s).strip().strip("*`").strip()
    s = strip_delimiters(_TRAILING_PUNCTUATION.sub("", s))
    s = _EDGE_SPACING.sub("", s)
    s = _REMARK.sub("", s)
    s = _TRAILING_PUNCTUATION.sub("", s)
    if s.count("=") == 1:
        s = NAME_EQUALS.sub("", s)
    return s.strip()


def _drop_unmatched_closing(s: str) -> str:
    """Remove each '}' that closes nothing in ``s`` (it closed a ``\\text{Answer:`` before the value)."""
    depth, drop = 0, []
    for m in _BRACE_OR_ESCAPE.finditer(s):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            if depth == 0:
                drop.append(m.start())
            depth = max(depth - 1, 0)
    for i in reversed(drop):
        s = s[:i] + s[i + 1 :]
    return s


def _answer_phrase(text: str, words: list[int]) -> Extraction | None:
    for start in words:
        m = _PHRASE_TAIL.match(text, start + len("answer"))
        if m and any(text[max(0, start - len(h)) : start].lower() == h for h in _PHRASE_HEAD):
            rest = text[m.end() : _line_end(text, m.end())]
            sentence = _SENTENCE_END.split(rest, maxsplit=1)[0]
            if m.end() + len(sentence) >= len(text.rstrip()) and _still_open(sentence):
                return None  # cut off (rule 4)
            content = _value_of_line(sentence)
            if content:
                return Extraction(content, "answer_phrase")
    return None


def _clean_markdown(s: str) -> str:
    s = s.strip().strip("*_`").strip()
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
