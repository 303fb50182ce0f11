"""One-step arithmetic word problems: the training and held-out problems of ``verl_cpu_smollm``.

A real instruction-tuned LM of 135M parameters (SmolLM2-135M-Instruct) solves almost none of MATH, level 1
included (0 of 128 samples on 32 problems, measured: recipes/settings/verl_cpu_smollm.yaml), so its rewards
would be zero and its gradients with them. These problems ("Tom has 7 apples. Tom gets 5 more apples. How many
apples does Tom have now?") it solves some of the time. Generated once, deterministically, and committed as
``data/arith_words/{train,heldout}.jsonl`` (their sha256 pinned in the specs that read them)::

    python -m dppo_bench.problem_sets.arith_words data/arith_words

The held-out problems are drawn with another seed and none repeats a training problem's text.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

NAMES = ("Tom", "Anna", "Ben", "Lily", "Sam", "Mia", "Max", "Emma")
THINGS = ("apples", "books", "pencils", "marbles", "stickers", "cookies", "cards", "balloons")
SPLITS = {"train": (0, 256), "heldout": (1, 16)}  # seed, problems


def problem(rng: random.Random) -> tuple[str, int, str]:
    """(text, answer, operation) of one problem: a sum, a difference or a product of small numbers."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    op = rng.choice(("add", "sub", "mul"))
    if op == "add":
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        text = f"{name} has {a} {thing}. {name} gets {b} more {thing}. How many {thing} does {name} have now?"
        return text, a + b, op
    if op == "sub":
        a = rng.randint(5, 20)
        b = rng.randint(1, a - 1)
        return f"{name} has {a} {thing} and gives {b} of them away. How many {thing} does {name} have left?", a - b, op
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"{name} has {a} boxes with {b} {thing} in each box. How many {thing} does {name} have in total?", a * b, op


def split_rows(name: str, exclude: set[str] = frozenset()) -> list[dict]:
    seed, count = SPLITS[name]
    rng, rows, seen = random.Random(seed), [], set(exclude)
    while len(rows) < count:
        text, answer, op = problem(rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"id": f"arith-words-{name}-{len(rows):04d}", "problem": text, "answer": str(answer), "op": op})
    return rows


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    train = split_rows("train")
    for name, rows in (("train", train), ("heldout", split_rows("heldout", {r["problem"] for r in train}))):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
