"""A synthetic arithmetic task generated from a seed, with worked solutions.

A problem is 2-3 integer operands joined by + - *, written ``7*3-5=``. The solution reduces one
operator at a time in precedence order and ends with the answer in a box::

    7*3=21,21-5=16,\\boxed{16}

Pretraining data corrupts one step of a fraction of the solutions by a small offset and carries
the wrong value on, so the base model learns to make (consistent) mistakes at some rate.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

OPS = "+-*"


@dataclass(frozen=True)
class TaskConfig:
    max_operand: int = 20
    min_operands: int = 2
    max_operands: int = 3


@dataclass(frozen=True)
class Problem:
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


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def solve(operands: tuple[int, ...], ops: str, corrupt: tuple[int, int] | None = None) -> tuple[str, int]:
    """The worked solution and its final value; ``corrupt = (step, offset)`` adds an error."""
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
    return ",".join(steps) + ",\\boxed{" + str(nums[0]) + "}", nums[0]


def generate_problems(seed: int, count: int, config: TaskConfig, prefix: str) -> list[Problem]:
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Problem] = []
    while len(problems) < count:
        k = rng.randint(config.min_operands, config.max_operands)
        p = Problem("", tuple(rng.randint(0, config.max_operand) for _ in range(k)), "".join(rng.choices(OPS, k=k - 1)))
        if p.text not in seen:
            seen.add(p.text)
            problems.append(Problem(f"{prefix}-{len(problems):05d}", p.operands, p.ops))
    return problems


def make_splits(seed: int, n_train: int, n_heldout: int, config: TaskConfig) -> tuple[list[Problem], list[Problem]]:
    """Disjoint train and held-out problems (by problem text), both from ``seed``."""
    everything = generate_problems(seed, n_train + n_heldout, config, "tiny")
    train = [Problem(f"tiny-train-{i:05d}", p.operands, p.ops) for i, p in enumerate(everything[:n_train])]
    heldout = [Problem(f"tiny-heldout-{i:05d}", p.operands, p.ops) for i, p in enumerate(everything[n_train:])]
    return train, heldout


def pretraining_text(problem: Problem, rng: random.Random, corrupt_frac: float) -> str:
    """Problem and (maybe corrupted) solution: what the base model is trained to continue."""
    corrupt = None
    if rng.random() < corrupt_frac:
        corrupt = (rng.randrange(len(problem.ops)), rng.choice([-3, -2, -1, 1, 2, 3]))
    return problem.text + solve(problem.operands, problem.ops, corrupt)[0]


def write_jsonl(problems: list[Problem], path: Path) -> None:
    """Rows in the suite's normalized problem format: id, problem, answer, source."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as f:
        for p in problems:
            f.write(json.dumps({"id": p.id, "problem": p.text, "answer": str(p.answer), "source": "tiny_arith"}) + "\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
