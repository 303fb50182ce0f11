"""verl reward function: the offline scorer's extraction and verifier, for training rewards and validation.

    reward.custom_reward_function.path=<this file>  reward.custom_reward_function.name=compute_score

verl calls it from reward-loop threads and async Ray actors, where the verifier's CPU-time signal cannot run:
``grading.grade`` decides what it can in the calling thread and sends the rest to this process's shared grading
pool (worker processes, thread-safe), so online validation matches ``dppo-bench score`` sample for sample. From
``extra_info`` (written by ``data prepare``) come ``answer_type``, ``dataset`` (the spec the row was prepared
from: its prompt template says whether the response starts inside a reasoning block) and ``problem_id``; the
returned ``problem_id`` lands in verl's validation dumps, where ``dppo-bench eval convert-verl-dump`` reads it.
"""

from __future__ import annotations

from functools import cache

from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_any
from dppo_bench.eval.grading import DEFAULT_TIMEOUT_S, grade


@cache
def opens_reasoning(dataset: str | None) -> bool:
    """Whether the prompt template of the spec ``dataset`` opens a reasoning block (False for rows without one)."""
    return bool(dataset) and load_prompt(load_any(dataset).prompt).opens_reasoning


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    *,
    incorrect_score: float = 0.0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **_: object,
) -> dict:
    """{score, acc, pred, timeout, problem_id}: score is 1.0 or ``incorrect_score`` (-1.0 gives DAPO's +-1)."""
    info = extra_info or {}
    verdict = grade(
        solution_str,
        str(ground_truth),
        info.get("answer_type", "auto"),
        opens_reasoning=opens_reasoning(info.get("dataset")),
        timeout_s=float(timeout_s),
    )
    return {
        "score": 1.0 if verdict.correct else float(incorrect_score),
        "acc": float(verdict.correct),
        "pred": verdict.extracted or "",
        "timeout": float(verdict.timeout),
        "problem_id": str(info.get("problem_id", "")),
    }
