"""verl's own code paths: its validation-dump writer and its custom reward loader (importing verl is slow)."""

import importlib.util
import json
from pathlib import Path

import pytest

from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.samples import read_samples
from dppo_bench.eval.score import score_samples
from dppo_bench.eval.verl_dump import convert_dump
from dppo_bench.problem_sets.load import Problem, ProblemSet, problems_sha256

pytestmark = pytest.mark.slow
REWARD_FILE = Path(importlib.util.find_spec("dppo_bench.eval.verl_reward").origin)


@pytest.mark.parametrize("path", [str(REWARD_FILE), "pkg://dppo_bench.eval.verl_reward"])
def test_verl_loads_and_calls_the_reward_function(path):
    from verl.utils.import_utils import load_extern_object

    compute_score = load_extern_object(module_path=path, object_name="compute_score")
    result = compute_score(data_source="aime24", solution_str="\\boxed{025}", ground_truth="25", extra_info={})
    assert result["score"] == 1.0 and result["acc"] == 1.0


def test_online_dump_rescored_offline_matches_the_online_reward(tmp_path):
    """verl's RayPPOTrainer._write_generations writes the dump; converting and re-scoring it gives the same
    per-sample accuracy the reward function reported online."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from dppo_bench.eval.verl_reward import compute_score

    problems = [Problem("q0", "Compute $1+1$.", "2"), Problem("q1", "Compute $\\frac{1}{2}+\\frac{1}{2}$.", "1")]
    outputs = ["Answer: 2", "\\boxed{3}", "\\boxed{\\frac{2}{2}}", "\\boxed{1.0}"]
    gts = ["2", "2", "1", "1"]
    inputs = [f"user\n{problems[i // 2].problem}\nassistant\n" for i in range(4)]
    extra = {"problem_id": ["q0", "q0", "q1", "q1"], "answer_type": ["integer"] * 4}
    online = [
        compute_score("x", o, g, {k: v[i] for k, v in extra.items()})
        for i, (o, g) in enumerate(zip(outputs, gts, strict=True))
    ]
    infos = {key: [r[key] for r in online] for key in online[0]} | {"uid": ["a", "a", "b", "b"]}
    scores = [r["score"] for r in online]
    RayPPOTrainer._write_generations(inputs, outputs, gts, scores, infos, str(tmp_path / "val"), 30)
    assert json.loads((tmp_path / "val" / "30.jsonl").read_text().splitlines()[0])["problem_id"] == "q0"

    pset = ProblemSet(problems, problems_sha256(problems), "test", "local", None)
    out = tmp_path / "s.jsonl.gz"
    convert_dump(tmp_path / "val", pset, out, benchmark="tiny", model="run", sampling={"n": 2}, template="dapo_answer")
    bench = load_benchmark("aime24").model_copy(update={"id": "tiny", "n": 2, "answer_type": "integer"})
    offline = score_samples(bench, pset, read_samples(out), workers=1)
    assert [p["c"] for p in offline["problems"]] == [1, 2]
    assert offline["avg@2"] == sum(r["acc"] for r in online) / 4
