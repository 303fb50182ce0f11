"""The packaged real LM (recipes/models/smollm2_135m_instruct.yaml), built once per test session.

Its conversion takes about 40 s of a core, so the xdist workers share one build: the first to ask builds it under
the session's base temporary directory while holding a lock, the others wait and read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from filelock import FileLock

REAL_LM = "smollm2_135m_instruct"


@pytest.fixture(scope="session")
def real_lm(tmp_path_factory) -> Path:
    from dppo_bench.config.models import load_packaged_model
    from dppo_bench.packaged_model import build

    shared = tmp_path_factory.getbasetemp().parent  # one directory for every worker of the session
    out = shared / "models" / REAL_LM
    with FileLock(str(shared / f"{REAL_LM}.lock")):
        if not out.is_dir():
            build(load_packaged_model(REAL_LM), out)
    return out
