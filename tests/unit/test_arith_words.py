"""The committed word problems of verl_cpu_smollm are the generator's output, and the specs pin them."""

from dppo_bench.config.roots import REPO_ROOT
from dppo_bench.config.specs import load_any
from dppo_bench.problem_sets import arith_words
from dppo_bench.problem_sets.load import load_problem_set


def test_the_committed_files_are_what_the_generator_writes(tmp_path):
    arith_words.write(tmp_path)
    for name in ("train", "heldout"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (
            REPO_ROOT / "data" / "arith_words" / f"{name}.jsonl"
        ).read_bytes()


def test_the_splits_are_pinned_disjoint_and_integer():
    train, heldout = (load_problem_set(load_any(i)) for i in ("arith_words_train", "arith_words"))
    assert (len(train.problems), len(heldout.problems)) == (256, 16)
    assert not {p.problem for p in train.problems} & {p.problem for p in heldout.problems}
    assert all(int(p.answer) >= 0 for p in train.problems + heldout.problems)
    assert {p.extra["op"] for p in train.problems} == {"add", "sub", "mul"}
