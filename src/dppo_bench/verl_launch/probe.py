"""Fig. 2's mismatch probe through verl: one rollout batch of a setting's model, its tokens' mu, pi and TV.

The probe is a one-step verl run of the setting in the Top-K loss mode (K = 20) with the whole batch as one
mini-batch, so every micro-batch's trainer forward in that step happens before its only optimizer step: at the
rollout's parameters theta'. In bypass mode verl hands the loss mu as ``old_log_probs``, the forward gives
pi(theta') and the engine's Top-K patch the TV over mu's top-20 plus the rest (the only part of mu vLLM returns);
the patched ``ppo_loss`` (:mod:`dppo_bench.verl_plugin.topk.loss`) writes the three per response token when
``DPPO_BENCH_PROBE_DIR`` is set, one file per call and process (:mod:`dppo_bench.verl_plugin.probe_dump`). After the
run, :func:`collect` joins them into the record both backends write (:mod:`dppo_bench.probe.tokens`). No checkpoint
is saved and nothing is validated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dppo_bench.config import Setting, find_method
from dppo_bench.config.runs import resolve_run
from dppo_bench.verl_launch.run_config import ENV, RunPaths, run_overrides
from dppo_bench.verl_plugin.contract import PROBE_DIR_ENV, PROBE_FILE_PREFIX

PROBE_METHOD = "dppo_topk_tv"  # bypass mode (mu as old_log_probs) with the engine's top-K TV per token


def probe_setting(setting: Setting) -> Setting:
    """The setting for one step whose batch is one mini-batch (no update before any of its forwards)."""
    train = setting.train.model_copy(update={"steps": 1, "mini_batches": 1, "save_every": 1})
    return setting.model_copy(update={"train": train})


def probe_overrides(setting: Setting, paths: RunPaths, dump_dir: Path, seed: int = 0) -> list[str]:
    """The run's verl overrides (later ones win over run_overrides' own): no validation, no checkpoint."""
    overrides = run_overrides(resolve_run(probe_setting(setting), find_method(PROBE_METHOD), seed), paths)
    return [
        *overrides,
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"{ENV}.{PROBE_DIR_ENV}={dump_dir}",
    ]


def collect(dump_dir: Path) -> dict[str, np.ndarray]:
    """The tokens of every dumped call, joined (in file-name order, so the result does not depend on listing)."""
    files = sorted(dump_dir.glob(f"{PROBE_FILE_PREFIX}*.npz"))
    if not files:
        raise FileNotFoundError(f"{dump_dir}: the probe run dumped no tokens (was {PROBE_METHOD} run in bypass mode?)")
    parts = [np.load(f) for f in files]
    return {k: np.concatenate([p[k] for p in parts]) for k in ("mu", "pi", "tv")}
