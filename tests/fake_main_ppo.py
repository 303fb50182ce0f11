"""A stand-in for ``python -m verl.trainer.main_ppo`` that follows verl 0.9.1's records, for the launcher tests.

What it shares with verl (``PPOTrainer._load_checkpoint`` / ``fit`` / ``_save_checkpoint``, ``FileLogger``):
resume from ``<default_local_dir>/latest_checkpointed_iteration.txt`` when ``global_step_<N>`` exists; validate
before training (``trainer.val_before_train``) at the resumed step; then per step: train, save a checkpoint every
``save_freq`` steps and at the last, validate every ``test_freq`` steps and at the last (dumping
``<validation_data_dir>/<step>.jsonl``), log one row. Its log file is opened with "wb", as verl's is.

Controlled by environment variables: ``FAKE_CRASH_AT=N`` exits 1 in the middle of writing step N's row;
``FAKE_HANG_AT=N`` sleeps at step N (until a signal ends it); ``FAKE_ATTEMPT`` is logged as the step time.
Every value is a function of the step, except the step time, so a test can tell which attempt wrote a row.
"""

import json
import math
import os
import sys
import time
from pathlib import Path

ENV_KEY = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"


def overrides(argv):
    out = {}
    for arg in argv:
        key, _, value = arg.partition("=")
        out[key.lstrip("+")] = value
    return out


def metrics(step):
    return {
        "critic/score/mean": step / 100,
        "response_length/mean": 100.0 + step,
        "actor/entropy": 9.0,  # verl's loss-aggregated entropy: not the canonical one
        "dppo_bench/train/entropy_mean": 0.5 + step / 1000,
        "actor/mask_frac": step / 1000,
        "actor/is_ratio_max": math.nan if step == 3 else 1.0 + step / 10,
        "dppo_bench/mismatch/abs_diff_mean": step / 10_000,
        "dppo_bench/mismatch/diff_min": -step / 1000,
        "timing_s/step": float(os.environ.get("FAKE_ATTEMPT", "0")),
        "training/global_step": step,
    }


def validation(step, dump_dir):
    dump_dir.mkdir(parents=True, exist_ok=True)
    (dump_dir / f"{step}.jsonl").write_text(json.dumps({"input": "q", "output": "a", "step": step}) + "\n")
    return {"val-core/aime24/acc/mean@32": 0.25 + step / 100, "val-aux/aime24/acc/std@32": 0.1}


def main():
    cfg = overrides(sys.argv[1:])
    log_path = os.environ["VERL_FILE_LOGGER_PATH"]
    assert cfg[ENV_KEY[1:]] == log_path, "the launcher's env and overrides name different log files"
    ckpt = Path(cfg["trainer.default_local_dir"])
    total, save, test = (int(cfg[f"trainer.{k}"]) for k in ("total_training_steps", "save_freq", "test_freq"))
    dump_dir = Path(cfg["trainer.validation_data_dir"])
    crash_at = int(os.environ.get("FAKE_CRASH_AT", "0"))
    hang_at = int(os.environ.get("FAKE_HANG_AT", "0"))

    step = 0
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    if tracker.exists() and (ckpt / f"global_step_{int(tracker.read_text())}").is_dir():
        step = int(tracker.read_text())
    log = open(log_path, "wb", buffering=0)  # noqa: SIM115 - verl's FileLogger
    if cfg.get("trainer.val_before_train", "True") == "True":
        log.write(json.dumps({"step": step, "data": validation(step, dump_dir)}).encode() + b"\n")
    for s in range(step + 1, total + 1):
        if s == hang_at:
            time.sleep(600)
        row = metrics(s)
        if s % save == 0 or s == total:
            (ckpt / f"global_step_{s}" / "actor").mkdir(parents=True, exist_ok=True)
            tracker.write_text(str(s))
        if s % test == 0 or s == total:
            row.update(validation(s, dump_dir))
        line = json.dumps({"step": s, "data": row}).encode()
        if s == crash_at:
            log.write(line[: len(line) // 2])  # killed in the middle of the write
            os._exit(1)
        log.write(line + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
