"""An experiment's table: one row per curve (setting x method, seeds averaged), one column per statistic."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from dppo_bench.aggregate.collect import Run
from dppo_bench.aggregate.reference import Key, References
from dppo_bench.aggregate.series import series_stat
from dppo_bench.config import Column, Experiment
from dppo_bench.io import atomic_write_text


def write_tables(out: Path, markdown: str, csv_text: str, latex: str) -> None:
    """table.md, table.csv and table.tex of ``out``, each whole or not at all; the markdown is printed too."""
    for name, text in (("table.md", markdown), ("table.csv", csv_text), ("table.tex", latex)):
        atomic_write_text(out / name, text)
    print(markdown)


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


def paper_columns(experiment: Experiment, references: References) -> list[Column]:
    """The columns for which the paper has a value for some run of the experiment."""
    runs = {(g.setting, m) for g in experiment.runs for m in g.methods}
    keys = {(k.metric, k.stat) for k in references if (k.setting, k.method) in runs}
    return [c for c in experiment.columns if (c.metric, c.stat) in keys]


def table_rows(experiment: Experiment, runs: list[Run], references: References | None = None) -> list[dict]:
    """One row per curve; with references, each column that has them gains "(paper)" and "Δ" (ours - paper).

    ``paper_items`` of a row: the figures its paper values were read off (for the footnote).
    """
    references = references or {}
    with_paper = paper_columns(experiment, references)
    rows = []
    for label, group in grouped(runs).items():
        usable = [r for r in group if r.usable]
        row = {
            "run": label,
            "setting": group[0].setting,
            "method": group[0].method,
            "seeds": ",".join(str(r.seed) for r in usable),
            "status": status_of(group),
            "paper_items": (),
        }
        for col in experiment.columns:
            stats = (series_stat(r.series.get(col.metric, {}), col.stat, col.smooth) for r in usable)
            values = [v for v in stats if v is not None]
            row[col.title] = statistics.fmean(values) if values else None
            if col in with_paper:
                ref = references.get(Key(group[0].setting, group[0].method, col.metric, col.stat, None))
                row[f"{col.title} (paper)"] = ref.value if ref else None
                row[f"{col.title} Δ"] = row[col.title] - ref.value if ref and row[col.title] is not None else None
                row["paper_items"] += ref.paper_items if ref else ()
        rows.append(row)
    return rows


def value_titles(experiment: Experiment, rows: list[dict]) -> list[str]:
    """The value columns present in ``rows``, in table order."""
    titles = []
    for col in experiment.columns:
        titles += [t for t in (col.title, f"{col.title} (paper)", f"{col.title} Δ") if rows and t in rows[0]]
    return titles


def _cell(row: dict, title: str, missing: str) -> str:
    """A value; a missing result is ``missing``, a missing paper value or delta just "-"."""
    value = row[title]
    if value is None:
        return "-" if title.endswith(("(paper)", "Δ")) else missing
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3e}"


def markdown_row(cells: list[str]) -> str:
    """One table row; a "|" inside a cell (|π − μ|) is escaped, or it would end the cell."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def to_markdown(experiment: Experiment, rows: list[dict]) -> str:
    titles = value_titles(experiment, rows)
    head = ["run", "seeds", "status", *titles]
    lines = [f"# {experiment.title} [{experiment.paper_item}]", "", markdown_row(head)]
    lines.append("|" + "---|" * len(head))
    for row in rows:
        lines.append(
            markdown_row([row["run"], row["seeds"] or "-", row["status"], *(_cell(row, t, "missing") for t in titles)])
        )
    items = sorted({item for row in rows for item in row["paper_items"]})
    if items:
        lines += [
            "",
            f"Paper values are read off the paper's {', '.join(items)} by eye, each to the precision given in "
            "results/reference/paper.csv.",
        ]
    return "\n".join(lines) + "\n"


def to_csv(experiment: Experiment, rows: list[dict]) -> str:
    out = io.StringIO()
    fields = ["run", "setting", "method", "seeds", "status", *value_titles(experiment, rows)]
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
    titles = value_titles(experiment, rows)
    head = ["run", "seeds", "status", *titles]
    lines = [
        r"\begin{tabular}{l" + "l" * 2 + "r" * len(titles) + "}",
        r"\toprule",
        " & ".join(_tex(h) for h in head) + r" \\",
        r"\midrule",
    ]
    for row in rows:
        cells = [
            row["run"],
            row["seeds"] or "-",
            row["status"],
            *(_cell(row, t, "--") for t in titles),
        ]
        lines.append(" & ".join(_tex(c) for c in cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
