"""App. D's table: each run's most frequently masked tokens among A > 0 and A < 0 tokens, decoded.

The counts are the runs' per-step ``tr/masked_token_counts`` (dppo_bench.methods.masked_tokens), summed over the
experiment's steps (all, when it names none); tokens are decoded with the tokenizer the run trained with.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.aggregate.collect import Run
from dppo_bench.config import Experiment, Setting
from dppo_bench.masked_token_files import read_rank_files
from dppo_bench.methods.masked_tokens import SIDES, top_tokens
from dppo_bench.rundir import RunDir

SIDE_TITLES = {"pos": "A > 0 (r > 1 + ε_high)", "neg": "A < 0 (r < 1 − ε_low)"}


def step_counts(run_dir: RunDir, steps: list[int] | None) -> list[dict]:
    """The recorded counts of the chosen steps (every step with counts when ``steps`` is None): the local backend's
    metrics rows, or the verl backend's per-rank files up to the last step its metrics record."""
    rows = run_dir.read_metrics()
    by_step = {r["step"]: r[canonical.MASKED_TOKENS] for r in rows if isinstance(r.get(canonical.MASKED_TOKENS), dict)}
    verl_dir = run_dir.masked_tokens
    if verl_dir.is_dir():
        last = max((r["step"] for r in rows), default=0)
        by_step.update({s: c for s, c in read_rank_files(verl_dir).items() if s <= last})
    return [by_step[s] for s in sorted(by_step) if steps is None or s in steps]


def tokenizer_of(run_dir: RunDir, setting: Setting):
    """The tokenizer the run trained with: the local base model's, or the verl setting's hub model's."""
    from transformers import AutoTokenizer

    if setting.backend == "local":
        return AutoTokenizer.from_pretrained(run_dir.read_run()["inputs"]["base_model"])
    return AutoTokenizer.from_pretrained(setting.verl.model.path, revision=setting.verl.model.revision)


def token_rows(
    experiment: Experiment, runs: list[Run], root: Path, settings: dict[str, Setting], decode_with=tokenizer_of
) -> list[dict]:
    """One row per run, side and rank: the token (decoded, repr-quoted so spaces show), its id and its count."""
    table = experiment.masked_tokens
    rows = []
    for run in runs:
        if not run.usable:
            continue
        run_dir = RunDir.of(run.setting, run.method, run.seed, root)
        records = step_counts(run_dir, table.steps)
        decode: Callable[[int], str] | None = None
        for side in SIDES:
            for rank, (token_id, count) in enumerate(top_tokens(records, side, table.top), start=1):
                if decode is None:
                    tokenizer = decode_with(run_dir, settings[run.setting])
                    decode = lambda i, tok=tokenizer: tok.decode([i])  # noqa: E731
                rows.append(
                    {
                        "run": run.label,
                        "seed": run.seed,
                        "side": SIDE_TITLES[side],
                        "rank": rank,
                        "token": repr(decode(token_id)),
                        "id": token_id,
                        "count": count,
                    }
                )
    return rows


def to_markdown(experiment: Experiment, runs: list[Run], rows: list[dict]) -> str:
    steps = experiment.masked_tokens.steps
    where = "every step" if steps is None else f"step(s) {', '.join(map(str, steps))}"
    lines = [f"# {experiment.title} [{experiment.paper_item}]", "", f"Counts summed over {where}."]
    for run in runs:
        if not run.usable:
            lines.append(f"- {run.label} (seed {run.seed}): {run.status}")
    for side in SIDES:
        chosen = [r for r in rows if r["side"] == SIDE_TITLES[side]]
        lines += [
            "",
            f"## {SIDE_TITLES[side]}",
            "",
            "| run | seed | rank | token | id | count |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['run']} | {r['seed']} | {r['rank']} | `{r['token']}` | {r['id']} | {r['count']} |" for r in chosen
        ]
        if not chosen:
            lines.append("| - | - | - | no masked token recorded | - | - |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(
        out, fieldnames=["run", "seed", "side", "rank", "token", "id", "count"], lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}"}
LATEX |= {"^": r"\^{}", "~": r"\~{}", "ε": r"$\epsilon$", "−": "-"}


def _tex(text: str) -> str:
    return "".join(LATEX.get(c, c) for c in text)


def to_latex(rows: list[dict]) -> str:
    lines = [r"\begin{tabular}{llrlrr}", r"\toprule", r"run & side & rank & token & id & count \\", r"\midrule"]
    for r in rows:
        cells = [_tex(r["run"]), _tex(r["side"]), str(r["rank"]), rf"\texttt{{{_tex(r['token'])}}}", str(r["id"])]
        lines.append(" & ".join([*cells, str(r["count"])]) + r" \\")
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"
