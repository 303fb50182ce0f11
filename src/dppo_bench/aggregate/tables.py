"""An experiment's table: one row per curve (setting x method, seeds averaged), one column per statistic."""

from __future__ import annotations

import csv
import io
import statistics

from dppo_bench.aggregate.collect import Run
from dppo_bench.config import Column, Experiment


def series_stat(series: dict[int, float], stat: str) -> float | None:
    if not series:
        return None
    values = [series[s] for s in sorted(series)]
    if stat == "final":
        return values[-1]
    if stat == "peak":
        return max(values)
    if stat == "min":
        return min(values)
    return statistics.fmean(values)


def grouped(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs by curve label, in experiment order (a label's runs differ only in the seed)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.label, []).append(run)
    return groups


def status_of(runs: list[Run]) -> str:
    usable = [r for r in runs if r.usable]
    if len(usable) == len(runs):
        return ", ".join(sorted({r.status for r in runs}))
    missing = [f"seed {r.seed}: {r.status}" for r in runs if not r.usable]
    return "; ".join(missing)


def table_rows(experiment: Experiment, runs: list[Run]) -> list[dict]:
    rows = []
    for label, group in grouped(runs).items():
        usable = [r for r in group if r.usable]
        row = {
            "run": label,
            "setting": group[0].setting,
            "method": group[0].method,
            "seeds": ",".join(str(r.seed) for r in usable),
            "status": status_of(group),
        }
        for col in experiment.columns:
            values = [v for r in usable if (v := series_stat(r.series.get(col.metric, {}), col.stat)) is not None]
            row[col.title] = statistics.fmean(values) if values else None
        rows.append(row)
    return rows


def _fmt(value: float | None, missing: str = "missing") -> str:
    if value is None:
        return missing
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3e}"


def _header(columns: list[Column]) -> list[str]:
    return ["run", "seeds", "status", *(c.title for c in columns)]


def to_markdown(experiment: Experiment, rows: list[dict]) -> str:
    head = _header(experiment.columns)
    lines = [f"# {experiment.title} ({experiment.paper_item})", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for row in rows:
        cells = [row["run"], row["seeds"] or "-", row["status"], *(_fmt(row[c.title]) for c in experiment.columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_csv(experiment: Experiment, rows: list[dict]) -> str:
    out = io.StringIO()
    fields = ["run", "setting", "method", "seeds", "status", *(c.title for c in experiment.columns)]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row[k] is None else row[k]) for k in fields})
    return out.getvalue()


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        text = text.replace(a, b)
    return text.replace("|", r"$|$").replace("π", r"$\pi$").replace("μ", r"$\mu$").replace("−", "-")


def to_latex(experiment: Experiment, rows: list[dict]) -> str:
    head = _header(experiment.columns)
    lines = [
        r"\begin{tabular}{l" + "l" * 2 + "r" * len(experiment.columns) + "}",
        r"\toprule",
        " & ".join(_tex(h) for h in head) + r" \\",
        r"\midrule",
    ]
    for row in rows:
        cells = [
            row["run"],
            row["seeds"] or "-",
            row["status"],
            *(_fmt(row[c.title], "--") for c in experiment.columns),
        ]
        lines.append(" & ".join(_tex(c) for c in cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
