"""String primitives of TeX in answers and worked solutions: braces, math delimiters, boxes, lines, and whether a
text was cut off. Shared by answer extraction (``eval.extract``) and problem-set preparation (a MATH solution's
answer is its last box).

All linear in the length of the text; no verifier.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
MATH_TOKEN = re.compile(r"\\\$|\$\$|\$|\\\[|\\\]|\\\(|\\\)")  # an escaped dollar, then the math delimiters
CLOSER = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}
DISPLAY = ("$$", "\\[")  # delimiters whose math may span lines
CONTEXT_CHARS = 2000  # how far a math block may reach
BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN = re.compile(r"[^\s$]+")
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# What a value cannot end with when it is complete: an operator, a relation, an opening bracket, or a command that
# still waits for its argument ("\frac", "\sqrt", "\left")
_OPEN_END = re.compile(
    r"(?:[-+*/^_=<>({\[&]|\\(?:cdot|times|div|pm|mp|leq?|geq?|neq|cup|cap|in|to|left|right|[dtc]?frac|binom|sqrt|"
    r"text[a-z]*|math[a-z]*|boxed|fbox|overline|operatorname))\s*$"
)
_TWO_ARGUMENTS = re.compile(r"\\(?:[dtc]?frac|binom)(?![A-Za-z])")
_BRACKETS = re.compile(r"\\[{}]|\\.|[()\[\]]", re.DOTALL)  # escaped braces count; other escapes are skipped
CLOSING_TAG = re.compile(r"</[A-Za-z_]+\s*>$")  # "</answer>" closing a tagged reply: markup, not content
_TAG_CHARS = 40  # how far back a closing tag is looked for
_MARKUP = frozenset(" \t\n\r\"'”’*_`)]")  # closing quotes, brackets and markdown after a sentence's end
_SENTENCE_ENDS = (".", "!", "?", "$", "\\]", "\\)")
# What follows a dollar sign that opens no math but prices something ("The total cost is $694.", "$57,500 a year"): an
# amount, then prose without math (no command, brace, script or "=")
_CURRENCY = re.compile(r"\d[\d,]*(?:\.\d+)?[^\\{}^_=$]*")


def matching_braces(text: str, start: int) -> dict[int, int]:
    """Position of each unescaped '{' from ``start`` on -> its matching '}' (one linear pass)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for m in BRACE_OR_ESCAPE.finditer(text, start):
        token = m.group(0)
        if token == "{":
            stack.append(m.start())
        elif token == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


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


def boxes_from_last(text: str) -> Iterator[tuple[int, str | None, int]]:
    """(start, content, end) of every \\boxed{} / \\fbox{}, last first; content None for a box that never
    closes (its end is then where its content begins)."""
    starts = list(BOX.finditer(text))
    if not starts:
        return
    closing = matching_braces(text, starts[0].start())
    for m in reversed(starts):
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            end = closing.get(i)
            yield (m.start(), None, i + 1) if end is None else (m.start(), text[i + 1 : end], end + 1)
        elif token := _TOKEN.match(text, i):  # "\boxed 25": the TeX form without braces takes the next token
            yield m.start(), token.group(0), token.end()


def last_box(text: str) -> tuple[int, str, int] | None:
    """(start, content without outer math delimiters, end) of the last non-empty, balanced \\boxed{} (or
    \\fbox{}) of ``text``, or None."""
    for start, content, end in boxes_from_last(text):
        if content is not None and content.strip():
            return start, strip_delimiters(content), end
    return None


def math_pieces(s: str) -> tuple[list[tuple[bool, str]], str | None]:
    """``s`` split into (is_math, text) pieces, and the delimiter left open at its end (None if all closed)."""
    pieces: list[tuple[bool, str]] = []
    opened, begin = None, 0
    for m in MATH_TOKEN.finditer(s):
        token = m.group(0)
        if token == "\\$":
            continue
        if opened is None and token in CLOSER:
            pieces.append((False, s[begin : m.start()]))
            opened, begin = token, m.end()
        elif opened is not None and token == CLOSER[opened]:
            pieces.append((True, s[begin : m.start()]))
            opened, begin = None, m.end()
    pieces.append((opened is not None, s[begin:]))
    return pieces, opened


def line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return end if end >= 0 else len(text)


def paragraph_end(text: str, start: int) -> int:
    """The next blank line, or the end of the text; looked for only as far as a math block can reach."""
    limit = start + CONTEXT_CHARS
    end = text.find("\n\n", start, limit)
    return end if end >= 0 else min(limit, len(text))


def _brace_depth(s: str) -> int:
    depth = 0
    for m in BRACE_OR_ESCAPE.finditer(s):
        depth = max(depth + {"{": 1, "}": -1}.get(m.group(0), 0), 0)
    return depth


def _missing_argument(s: str) -> bool:
    """Whether the last \\frac / \\binom of ``s`` has fewer than its two arguments (a group or one character)."""
    starts = [m.end() for m in _TWO_ARGUMENTS.finditer(s)]
    if not starts:
        return False
    closing = matching_braces(s, starts[-1])
    i = starts[-1]
    for _ in range(2):
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            return True
        if s[i] != "{":
            i += 1
        elif (end := closing.get(i)) is None:
            return True
        else:
            i = end + 1
    return False


def cut_off(value: str) -> bool:
    """Whether a value that ends the completion was cut off by the token limit, not finished.

    Cut off: a brace, bracket or parenthesis still open, an operator or argument-taking command at its end, a
    \\frac short of an argument, or nothing at all. A closing math delimiter alone may be missing: a model that
    copies the template's ``$Answer`` literally writes ``Answer: $42`` and stops, and ``42`` is complete."""
    pieces, opened = math_pieces(value)
    body = pieces[-1][1] if opened is not None else value
    if not body.strip() or _brace_depth(value) > 0 or _OPEN_END.search(body) or _missing_argument(body):
        return True
    opens = closes = 0
    for m in _BRACKETS.finditer(body):
        token = m.group(0)
        opens += token in ("(", "[", "\\{")
        closes += token in (")", "]", "\\}")
    return opens > closes  # "[1, 2)" is an interval, "(1, 2" is not finished


def still_open(s: str) -> bool:
    """Whether ``s`` leaves a brace or a math delimiter open at its end. A dollar sign left over before an amount
    in prose ("The total cost is $694.") is a currency sign, not math left open."""
    if _brace_depth(s) > 0:
        return True
    pieces, opened = math_pieces(s)
    return opened is not None and not (opened == "$" and _CURRENCY.fullmatch(pieces[-1][1]))


def outside_math(text: str, pos: int) -> int:
    """The first position from ``pos`` on where no math is open, judged from the start of its line (inline math
    does not span lines; a display block opened on an earlier line is not seen). Linear in the line's length."""
    opened = None
    for m in MATH_TOKEN.finditer(text, text.rfind("\n", 0, pos) + 1):
        token = m.group(0)
        if token == "\\$":
            continue
        if opened is None and m.start() >= pos:
            return m.start()
        if opened is None and token in CLOSER:
            opened = token
        elif opened is not None and token == CLOSER[opened]:
            opened = None
            if m.end() >= pos:
                return m.end()
    return pos if opened is None else len(text)


def _end_of_content(text: str) -> tuple[int, bool]:
    """Where ``text`` ends less its closing quotes, brackets, markdown and closing tags ("\\]" and "\\)" are math,
    and stay), and whether a closing tag ("</answer>") was among them."""
    end, tagged = len(text), False
    while True:
        while end and text[end - 1] in _MARKUP and not (text[end - 1] in ")]" and text[end - 2 : end - 1] == "\\"):
            end -= 1
        start = max(0, end - _TAG_CHARS)
        if (tag := CLOSING_TAG.search(text[start:end])) is None:
            return end, tagged
        end, tagged = start + tag.start(), True


def finished(text: str) -> bool:
    """Whether a text ends the way a finished reply does: its last paragraph closes every brace and math delimiter,
    and its last line ends a sentence or a formula (".", "!", "?", "$", "\\]", "\\)", then perhaps closing quotes
    or markdown, or a closed "**bold**") or is closed by a tag ("= 181</answer>"). The token limit cuts a
    completion anywhere, mostly mid-sentence; it does not write a closing tag."""
    end, tagged = _end_of_content(text)
    body = text[:end]
    paragraph = body[body.rfind("\n\n") + 1 :]
    closed_bold = text[end:].lstrip().startswith("**") and paragraph.count("**") % 2 == 1
    ends = body.endswith(_SENTENCE_ENDS) or closed_bold or tagged  # a closing tag: the model ended its reply itself
    return bool(paragraph.strip()) and not still_open(paragraph) and ends
