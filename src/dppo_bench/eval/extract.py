"""Final-answer extraction from a model completion: pure string work, linear time, no verifier.

The rules, in order (documented with their reasons in docs/evaluation.md; cases in ``tests/cases/grading.json``):

1. **Region.** Only the text after the last ``</think>`` is searched: an answer inside the reasoning is a draft.
   A completion that stops inside its reasoning has no answer, whatever the reasoning says: one that opened
   ``<think>`` and never closed it, or, when the prompt template opens the reasoning block itself
   (``opens_reasoning``), one without ``</think>``.
2. **Last marker wins.** The candidates are the last non-empty ``\\boxed{...}`` (or ``\\fbox{...}``) and the last
   ``Answer:`` marker (case-insensitive, markdown allowed: ``**Answer:** 25``, ``\\text{Answer: } 25`` inside
   display math, a bare heading ``### Answer`` / ``**Final Answer**`` with the value on the lines below, or an
   ``<answer>`` tag: the R1-Zero template's). Whichever starts later is the answer, so ``Answer: \\boxed{25}``
   yields the box content.
3. **The value of an Answer marker** is the rest of its line or, when that is empty, the next non-blank line; a
   display block opened there (``\\[ ... \\]``, ``$$ ... $$``) is read to its end. Inside math (``\\[Answer: 5\\]``)
   the value ends at the closing delimiter; a ``</answer>`` ends it too. An ``<answer>`` tag's value is its content
   (read as an Answer line's when the tag was left open). On a line that mixes prose and math, the math is
   the value: the first math when it follows the marker directly (``$7$ (without quotes)``), else the last (``The
   smallest such value is $9$.``), and a plain value a verb names after the math (``$y$ equals 9.``). Plain text
   loses a trailing remark in parentheses, a sentence's lead-in (``... is 9``), and words after a number (``3 cm``,
   ``15 cm²``). A final period, a ``name =`` in front (``x = \\dfrac{3}{7}``) and spacing are dropped.
4. **Cut off is unanswered.** A final answer that ends the completion unfinished (``tex.cut_off``: a ``\\boxed{``
   or a brace left open, an operator at its end, a ``\\frac`` short of an argument, an ``Answer:`` with nothing
   after it) was cut off by the token limit: the completion has no answer, and no earlier draft stands in for it.
   A closing ``$`` alone may be missing (``Answer: $42``: the template's ``$Answer`` copied literally). One
   exception: a repetition loop, where the two answers before the cut-off one are the same and it begins like
   them; the last complete copy is the answer.
5. **Phrase.** With neither marker, the last "the answer is X" / "final answer is X" phrase, up to the end of
   its sentence.
6. **The reasoning's closing box.** When the reply after ``</think>`` states no answer and was itself cut off
   (``tex.finished`` is false: the token limit hit the summary before it restated the answer), a box on the last
   line of the reasoning, just before ``</think>``, is the answer: the reasoning closed on it.
7. **math-verify's last resort.** A finished reply with no box, no marker and no phrase: the value math-verify's
   own unanchored extraction reads from its end (``last_resort``: the last math or number, as in "the area is 48
   square meters." or a last line ``$x = 12$``; ``tex.finished``: a closing ``</answer>`` may follow, and "$694."
   in prose is a price, not open math). An unfinished one has no answer: the token limit cut it, and its last
   number is whatever the model was computing.

How an extracted answer is then read (as an integer, or by math-verify) is ``values``'s concern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dppo_bench.eval.answer_line import answer_phrase, answer_words, clean_math, final_answer_line, marker_end, repeated
from dppo_bench.eval.last_resort import closing_value
from dppo_bench.tex import BOX, boxes_from_last, finished, last_box, strip_delimiters

THINK_OPEN, THINK_END = "<think>", "</think>"
_CLOSING_LINES = re.compile(r"[^\n]*+(?:\s|\$\$|\\\]|\\\))*+")  # the rest of a box's line, then lines closing math


@dataclass(frozen=True)
class Extraction:
    text: str  # the answer as written, outer math delimiters and surrounding prose removed
    rule: str  # "boxed" | "answer_line" | "answer_phrase" | "reasoning_box" | "last_resort"


Candidate = tuple[int, Extraction | None]  # (where the answer starts, the answer or None when it was cut off)


def extract_answer(completion: str, opens_reasoning: bool = False) -> Extraction | None:
    """The completion's final answer by the rules above, or None when it states none.

    ``opens_reasoning``: the prompt template opened a reasoning block, so the completion starts inside it."""
    text = answer_region(completion, opens_reasoning)
    if text is None:
        return None
    words = answer_words(text)
    candidates = [c for c in (_final_box(text), _as_candidate(final_answer_line(text, words), "answer_line")) if c]
    if candidates:
        found = max(candidates, key=lambda c: c[0])
    else:
        found = _as_candidate(answer_phrase(text, words), "answer_phrase")
    if found is not None and found[1] is not None:
        return found[1]
    if not finished(text):
        return _reasoning_box(completion)
    if found is None and not BOX.search(text) and not any(marker_end(text, w) for w in words):
        value = clean_math(closing_value(text) or "")
        return Extraction(value, "last_resort") if value else None
    return None


def _as_candidate(found: tuple[int, str | None] | None, rule: str) -> Candidate | None:
    if found is None:
        return None
    start, value = found
    return start, None if value is None else Extraction(value, rule)


def answer_region(completion: str, opens_reasoning: bool = False) -> str | None:
    """The text after the reasoning, or None when the completion stops inside its reasoning (rule 1)."""
    _, closed, after = completion.rpartition(THINK_END)
    if closed:
        return None if THINK_OPEN in after else after
    if opens_reasoning or THINK_OPEN in completion:
        return None
    return completion


def _reasoning_box(completion: str) -> Extraction | None:
    """The box on the last line of a closed reasoning block (rule 6), or None."""
    reasoning, closed, _ = completion.rpartition(THINK_END)
    if not closed:
        return None
    box = last_box(reasoning)
    if box is None or not _CLOSING_LINES.fullmatch(reasoning, box[2]):
        return None
    return Extraction(box[1], "reasoning_box")


def _final_box(text: str) -> Candidate | None:
    """The last non-empty box; None as its answer when it never closes (rule 4), unless it is the cut-off copy
    in a repetition loop. An empty box (an echo of the prompt's "\\boxed{}") states nothing: the box before it
    stands."""
    cut: tuple[int, str] | None = None
    copies: list[str] = []
    for start, content, end in boxes_from_last(text):
        if content is None:
            if cut is not None or copies:
                break
            cut = start, text[end:]
        elif content.strip():
            if cut is None:
                return start, Extraction(strip_delimiters(content), "boxed")
            copies.append(content)
            if len(copies) == 2:
                break
    if cut is None:
        return None
    return cut[0], Extraction(strip_delimiters(copies[0]), "boxed") if repeated(cut[1], copies) else None
