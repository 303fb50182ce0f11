"""The GPU check: the suite's parts that need no vLLM, verl or Ray, on one card (benchmarks/gpu_check.sh runs it).

  python benchmarks/gpu_check.py [--cpu] [--out DIR] [--budget-s 420] [--distributions FILE]

1. **Loss parity**: every recipe of our rules, at each of its profiles (and every aggregation mode for
   DPPO-Binary-TV), forward and backward through the trainer's own loss path (``local.update.rule_loss``) on the
   card in fp32 and in bf16 (the log-softmax in that dtype), against the same on the CPU: the loss within
   ``TOLERANCE`` of its magnitude, the gradient on the logits within ``TOLERANCE`` of its largest entry, and the
   tokens whose mask decision differs counted.
2. **Top-K cost**: the trainer-side top-K divergence against the log-softmax pass it reuses
   (``benchmarks/topk_divergence.py``'s measurement), against the goal ``TOPK_GOAL``.
3. **The local trainer on the card**: the ``gpu_check`` setting's model pretrained on the card, then PG-IS and
   DPPO-Binary-TV with its bf16 engine against the fp32 trainer (the mismatch of real CUDA kernels), each run
   stopped at its share of the time budget; their reward and |pi - mu| at equal parameters reported.

``--cpu`` runs the same code on the CPU at reduced sizes (CI runs it, so that the script is known to work before a
card runs it). Its parity compares the CPU with the CPU on the batch in reverse order: the sums run in another order,
as a card's kernels run them, and a loss that depended on the batch's order would fail. verl, Ray and vLLM are
refused at import: the card's image has none of them. Writes ``report.json`` to ``--out``; exits 1 when a parity
check fails or a part raises.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

REFUSED = ("verl", "ray", "vllm")


class RefuseImports(importlib.abc.MetaPathFinder):
    """Makes ``import verl`` (ray, vllm) fail here as on the card, whatever this machine has installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"the GPU check runs without {name.split('.')[0]} (refused at import)")
        return None


sys.meta_path.insert(0, RefuseImports())

import torch  # noqa: E402
import transformers  # noqa: E402

from dppo_bench.config import find_setting, load_methods  # noqa: E402
from dppo_bench.config.runs import resolve_run  # noqa: E402
from dppo_bench.divergence import topk_of_log_probs  # noqa: E402
from dppo_bench.local.pretrain import pretrain, task_config  # noqa: E402
from dppo_bench.local.task import make_splits, write_jsonl  # noqa: E402
from dppo_bench.local.trainer import LocalRun, LocalTrainer  # noqa: E402
from dppo_bench.local.update import Batch, Loss, rule_loss  # noqa: E402
from dppo_bench.methods.aggregation import MODES  # noqa: E402
from dppo_bench.rundir import RunDir  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import topk_divergence  # noqa: E402

# The device's loss and gradient against the CPU's, relative to the loss's magnitude and the gradient's largest
# entry: fp32 differs only in reduction order (a few ulps); bf16's log-softmax has 8 bits of mantissa, so a few of
# its ulps, and a token whose mask decision flips moves the loss by its share of the batch.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
TOPK_GOAL = 0.005  # the added top-K cost as a fraction of the log-softmax pass (issue 31)
METHODS = ("pg_is", "dppo_binary_tv")

SIZES = {  # parity batch, Top-K timing, and the trainer part's setting changes (none on the card)
    "cuda": {"parity": (16, 256, 4096), "topk_tokens": 16_384, "topk_rounds": 5},
    "cpu": {"parity": (4, 32, 1024), "topk_tokens": 128, "topk_rounds": 1},
}
CPU_SETTING = {  # --cpu: the gpu_check setting at a size 2 cores run in about a minute
    "model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 2, "max_position_embeddings": 128},
    "pretrain": {"steps": 200, "batch_size": 64},
    "train": {"steps": 4, "prompts_per_step": 4, "responses_per_prompt": 4, "mini_batches": 2, "save_every": 4},
}  # fmt: skip


# -- 1. loss parity --------------------------------------------------------------------------------------------
def parity_inputs(batch: int, length: int, vocab: int, k: int) -> dict[str, torch.Tensor]:
    """Trainer logits, a rollout mu that differs from them (and a recompute anchor), sampled tokens, advantages."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(batch, length, vocab, generator=g) * 2
    mu_logits = logits + 0.5 * torch.randn(logits.shape, generator=g)
    mu = torch.log_softmax(mu_logits, -1)
    sampled = torch.multinomial(mu.exp().view(-1, vocab), 1, generator=g).view(batch, length)
    topk_ids, topk_lp = topk_of_log_probs(mu, k, sampled)
    anchor = torch.log_softmax(logits + 0.2 * torch.randn(logits.shape, generator=g), -1)
    mask = torch.arange(length) < torch.randint(length // 4, length + 1, (batch, 1), generator=g)
    return {
        "logits": logits,
        "responses": sampled,
        "response_mask": mask,
        "mu_log_probs": mu.gather(-1, sampled[..., None]).squeeze(-1),
        "anchor_log_probs": anchor.gather(-1, sampled[..., None]).squeeze(-1),
        "advantages": torch.randn(batch, 1, generator=g).expand(batch, length) * mask,
        "topk_ids": topk_ids,
        "topk_log_probs": topk_lp,
    }


def loss_and_grad(
    loss: Loss, data: dict, device: torch.device, dtype: torch.dtype
) -> tuple[float, torch.Tensor, dict, torch.Tensor]:
    """The trainer's loss path on ``device``, logits and log-softmax in ``dtype``: (loss, d loss / d logits, stats,
    the mask of the dropped response tokens on the CPU, as the loss gives it to ``on_masked``)."""
    t = {name: v.to(device) for name, v in data.items()}
    logits = t["logits"].to(dtype, copy=True).requires_grad_()  # a leaf of its own: the inputs stay untouched
    log_softmax = torch.log_softmax(logits, -1)
    log_pi = log_softmax.gather(-1, t["responses"][..., None]).squeeze(-1)
    mu = t["mu_log_probs"]
    batch = Batch(
        input_ids=t["responses"],
        attention_mask=t["response_mask"],
        prompt_len=0,
        responses=t["responses"],
        response_mask=t["response_mask"],
        mu_log_probs=mu,
        anchor_log_probs=mu if loss.anchor == "rollout" else t["anchor_log_probs"],
        advantages=t["advantages"],
        topk_ids=t["topk_ids"] if loss.topk_kind else None,
        topk_log_probs=t["topk_log_probs"] if loss.topk_kind else None,
    )
    masked = []
    value, stats = rule_loss(loss, log_pi, log_softmax, batch, lambda m: masked.append(m.cpu()))
    value.backward()
    return value.item(), logits.grad.float().cpu(), stats, masked[0]


def parity(device: torch.device, size: tuple[int, int, int], profile: str) -> dict:
    recipes = [r for r in load_methods().values() if r.rule is not None]
    cases = [(r, p, "token-mean") for r in recipes for p in r.hyperparameters]
    binary = next(r for r in recipes if r.id == "dppo_binary_tv")
    cases += [(binary, profile, mode) for mode in MODES if mode != "token-mean"]
    k = min(20, size[2])
    data = parity_inputs(*size, k)
    rows, cpu = [], torch.device("cpu")
    # On the CPU itself (--cpu) the other side takes the sequences in reverse order: the same kernels, other sums
    reverse = device == cpu
    other = {name: v.flip(0) for name, v in data.items()} if reverse else data
    for recipe, name, mode in cases:
        loss = Loss.of(recipe, name, mode, {})
        for dtype in TOLERANCE:
            ref_loss, ref_grad, ref_stats, ref_masked = loss_and_grad(loss, data, cpu, dtype)
            dev_loss, dev_grad, _, dev_masked = loss_and_grad(loss, other, device, dtype)
            if reverse:
                dev_grad, dev_masked = dev_grad.flip(0), dev_masked.flip(0)
            loss_err = abs(dev_loss - ref_loss) / max(abs(ref_loss), 1e-12)
            grad_err = (dev_grad - ref_grad).abs().max().item() / max(ref_grad.abs().max().item(), 1e-30)
            flipped = int((dev_masked != ref_masked).sum())  # token by token: flips both ways count, none cancel
            rows.append({
                "recipe": recipe.id, "profile": name, "loss_agg_mode": mode, "dtype": str(dtype).removeprefix("torch."),
                "loss_rel_err": loss_err, "grad_rel_err": grad_err, "mask_decisions_differing": flipped,
                "mask_frac": ref_stats.get("mask_frac"),
                "passed": loss_err <= TOLERANCE[dtype] and grad_err <= TOLERANCE[dtype],
            })  # fmt: skip
    against = "the CPU, sequences in reverse order" if reverse else "the CPU"
    return {"against": against, "cases": rows, "passed": all(r["passed"] for r in rows)}


# -- 2. Top-K cost --------------------------------------------------------------------------------------------
def topk_cost(device: torch.device, tokens: int, rounds: int) -> dict:
    data = topk_divergence.inputs(tokens, 151_936, 20, device)
    errors = topk_divergence.max_errors(data)
    t = topk_divergence.timings(data, rounds)
    base = t["log-softmax pass (the trainer's own)"]
    ratio = t["top-K TV+KL, engine normaliser reused"] / base
    return {
        "tokens": tokens, "vocab": 151_936, "k": 20, "seconds": t, "ratio": ratio, "goal": TOPK_GOAL,
        "goal_met": ratio <= TOPK_GOAL, "max_abs_err": errors,
        "passed": max(errors.values()) <= topk_divergence.CHECK_ATOL,
    }  # fmt: skip


# -- 3. the local trainer on the device -----------------------------------------------------------------------
def check_setting(cpu: bool):
    setting = find_setting("gpu_check")
    if not cpu:
        return setting
    local = setting.local.model_copy(update={
        "model": setting.local.model.model_copy(update=CPU_SETTING["model"]),
        "pretrain": setting.local.pretrain.model_copy(update=CPU_SETTING["pretrain"]),
        "threads": 1,
    })  # fmt: skip
    return setting.model_copy(update={"local": local, "train": setting.train.model_copy(update=CPU_SETTING["train"])})


def summary(rows: list[dict], window: int = 10) -> dict:
    def mean(key: str, part: list[dict]) -> float | None:
        values = [r[key] for r in part if r.get(key) is not None]
        return sum(values) / len(values) if values else None

    first, last = rows[:window], rows[-window:]
    seconds = sorted(r["perf/step_s"] for r in rows)
    return {
        "steps": len(rows),
        "step_s_median": seconds[len(seconds) // 2] if seconds else None,
        "reward_first": mean("train/reward_mean", first),
        "reward_last": mean("train/reward_mean", last),
        "abs_diff_first": mean("mismatch/abs_diff_mean", first),
        "abs_diff_last": mean("mismatch/abs_diff_mean", last),
        "abs_diff_max": max((r["mismatch/abs_diff_max"] for r in rows if r.get("mismatch/abs_diff_max")), default=None),
    }


def local_trainer(device: torch.device, out: Path, cpu: bool, deadline: float) -> dict:
    setting = check_setting(cpu)
    local = setting.local
    shutil.rmtree(out / "runs", ignore_errors=True)  # a fresh check, not the resumption of an earlier one
    train, _ = make_splits(local.task.seed, local.task.n_train, local.task.n_heldout, task_config(local))
    write_jsonl(train, out / "train.jsonl")
    start = time.perf_counter()
    base = out / "base"
    report = {"pretrain": pretrain(local, base, threads=local.threads, progress=False, device=device)}
    report["pretrain"]["wall_s"] = time.perf_counter() - start
    report["parameters"] = report["pretrain"]["parameters"]
    for i, method in enumerate(METHODS):
        share = (deadline - time.monotonic()) / (len(METHODS) - i)
        run_dir = RunDir(out / "runs" / method).create()
        run = LocalRun(resolve_run(setting, method, 0), base, out / "train.jsonl")
        trainer = LocalTrainer(run, run_dir, progress=False, device=device)
        outcome = trainer.fit(deadline=time.monotonic() + share)
        report[method] = {**outcome, **summary(run_dir.read_metrics())}
    report["passed"] = all(report[m]["steps"] > 0 for m in METHODS)
    return report


# -- the report -----------------------------------------------------------------------------------------------
def run_part(report: dict, name: str, fn) -> None:
    start = time.perf_counter()
    try:
        report[name] = fn()
    except Exception:
        report[name] = {"passed": False, "error": traceback.format_exc()}
    report[name]["wall_s"] = time.perf_counter() - start
    print(f"{name}: {'PASS' if report[name]['passed'] else 'FAIL'} ({report[name]['wall_s']:.0f} s)", flush=True)


def num(value: float | None, spec: str) -> str:
    """``value`` in ``spec``, or n/a where the report has none (a run of 0 steps has no medians or means)."""
    return "n/a" if value is None else format(value, spec)


def print_report(report: dict) -> None:
    p = report.get("parity", {})
    for r in p.get("cases", []):
        if not r["passed"] or r["recipe"] == "dppo_binary_tv":
            print(f"  {r['recipe']:28s} {r['profile']:8s} {r['loss_agg_mode']:24s} {r['dtype']:8s} "
                  f"loss {r['loss_rel_err']:.1e}  grad {r['grad_rel_err']:.1e}  flips {r['mask_decisions_differing']}"
                  f"{'' if r['passed'] else '  FAIL'}")  # fmt: skip
    if p.get("cases"):
        worst = {d: max(r["grad_rel_err"] for r in p["cases"] if r["dtype"] == d) for d in ("float32", "bfloat16")}
        print(f"  {len(p['cases'])} cases against {p['against']}; largest gradient error fp32 "
              f"{worst['float32']:.1e}, bf16 {worst['bfloat16']:.1e}")  # fmt: skip
    t = report.get("topk", {})
    if "ratio" in t:
        print(f"  top-K added {t['ratio']:.4f}x of the log-softmax pass at {t['tokens']} tokens "
              f"(goal <= {TOPK_GOAL}x: {'met' if t['goal_met'] else 'MISSED'})")  # fmt: skip
    tr = report.get("trainer", {})
    for m in METHODS:
        if m in tr:
            s = tr[m]
            print(f"  {m}: {s.get('status')} after {s.get('steps')} steps ({num(s.get('step_s_median'), '.2f')} "
                  f"s/step); reward {num(s.get('reward_first'), '.3f')} -> {num(s.get('reward_last'), '.3f')}; "
                  f"|pi - mu| {num(s.get('abs_diff_first'), '.2e')} -> {num(s.get('abs_diff_last'), '.2e')} "
                  f"(largest {num(s.get('abs_diff_max'), '.2e')})")  # fmt: skip
    for part in ("parity", "topk", "trainer"):
        if "error" in report.get(part, {}):
            print(f"{part} raised:\n{report[part]['error']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="the reduced form on the CPU (what CI runs)")
    p.add_argument("--out", type=Path, default=Path("results/gpu_check"))
    p.add_argument("--budget-s", type=float, default=420.0, help="seconds for everything (the trainer part stops)")
    p.add_argument("--distributions", type=Path, help="also write name==version of every distribution it imported")
    args = p.parse_args()
    deadline = time.monotonic() + args.budget_s
    if not args.cpu and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu for the reduced form", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.cpu else "cuda")
    sizes = SIZES[device.type]
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tolerance": {str(d).removeprefix("torch."): t for d, t in TOLERANCE.items()},
    }
    transformers.utils.logging.disable_progress_bar()  # a bar per model save and load, dozens of them
    print(f"GPU check on {report['device']}, torch {report['torch']}, CUDA {report['cuda']}", flush=True)
    profile = find_setting("gpu_check").hyperparameter_profile
    run_part(report, "parity", lambda: parity(device, sizes["parity"], profile))
    run_part(report, "topk", lambda: topk_cost(device, sizes["topk_tokens"], sizes["topk_rounds"]))
    run_part(report, "trainer", lambda: local_trainer(device, args.out, args.cpu, deadline))
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")  # first: a printing error loses nothing
    print_report(report)
    if args.distributions:
        args.distributions.write_text("".join(f"{d}\n" for d in imported_distributions()))
    return 0 if all(report[part]["passed"] for part in ("parity", "topk", "trainer")) else 1


def imported_distributions() -> list[str]:
    """name==version of the installed distributions whose modules this process imported (the check's closure)."""
    from importlib.metadata import packages_distributions, version

    import math_verify  # noqa: F401  (the grader's worker processes import it, in their own interpreters)

    owners = packages_distributions()
    names = {d for m in list(sys.modules) for d in owners.get(m.split(".")[0], ())}
    return sorted(f"{n}=={version(n)}" for n in names)


if __name__ == "__main__":
    sys.exit(main())
