"""Whether an answer writes a number too large to compute, so that math-verify never sees it.

sympy evaluates ``9^{9^{9^9}}`` exactly: it sets out to build an integer of about 10^369693099 digits, inside one
C call that no time limit can stop, and ``(10^6)!`` or ``\\frac{1}{2^{10^6}}`` cost seconds. No AIME or MATH
answer has more than a few hundred digits. :func:`too_large` bounds, without computing anything, the number of
digits of every numeric part of an answer (numbers, ``+ - * / \\cdot \\times``, powers, factorials, ``\\frac``,
``\\sqrt``, ``\\binom``, groups); an answer with a part beyond :data:`MAX_DIGITS` is compared as written instead
(``grading``, :func:`as_written`). Letters and other commands are opaque: ``x^{10^7}`` stays symbolic and goes to
math-verify, but ``x^{9^{9^9}}`` has an exponent too large to compute and does not.
"""

from __future__ import annotations

import math
import re

from dppo_bench.tex import strip_delimiters

MAX_DIGITS = 10_000  # far above any answer; far below what costs sympy a second (10^{10^5}: 0.14 s)
_MAX_DEPTH = 60  # groups nested deeper are not followed (no answer nests this deep; recursion stays bounded)
_TOKEN = re.compile(r"\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|\\.|\S")
_ADD = {"+", "-", "\\pm", "\\mp"}
_MUL = {"*", "\\cdot", "\\times"}
_DIV = {"/", "\\div"}
_OPEN = {"{": "}", "(": ")", "[": "]", "\\{": "\\}"}
_FRACTIONS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_TEXT = re.compile(r"\\(?:text[a-z]*|mathrm|operatorname|mbox)")
_LOG2 = math.log10(2)
_SPACING = re.compile(r"\s+|\\(?:left|right)(?![A-Za-z])|\\[,;:! ]")
_ONE_TOKEN_GROUP = re.compile(r"\{(\d+|[A-Za-z]|\\[A-Za-z]+)\}")  # "9^{9}" is "9^9"

Digits = float | None  # an upper bound on log10 of a value's magnitude; None: not a number (a letter, a set, ...)


def too_large(answer: str) -> bool:
    """Whether a numeric part of ``answer`` has more than MAX_DIGITS digits (by an upper bound)."""
    parser = _Parser(answer)
    while parser.i < len(parser.tokens):
        parser.expression(0)
        parser.i += 1  # a separator ("=", ",", "<") or a stray closing bracket
    return parser.large


def as_written(answer: str) -> str:
    """An answer as written, to compare numbers too large to compute: spacing, ``\\left``/``\\right``,
    ``\\dfrac``/``\\tfrac`` and braces around one token (``9^{9^{9^{9}}}`` is ``9^{9^{9^9}}``) do not count."""
    s = _SPACING.sub("", strip_delimiters(answer)).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _ONE_TOKEN_GROUP.sub(r"\1", s)


class _Parser:
    """Recursive descent over TeX math tokens, in digits (log10 of magnitudes); never raises, linear time."""

    def __init__(self, text: str):
        self.tokens = _TOKEN.findall(text)
        self.i = 0
        self.large = False

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def note(self, digits: Digits) -> Digits:
        if digits is not None and digits > MAX_DIGITS:
            self.large = True
        return digits

    def expression(self, depth: int, closer: str | None = None) -> Digits:
        value = self.term(depth, closer)
        while self.peek() in _ADD:
            self.i += 1
            right = self.term(depth, closer)
            value = None if value is None or right is None else self.note(max(value, right) + _LOG2)
        return value

    def term(self, depth: int, closer: str | None) -> Digits:
        value = self.power(depth, closer)
        while (token := self.peek()) is not None and token not in (closer, "\\right") and token not in _ADD:
            if token in _MUL or token in _DIV:
                self.i += 1
            elif not self.starts_operand(token):
                break
            right = self.power(depth, closer)
            if token in _DIV:
                continue  # a quotient is no larger than its numerator, for these purposes
            value = None if value is None or right is None else self.note(value + right)
        return value

    def starts_operand(self, token: str) -> bool:
        return token in _OPEN or token[0].isdecimal() or token[0] == "." or token[0].isalpha() or token[0] == "\\"

    def power(self, depth: int, closer: str | None) -> Digits:
        while self.peek() in ("-", "+"):
            self.i += 1
        value = self.atom(depth, closer)
        while (token := self.peek()) in ("^", "!", "_"):
            self.i += 1
            if token == "_":
                self.atom(depth + 1, None, parse=False)  # a subscript names; it is not evaluated
            elif token == "!":
                value = self.note(_factorial(value))
            else:
                exponents = [self.atom(depth + 1, None)]
                while self.peek() == "^":  # "9^9^9" (not TeX): read as 9^(9^9), the larger reading
                    self.i += 1
                    exponents.append(self.atom(depth + 1, None))
                exponent = exponents.pop()
                while exponents:
                    exponent = self.note(_power(exponents.pop(), exponent))
                value = self.note(_power(value, exponent))
        return value

    def atom(self, depth: int, closer: str | None, parse: bool = True) -> Digits:
        token = self.peek()
        if token is None or token in (closer, "\\right"):
            return None
        self.i += 1
        if token in _OPEN or token == "\\left":
            if token == "\\left":
                token = self.tokens[self.i] if self.i < len(self.tokens) else "("
                self.i += 1
            end = _OPEN.get(token, ")")
            return self.group(depth, end, parse)
        if token[0].isdecimal() or token[0] == ".":
            return self.note(_digits(token))
        if token in _FRACTIONS:
            numerator, _ = self.atom(depth + 1, None, parse), self.atom(depth + 1, None, parse)
            return numerator
        if token == "\\sqrt":
            if self.peek() == "[":
                self.i += 1
                self.group(depth, "]", parse)
            radicand = self.atom(depth + 1, None, parse)
            return None if radicand is None else radicand / 2
        if token == "\\binom":
            n, k = self.atom(depth + 1, None, parse), self.atom(depth + 1, None, parse)
            if n is None:
                return None
            return self.note(min(_LOG2 * _value(n), math.inf if k is None else _value(k) * n))  # 2^n, n^k
        if _TEXT.fullmatch(token) and self.peek() == "{":
            self.i += 1
            self.group(depth, "}", parse=False)
        return None  # a letter, a constant, a command: not a number here

    def group(self, depth: int, end: str, parse: bool) -> Digits:
        """The expression up to ``end`` (consumed); skipped, brackets matched, when too deep or not parsed."""
        if not parse or depth >= _MAX_DEPTH:
            self.skip_to(end)
            return None
        value = self.expression(depth + 1, end)
        while (token := self.peek()) is not None and token != end and token not in ("\\right",):
            self.i += 1  # "=", "," inside the group: what follows is checked, the group is not one number
            self.expression(depth + 1, end)
            value = None
        if self.peek() == "\\right":
            self.i += 2  # "\right" and its delimiter
        elif self.peek() == end:
            self.i += 1
        return value

    def skip_to(self, end: str) -> None:
        opened = 0
        while (token := self.peek()) is not None:
            self.i += 1
            if token == end and opened == 0:
                return
            opened += token in _OPEN
            opened -= token in _OPEN.values()


def _digits(number: str) -> float:
    """log10 of a written number's magnitude (0 for magnitudes up to 1), without converting all of it."""
    integer = number.split(".")[0].lstrip("0")
    if not integer:
        return 0.0
    return math.log10(float(integer[:15])) + max(0, len(integer) - 15)


def _value(digits: float) -> float:
    """An upper bound on a value from its digits (inf beyond floats)."""
    return math.inf if digits > 300 else 10.0**digits


def _power(base: Digits, exponent: Digits) -> Digits:
    if base is None or exponent is None:
        return None
    return _value(exponent) * max(base, _LOG2)  # |b| * log10|a|: a negative power has as many digits


def _factorial(n: Digits) -> Digits:
    if n is None:
        return None
    value = _value(n)
    return value * math.log10(max(value, 2.0))
