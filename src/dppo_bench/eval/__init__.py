"""Evaluation: generation, grading with math-verify, scoring.

Flow: a benchmark's problems (``problem_sets``) -> ``generate`` (samples.jsonl.gz via ``samples``) -> ``grading``
(``extract`` + ``verifier``, in a process pool) -> ``metrics`` -> ``score`` (scores.json). ``verl_reward`` and
``verl_dump`` connect the same grading to verl's online validation.
"""
