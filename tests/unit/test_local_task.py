import random

from dppo_bench.local.task import Expression, TaskConfig, make_splits, pretraining_text, solve
from dppo_bench.local.tokenizer import build_tokenizer


def test_solution_reduces_in_precedence_order():
    assert solve((7, 3, 5), "*-") == ("7*3=21,21-5=16,\\boxed{16}", 16)
    assert solve((2, 3, 4), "+*") == ("3*4=12,2+12=14,\\boxed{14}", 14)
    assert solve((9, 2, 4), "--") == ("9-2=7,7-4=3,\\boxed{3}", 3)
    assert Expression("x", (3, 8), "-").text == "3-8=" and Expression("x", (3, 8), "-").answer == -5


def test_corruption_is_carried_on_consistently():
    text, value = solve((7, 3, 5), "*-", corrupt=(0, 2))
    assert text == "7*3=23,23-5=18,\\boxed{18}" and value == 18


def test_splits_are_disjoint_deterministic_and_sized():
    cfg = TaskConfig(max_operand=9, min_operands=2, max_operands=3)
    train, held = make_splits(0, 300, 50, cfg)
    assert len(train) == 300 and len(held) == 50
    assert not {p.text for p in train} & {p.text for p in held}
    again = make_splits(0, 300, 50, cfg)
    assert [p.text for p in again[0]] == [p.text for p in train]
    assert [p.text for p in make_splits(1, 300, 50, cfg)[0]] != [p.text for p in train]
    assert all(0 <= x <= 9 for p in train for x in p.operands)


def test_corrupt_fraction_of_pretraining_texts():
    rng = random.Random(0)
    cfg = TaskConfig(max_operand=9)
    train, _ = make_splits(0, 2000, 10, cfg)
    wrong = sum(not pretraining_text(p, rng, 0.4).endswith(f"\\boxed{{{p.answer}}}") for p in train)
    assert 0.33 < wrong / len(train) < 0.45  # a +-1..3 error can cancel only in a few products


def test_tokenizer_roundtrip_and_box_token():
    tok = build_tokenizer()
    text = "12*3-4=12*3=36,36-4=32,\\boxed{32}"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    assert tok.convert_tokens_to_ids("\\boxed{") in ids and len(ids) == len(text) - len("\\boxed{") + 1
    assert tok.apply_chat_template([{"role": "user", "content": "1+1="}], tokenize=False) == "<bos>1+1="
