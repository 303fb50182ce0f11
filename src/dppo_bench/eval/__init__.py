"""Evaluation: benchmark specs, data preparation, generation, grading with math-verify, scoring.

Flow: ``spec`` (yaml) -> ``data`` (normalized rows, hash, verl parquet) -> ``generate`` (samples.jsonl.gz via
``samples``) -> ``grading`` (``extract`` + ``verifier``, in a process pool) -> ``metrics`` -> ``score``
(scores.json). ``verl_reward`` and ``verl_dump`` connect the same grading to verl's online validation.
"""
