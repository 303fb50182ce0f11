import random
from collections import Counter

import pytest

from dppo_bench.local.task import (
    MAX_WORDS,
    Expression,
    Lexicon,
    TaskConfig,
    connective_words,
    make_splits,
    pretraining_text,
    solve,
)
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


def test_connective_words_are_distinct_single_tokens_and_nest():
    words = connective_words(1000)
    assert len(set(words)) == 1000 and all(w[:-1].isalpha() and w.islower() and w.endswith(" ") for w in words)
    assert connective_words(10) == words[:10]  # a smaller lexicon is the head of a larger one
    for bad in (0, MAX_WORDS + 1):
        with pytest.raises(ValueError, match="a lexicon has 1 to"):
            connective_words(bad)
    tok = build_tokenizer(words)
    assert len(tok) == 21 + 1000
    text = words[3] + "7*3=21," + words[999] + "\\boxed{21}"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text and len(ids) == 2 + len("7*3=21,") + 1 + len("21}")
    assert tok.unk_token_id not in ids


def test_lexicon_draws_a_zipf_head_before_correct_steps_and_the_rare_half_before_errors():
    lex = Lexicon(words=1000, zipf=1.0)
    rng = random.Random(0)
    ranks = Counter(lex.tokens.index(lex.draw(rng, before_error=False)) for _ in range(20000))
    harmonic = sum(1 / k for k in range(1, 1001))
    assert abs(ranks[0] / 20000 - 1 / harmonic) < 0.01  # rank 1 carries 1/H_1000 of the draws (about 13%)
    assert abs(ranks[1] / ranks[0] - 1 / 2) < 0.08 and abs(ranks[2] / ranks[0] - 1 / 3) < 0.08  # weight k^-1
    rare = sum(n for k, n in ranks.items() if (k + 1) ** -1.0 / harmonic < 0.01)
    assert abs(rare / 20000 - 0.575) < 0.02  # words of probability < 0.01 (ranks 14-1000): the tail, 1 - H_13/H_1000
    errors = {lex.tokens.index(lex.draw(rng, before_error=True)) for _ in range(2000)}
    assert min(errors) >= 500 and max(errors) == 999 and len(errors) > 450  # uniform over the rarer half
    steeper = Lexicon(words=1000, zipf=2.0)
    head = sum(steeper.draw(rng, before_error=False) == steeper.tokens[0] for _ in range(5000)) / 5000
    assert head > 0.55  # 1/zeta(2) of the draws, about 0.61


def test_pretraining_text_with_a_lexicon_puts_a_word_before_every_step():
    lex = Lexicon(words=1000, zipf=1.0)
    problem = Expression("x", (7, 3, 5), "*-")
    rng = random.Random(1)
    texts = [pretraining_text(problem, rng, 0.5, lex) for _ in range(400)]
    right = solve(problem.operands, problem.ops)[0].split(",")
    for text in texts:
        parts = text.removeprefix(problem.text).split(",")
        words = [part.split(" ", 1)[0] + " " for part in parts]
        steps = [part.split(" ", 1)[1] for part in parts]
        assert len(parts) == 3 and all(w in lex.tokens for w in words)
        wrong = [i for i in range(2) if steps[i] != right[i]]
        if wrong:  # the word before the corrupted step is from the rarer half
            assert lex.tokens.index(words[wrong[0]]) >= 500
    assert 0.3 < sum(not t.endswith("\\boxed{16}") for t in texts) / len(texts) < 0.6
