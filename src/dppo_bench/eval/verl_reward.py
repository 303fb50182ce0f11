"""verl reward function: the offline scorer's extraction and verifier, for training rewards and validation.

    reward.custom_reward_function.path=<this file>  reward.custom_reward_function.name=compute_score

verl calls it from reward-loop threads and async Ray actors, where math-verify's SIGALRM timeouts cannot run:
answers decided without a verifier are scored in the calling thread, the rest go to this process's shared
grading pool (worker processes, thread-safe), so online validation matches ``dppo-bench score`` sample for sample.
The returned ``problem_id`` (from ``extra_info``, written by ``data prepare``) lands in verl's validation dumps,
where ``dppo-bench eval convert-verl-dump`` reads it.
"""

from __future__ import annotations

from dppo_bench.eval.grading import DEFAULT_TIMEOUT_S, Verdict, decide, shared_pool


def _verdict(solution_str: str, ground_truth: str, answer_type: str, timeout_s: int) -> Verdict:
    verdict, prediction = decide(solution_str, ground_truth, answer_type)
    if verdict is not None:
        return verdict
    correct, timed_out = shared_pool().check(prediction, ground_truth, timeout_s).result()
    return Verdict(correct, timed_out, prediction)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    *,
    incorrect_score: float = 0.0,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    **_: object,
) -> dict:
    """{score, acc, pred, timeout, problem_id}: score is 1.0 or ``incorrect_score`` (-1.0 gives DAPO's +-1)."""
    info = extra_info or {}
    verdict = _verdict(solution_str, str(ground_truth), info.get("answer_type", "auto"), int(timeout_s))
    return {
        "score": 1.0 if verdict.correct else float(incorrect_score),
        "acc": float(verdict.correct),
        "pred": verdict.extracted or "",
        "timeout": float(verdict.timeout),
        "problem_id": str(info.get("problem_id", "")),
    }
