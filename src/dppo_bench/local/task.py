"""A synthetic arithmetic task generated from a seed, with worked solutions.

A problem is 2-3 integer operands joined by + - *, written ``7*3-5=``. The solution reduces one
operator at a time in precedence order and ends with the answer in a box::

    7*3=21,21-5=16,\\boxed{16}

Pretraining data corrupts one step of a fraction of the solutions by a small offset and carries
the wrong value on, so the base model learns to make (consistent) mistakes at some rate.

With a lexicon (the long-tailed vocabulary), every step and the box are introduced by a connective word::

    keli 7*3=21,mo 21-5=16,ra \\boxed{16}

A correct step's word is drawn from a Zipf law over the lexicon's ranks; a corrupted step's word uniformly from its
rarer half. So at temperature 1 the model samples rare words at many positions (low mu, where a low-precision engine
moves the ratio most), and a rare word carries meaning: it is the hesitation that comes before an error.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dppo_bench.io import atomic_write_lines
from dppo_bench.problem_sets.load import Problem

OPS = "+-*"
BOX = "\\boxed{"
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
MAX_WORDS = (len(CONSONANTS) * len(VOWELS)) ** 2  # two-syllable words


def connective_words(count: int) -> list[str]:
    """``count`` distinct words (each with its trailing space: one token), in Zipf-rank order; the same for every
    caller, so a lexicon of n words is the first n of a larger one."""
    if not 0 < count <= MAX_WORDS:
        raise ValueError(f"a lexicon has 1 to {MAX_WORDS} words, not {count}")
    syllables = [c + v for c, v in itertools.product(CONSONANTS, VOWELS)]
    words = [a + b + " " for a, b in itertools.product(syllables, repeat=2)]
    random.Random(0).shuffle(words)
    return words[:count]


@dataclass(frozen=True)
class Lexicon:
    """The long-tailed vocabulary of connective words: correct steps draw rank k with weight k^-zipf, corrupted
    steps draw uniformly from the rarer half."""

    words: int
    zipf: float

    @cached_property
    def tokens(self) -> list[str]:
        return connective_words(self.words)

    @cached_property
    def _cumulative(self) -> list[float]:
        return list(itertools.accumulate((k + 1) ** -self.zipf for k in range(self.words)))

    def draw(self, rng: random.Random, before_error: bool) -> str:
        if before_error:
            return self.tokens[rng.randrange(self.words // 2, self.words)]
        return rng.choices(self.tokens, cum_weights=self._cumulative)[0]


@dataclass(frozen=True)
class TaskConfig:
    max_operand: int = 20
    min_operands: int = 2
    max_operands: int = 3


@dataclass(frozen=True)
class Expression:
    """One problem of the task as its parts; :meth:`problem` is the suite's problem it becomes."""

    id: str
    operands: tuple[int, ...]
    ops: str

    @property
    def text(self) -> str:
        parts = [str(self.operands[0])]
        for op, x in zip(self.ops, self.operands[1:], strict=True):
            parts += [op, str(x)]
        return "".join(parts) + "="

    @property
    def answer(self) -> int:
        return solve(self.operands, self.ops)[1]

    def problem(self) -> Problem:
        return Problem(self.id, self.text, str(self.answer), {"source": "tiny_arith"})


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def solve(operands: tuple[int, ...], ops: str, corrupt: tuple[int, int] | None = None) -> tuple[str, int]:
    """The worked solution and its final value; ``corrupt = (step, offset)`` adds an error."""
    parts, value = solution_parts(operands, ops, corrupt)
    return ",".join(parts), value


def solution_parts(
    operands: tuple[int, ...], ops: str, corrupt: tuple[int, int] | None = None
) -> tuple[list[str], int]:
    """The solution's steps and its boxed answer, each a part the lexicon introduces with a word; the value."""
    nums, rest = list(operands), list(ops)
    steps = []
    while rest:
        i = next((k for k, op in enumerate(rest) if op == "*"), 0)  # * first, then left to right
        value = _apply(nums[i], rest[i], nums[i + 1])
        if corrupt is not None and corrupt[0] == len(steps):
            value += corrupt[1]
        steps.append(f"{nums[i]}{rest[i]}{nums[i + 1]}={value}")
        nums[i : i + 2] = [value]
        del rest[i]
    return [*steps, BOX + str(nums[0]) + "}"], nums[0]


def generate_problems(seed: int, count: int, config: TaskConfig, prefix: str) -> list[Expression]:
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Expression] = []
    while len(problems) < count:
        k = rng.randint(config.min_operands, config.max_operands)
        p = Expression(
            "", tuple(rng.randint(0, config.max_operand) for _ in range(k)), "".join(rng.choices(OPS, k=k - 1))
        )
        if p.text not in seen:
            seen.add(p.text)
            problems.append(Expression(f"{prefix}-{len(problems):05d}", p.operands, p.ops))
    return problems


def make_splits(
    seed: int, n_train: int, n_heldout: int, config: TaskConfig
) -> tuple[list[Expression], list[Expression]]:
    """Disjoint train and held-out problems (by problem text), both from ``seed``."""
    everything = generate_problems(seed, n_train + n_heldout, config, "tiny")
    train = [Expression(f"tiny-train-{i:05d}", p.operands, p.ops) for i, p in enumerate(everything[:n_train])]
    heldout = [Expression(f"tiny-heldout-{i:05d}", p.operands, p.ops) for i, p in enumerate(everything[n_train:])]
    return train, heldout


def pretraining_text(
    problem: Expression, rng: random.Random, corrupt_frac: float, lexicon: Lexicon | None = None
) -> str:
    """Problem and (maybe corrupted) solution: what the base model is trained to continue."""
    corrupt = None
    if rng.random() < corrupt_frac:
        corrupt = (rng.randrange(len(problem.ops)), rng.choice([-3, -2, -1, 1, 2, 3]))
    parts, _ = solution_parts(problem.operands, problem.ops, corrupt)
    if lexicon is not None:
        erring = corrupt[0] if corrupt else -1
        parts = [lexicon.draw(rng, before_error=i == erring) + part for i, part in enumerate(parts)]
    return problem.text + ",".join(parts)


def write_jsonl(expressions: list[Expression], path: Path) -> None:
    """Rows in the suite's normalized problem format: id, problem, answer, source."""
    atomic_write_lines(path, (e.problem().row() for e in expressions))
