"""Step time with the rollout anchor against the recompute anchor, side by side in one run.

  python benchmarks/anchor_cost.py [--steps 20] [--setting tiny_sanity] [--base-model DIR]

The same method (DPPO-Binary-TV) with mu from the rollout (no extra pass) and with pi_old recomputed
by the trainer (one no-grad forward over the batch, as verl's decoupled mode), stepped alternately on
the local backend so that machine load hits both alike. The paper reports that skipping the recompute
pass saves about 25% of training compute (Sec. 5.2) at LLM scale.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from dppo_bench.config import find_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.local.model import build_model, save_model
from dppo_bench.local.pretrain import task_config
from dppo_bench.local.task import make_splits, write_jsonl
from dppo_bench.local.tokenizer import build_tokenizer
from dppo_bench.local.trainer import LocalRun, LocalTrainer
from dppo_bench.rundir import RunDir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setting", default="tiny_sanity")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--base-model", type=Path, help="a pretrained base (default: a freshly initialised model)")
    args = p.parse_args()
    setting = find_setting(args.setting)
    # no diagnostic mismatch pass: it would give the rollout anchor the very pass whose cost is measured here
    setting = setting.model_copy(update={"train": setting.train.model_copy(update={"mismatch_every": 0})})
    local = setting.local
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = args.base_model
        if base is None:
            tok = build_tokenizer()
            base = tmp / "base"
            save_model(build_model(local.model.model_dump(), tok, seed=0), tok, base)
        train, _ = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
        write_jsonl(train, tmp / "train.jsonl")
        trainers = {}
        for method in ("dppo_binary_tv", "dppo_binary_tv_recompute"):
            run = LocalRun(resolve_run(setting, method, 0), base, tmp / "train.jsonl")
            trainers[method] = LocalTrainer(run, RunDir(tmp / method).create(), progress=False)
            trainers[method]._load()
        rows = {m: [] for m in trainers}
        for step in range(1, args.steps + 1):
            for method, trainer in trainers.items():
                rows[method].append(trainer.step(step))
    print(f"{args.setting}: {args.steps} steps each, alternating; median seconds per step")
    med = {
        m: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k.startswith("perf/")} for m, rs in rows.items()
    }
    for method, t in med.items():
        print(
            f"  {method:26s} step {t['perf/step_s']:.3f} (rollout {t['perf/rollout_s']:.3f}, "
            f"recompute {t['perf/recompute_s']:.3f}, update {t['perf/update_s']:.3f})"
        )
    rollout, recompute = med["dppo_binary_tv"]["perf/step_s"], med["dppo_binary_tv_recompute"]["perf/step_s"]
    share = med["dppo_binary_tv_recompute"]["perf/recompute_s"] / recompute
    print(
        f"recompute anchor / rollout anchor = {recompute / rollout:.3f}x per step (medians); the recompute pass "
        f"alone is {share:.1%} of a recompute-anchored step"
    )


if __name__ == "__main__":
    main()
