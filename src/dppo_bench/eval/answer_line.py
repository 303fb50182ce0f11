"""Answer markers and answer phrases: where their value is, and how it is read out of the prose around it.

Rules 2 to 5 of ``extract`` for ``Answer:`` lines, ``<answer>`` tags and "the answer is X" phrases; pure string
work, linear time.
"""

from __future__ import annotations

import re
from typing import Literal

from dppo_bench.tex import (
    BRACE_OR_ESCAPE,
    CLOSER,
    CONTEXT_CHARS,
    DISPLAY,
    MATH_TOKEN,
    cut_off,
    line_end,
    math_pieces,
    paragraph_end,
    strip_delimiters,
)

_ANSWER_WORD = re.compile(r"(?i)\banswer")  # the slow path of answer_words
_LINE_TAIL = re.compile(r"[ \t]*(?:\*\*|__)?[ \t]*[:：]")  # after "answer": "Answer:", "**Answer**:", "Answer :"
_HEADING_HEAD = re.compile(r"[ \t#>*_]*(?:final[ \t]+)?", re.IGNORECASE)  # before a bare heading "Answer"
_HEADING_TAIL = re.compile(r"[ \t]*(?:\*\*|__)?[ \t]*(?=\n|$)")  # after it: nothing else on the line
_BLANK_LINES = re.compile(r"(?:[ \t]*(?:\*\*|__)?[ \t]*\n)+")  # "Answer:" then the answer on a line of its own
_PHRASE_TAIL = re.compile(r"[ \t]+is[ \t]*:?[ \t]*", re.IGNORECASE)  # after "answer": " is", " is:"
_PHRASE_HEAD = ("the ", "final ")  # before "answer"
_SENTENCE_END = re.compile(r"\.(?=\s|$)|,\s+(?=[A-Za-z]{2})")  # "... is 25. Done", "... is 25, so we"
_EDGE_SPACING = re.compile(r"^(?:\s|\\[,!;: ]|~|\\q?quad\b|\\displaystyle\b)+|(?:\s|\\[,!;: ]|~|\\q?quad\b)+$")
_REMARK = re.compile(r"\s*\(\s*[A-Za-z]{2,}[A-Za-z0-9 ,.'-]*\)[\s.]*$")  # "7 (without quotes)", "12 (square units)"
_LEAD_IN = re.compile(r"^.*\b(?:is|are|equals)\s+", re.IGNORECASE | re.DOTALL)  # "The smallest value is 9"
_VERB = re.compile(r"\b(?:is|are|equals|gives|becomes)\b|=", re.IGNORECASE)  # "$f(3)$ is $12$": the value is last
# "$y$ equals 9", "the number of marbles, $m$, is 14": right after math that names a quantity (letters, no "="),
# a verb, then a value in plain text
_VERB_THEN_VALUE = re.compile(
    r"[ \t]*,?[ \t]*(?:(?:is|are|equals)\b[ \t]*:?|=)[ \t]*"
    r"(?=[-+−]?[ \t]*(?:\d|\.\d|[(\[]|\\(?:[{]|[dt]?frac(?![A-Za-z])|sqrt(?![A-Za-z]))))",
    re.I,
)
_COMMAND = re.compile(r"\\[A-Za-z]+")
_VALUE_LIKE = re.compile(r"[\d\\$]|^\W*\S+(?:\s+\S+)?\W*$")  # under a bare heading: math, a number or 1-2 words
# "3 cm", "12 square units", "15 cm²"
_WORDS_AFTER_VALUE = re.compile(r"(?<=[\d})\]])(?:\s+(?:[A-Za-z]{2,}[²³]?|[A-Za-z][²³])\.?)+$")
NAME_EQUALS = re.compile(r"^[A-Za-z](?:_\{?\w+\}?|')?\s*=(?!=)\s*(?=\S)")  # "x = ", "a_1 = ", "f' = "
_TRAILING_PUNCTUATION = re.compile(r"[\s.,;]+$")
_SQUASH = re.compile(r"\s+|\$|\*\*|\\[()\[\]]")  # what two copies of one line may differ in
_MAX_CLEANED_CHARS = 1000  # longer values go to the verifier as they are: keeps the prose regexes linear
_MAX_MARKERS = 16  # Answer markers tried, last first, before giving up on finding a non-empty value

_TAG_CLOSE = re.compile(r"</answer\s*>", re.IGNORECASE)  # the end of an <answer> tag's content
MarkerKind = Literal["colon", "heading", "tag"]
Found = tuple[int, str | None]  # (where the answer starts, its value; None when it was cut off)


def answer_words(text: str) -> list[int]:
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


def repeated(cut: str, copies: list[str]) -> bool:
    """Whether a final answer cut off as ``cut`` was one more copy in a repetition loop: the two answers before it
    (``copies``, last first, as written) are the same, and what was written of it begins like them."""
    if len(copies) < 2:
        return False
    first, second, cut = (_SQUASH.sub("", s) for s in (copies[0], copies[1], cut))
    return first == second and first.startswith(cut)


def marker_end(text: str, start: int) -> tuple[int, MarkerKind] | None:
    """(where the value of an Answer marker at ``start`` begins, the kind of marker: "colon" for ``Answer:``,
    "heading" for a bare heading without a colon, "tag" for an ``<answer>`` tag), or None when the word is not a
    marker."""
    word_end = start + len("answer")
    if start > 0 and text[start - 1] == "<" and text.startswith(">", word_end):
        return word_end + 1, "tag"
    if m := _LINE_TAIL.match(text, word_end):
        return m.end(), "colon"
    line_start = text.rfind("\n", 0, start) + 1
    if _HEADING_HEAD.fullmatch(text, line_start, start) and (m := _HEADING_TAIL.match(text, word_end)):
        return m.end(), "heading"
    return None


def final_answer_line(text: str, words: list[int]) -> Found | None:
    """The last Answer marker with a value (rule 3), or its start and None when it was cut off (rule 4), unless
    it ends the completion as a copy of a line the model was repeating, cut short: then the last complete copy
    (rule 4's exception; "Answer: 20" after two "Answer: 204" was cut off too, though it looks complete)."""
    last = len(text.rstrip())
    final: tuple[int, str, str | None] | None = None  # (start, as written, value or None) of a marker ending the text
    copies: list[tuple[str, str]] = []  # (line as written, value) of the complete markers before it, last first
    for start in words[:_MAX_MARKERS]:
        marker = marker_end(text, start)
        if marker is None:
            continue
        after, kind = marker
        span = _tag_span(text, start, after) if kind == "tag" else _value_span(text, start, after)
        if span is None:
            if final is None and not copies:
                final = start, text[after:], None
                continue
            break
        begin, end, in_math = span
        if kind == "heading" and not _VALUE_LIKE.search(text[begin:end].strip()):
            continue  # "**Final Answer**" over a closing sentence ("We are done."): not a stated value
        value = clean_math(text[begin:end]) if in_math else value_of_line(text[begin:end])
        if not value:
            continue
        if final is None:
            if end < last:
                return start, value
            final = start, text[begin:end], value
            continue
        copies.append((text[begin:end], value))
        if len(copies) == 2:
            break
    if final is None:
        return None
    start, written, value = final
    return start, copies[0][1] if repeated(written, [line for line, _ in copies]) else value


def _tag_span(text: str, start: int, after: int) -> tuple[int, int, bool] | None:
    """(begin, end, inside math) of an ``<answer>`` tag's content: up to ``</answer>``, or, left open (generation
    stopped at the closing tag, which many setups drop), as an Answer line's value; None when that was cut off."""
    if close := _TAG_CLOSE.search(text, after):
        return after, close.start(), False
    return _value_span(text, start, after)


def _value_span(text: str, start: int, after: int) -> tuple[int, int, bool] | None:
    """(begin, end, inside math) of the value of the marker at ``start``; None when it was cut off (rule 4)."""
    last = len(text.rstrip())
    opener = _math_open_at(text, start)
    if opener is not None:  # "\\[Answer: 5\\]", "$$\\text{Answer: } (3, -2)$$": the value ends with the math
        close = text.find(CLOSER[opener], after, paragraph_end(text, after))
        if close >= 0:
            return after, close, True
        end = line_end(text, after)
        return None if end >= last and cut_off(text[after:end]) else (after, end, True)
    end = line_end(text, after)
    if close := _TAG_CLOSE.search(text, after, end):  # "Answer: 4</answer>": the tag closes the value
        end = close.start()
    if not _clean_markdown(text[after:end]):  # a bare heading: the value stands on the next non-blank line
        blank = _BLANK_LINES.match(text, after)
        if blank is None or blank.end() >= last:
            return None
        after, end = blank.end(), line_end(text, blank.end())
    opened = math_pieces(text[after:end])[1]
    if opened in DISPLAY:  # a display block opened on the line runs to its closing delimiter
        block_end = paragraph_end(text, end)
        close = text.find(CLOSER[opened], end, block_end)
        if close >= 0:
            end = close + len(CLOSER[opened])
        elif block_end >= last:
            end = len(text)  # open to the end of the completion: complete or cut off, as any last value
    if end >= last and cut_off(text[after:end]):
        return None
    return after, end, False


def _math_open_at(text: str, pos: int) -> str | None:
    """The math delimiter open at ``pos``: a display block opened earlier in the paragraph, or inline math
    opened earlier on the line (a stray dollar in earlier prose does not carry over)."""
    begin = max(text.rfind("\n\n", max(0, pos - CONTEXT_CHARS), pos), pos - CONTEXT_CHARS, 0)
    line_start = text.rfind("\n", 0, pos) + 1
    opened = None
    for m in MATH_TOKEN.finditer(text, begin, pos):
        token = m.group(0)
        if opened is None:
            if token in CLOSER and (token in DISPLAY or m.start() >= line_start):
                opened = token
        elif token == CLOSER[opened]:
            opened = None
    return opened


def value_of_line(raw: str) -> str:
    """The value on an Answer line in prose: its math if it has any (rule 3), else its cleaned text."""
    pieces, _ = math_pieces(raw)
    maths = [i for i, (is_math, part) in enumerate(pieces) if is_math and part.strip()]
    if not maths:
        return _clean_text(raw)
    first, last = maths[0], maths[-1]
    for i in maths:  # "$y$ equals 9.": the value, not the variable
        named, after = pieces[i][1], pieces[i + 1][1] if i + 1 < len(pieces) else ""
        if "=" not in named and re.search("[A-Za-z]", _COMMAND.sub("", named)) and (m := _VERB_THEN_VALUE.match(after)):
            return _clean_text(_SENTENCE_END.split(after[m.end() :], maxsplit=1)[0])
    follows_marker = not any(_clean_markdown(part) for _, part in pieces[:first])
    value_named_later = any(_VERB.search(part) for is_math, part in pieces[first:last] if not is_math)
    return clean_math(pieces[first if follows_marker and not value_named_later else last][1])


def _clean_text(s: str) -> str:
    s = _clean_markdown(s)
    if len(s) > _MAX_CLEANED_CHARS:
        return s
    s = _REMARK.sub("", s)
    s = _LEAD_IN.sub("", s)  # a sentence: "The smallest such value is 9."
    s = _TRAILING_PUNCTUATION.sub("", s)
    s = _WORDS_AFTER_VALUE.sub("", s)
    return clean_math(s)


def clean_math(s: str) -> str:
    """A value in math without what surrounds it: delimiters, spacing, a final period, a remark, ``x =``."""
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
    for m in BRACE_OR_ESCAPE.finditer(s):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            if depth == 0:
                drop.append(m.start())
            depth = max(depth - 1, 0)
    for i in reversed(drop):
        s = s[:i] + s[i + 1 :]
    return s


def answer_phrase(text: str, words: list[int]) -> Found | None:
    """The value of the last "the answer is X" / "final answer is X" phrase, to the end of its sentence (rule 5);
    None as the value when it was cut off."""
    for start in words:
        m = _PHRASE_TAIL.match(text, start + len("answer"))
        if m and any(text[max(0, start - len(h)) : start].lower() == h for h in _PHRASE_HEAD):
            rest = text[m.end() : line_end(text, m.end())]
            sentence = _SENTENCE_END.split(rest, maxsplit=1)[0]
            if m.end() + len(sentence) >= len(text.rstrip()) and cut_off(sentence):
                return start, None
            content = value_of_line(sentence)
            if content:
                return start, content
    return None


def _clean_markdown(s: str) -> str:
    s = s.strip().strip("*_`").strip()
    s = s.removesuffix(".").strip()
    return strip_delimiters(s)
