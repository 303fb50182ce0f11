"""Fig. 2 from mismatch probe records: pi/mu and the TV of every probed token against mu, in bins of mu.

The figure draws the tokens as dots (a fixed, seeded sample of them when there are many) under the 5%, 50% and
95% quantiles of each mu bin; the table gives the same quantiles, so the ratio's spread at low mu and its
narrowing toward 1 as mu -> 1 can be read as numbers. Above it, one line per probed setting sums its mismatch up:
the mean |pi - mu| (the paper's Fig. 3 metric), how far the log-ratio reaches, and the mean TV.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from dppo_bench.aggregate.figures import save_figure
from dppo_bench.aggregate.tables import markdown_row, write_tables
from dppo_bench.config import Experiment, find_setting
from dppo_bench.errors import UserError
from dppo_bench.probe.tokens import MismatchTokens, read_tokens
from dppo_bench.rundir import probe_record

BIN_EDGES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
QUANTILES = (0.05, 0.5, 0.95)
MAX_DOTS = 20_000


def binned(tokens: MismatchTokens, values: np.ndarray) -> list[dict]:
    """Per mu bin: the token count and the quantiles of ``values`` (None where the bin is empty)."""
    rows = []
    index = np.clip(np.searchsorted(BIN_EDGES, tokens.mu, side="right") - 1, 0, len(BIN_EDGES) - 2)
    for b in range(len(BIN_EDGES) - 1):
        chosen = values[index == b]
        q = np.quantile(chosen, QUANTILES) if chosen.size else [None] * len(QUANTILES)
        rows.append({"lo": BIN_EDGES[b], "hi": BIN_EDGES[b + 1], "tokens": int(chosen.size), "q": list(q)})
    return rows


QUANTITIES = {"ratio": "π/μ", "abs_diff": "|π − μ|", "tv": "TV"}  # a probe panel's quantity: its table name


def quantity(tokens: MismatchTokens, probe: str) -> np.ndarray:
    return {"ratio": tokens.ratio, "abs_diff": np.abs(tokens.pi - tokens.mu), "tv": tokens.tv}[probe]


def table_rows(records: dict[str, MismatchTokens]) -> list[dict]:
    """One row per setting and mu bin: tokens, and the 5/50/95% quantiles of the ratio, |pi - mu| and the TV."""
    rows = []
    for setting, tokens in records.items():
        per_quantity = {name: binned(tokens, quantity(tokens, probe)) for probe, name in QUANTITIES.items()}
        for b, first in enumerate(per_quantity["π/μ"]):
            row = {"setting": setting, "mu bin": f"[{first['lo']:g}, {first['hi']:g})", "tokens": first["tokens"]}
            for name, bins in per_quantity.items():
                row.update({f"{name} q{round(100 * q):02d}": v for q, v in zip(QUANTILES, bins[b]["q"], strict=True)})
            rows.append(row)
    return rows


def summary(tokens: MismatchTokens) -> dict[str, float]:
    """One setting's mismatch in numbers: mean |pi - mu|, the 99% quantile and the largest |log pi/mu|, the mean TV,
    and the share of tokens sampled with mu < 0.01 (where a ratio is most easily extreme)."""
    tiny = np.finfo(np.float32).tiny
    log_ratio = np.abs(np.log(np.maximum(tokens.pi, tiny)) - np.log(np.maximum(tokens.mu, tiny)))
    return {
        "mean |π − μ|": float(np.abs(tokens.pi - tokens.mu).mean()),
        "|log π/μ| q99": float(np.quantile(log_ratio, 0.99)),
        "|log π/μ| max": float(log_ratio.max()),
        "mean TV": float(tokens.tv.mean()),
        "μ < 0.01": float((tokens.mu < 0.01).mean()),
    }


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, int | str) else f"{value:.4g}"


def to_markdown(experiment: Experiment, records: dict[str, MismatchTokens], rows: list[dict]) -> str:
    head = list(rows[0]) if rows else ["setting"]
    lines = [f"# {experiment.title} [{experiment.paper_item}]", ""]
    for setting, tokens in records.items():
        lines.append(f"- {setting}: {tokens.mu.size} tokens; TV over {tokens.meta.get('tv_over', 'unrecorded')}")
    sums = {setting: summary(tokens) for setting, tokens in records.items()}
    names = list(next(iter(sums.values()))) if sums else []
    lines += ["", markdown_row(["setting", "rollout", *names]), "|" + "---|" * (len(names) + 2)]
    for setting, values in sums.items():
        rollout = records[setting].meta.get("rollout", "-")
        lines.append(markdown_row([setting, rollout, *(_cell(v) for v in values.values())]))
    lines += ["", markdown_row(head), "|" + "---|" * len(head)]
    lines += [markdown_row([_cell(row[h]) for h in head]) for row in rows]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    return out.getvalue()


def to_latex(rows: list[dict]) -> str:
    head = list(rows[0]) if rows else ["setting"]
    tex = {"π": r"$\pi$", "μ": r"$\mu$", "_": r"\_"}

    def esc(text: str) -> str:
        for a, b in tex.items():
            text = text.replace(a, b)
        return text

    lines = [r"\begin{tabular}{ll" + "r" * (len(head) - 2) + "}", r"\toprule", " & ".join(map(esc, head)) + r" \\"]
    lines.append(r"\midrule")
    lines += [" & ".join(esc(_cell(row[h])) for h in head) + r" \\" for row in rows]
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"


def draw(experiment: Experiment, records: dict[str, MismatchTokens]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = experiment.panels
    cols = min(experiment.panel_columns, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    rng = np.random.default_rng(0)  # which tokens are drawn as dots: fixed, so the figure is reproducible
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for i, (setting, tokens) in enumerate(records.items()):
            if panel.setting is not None and setting != panel.setting:
                continue
            color = plt.cm.tab10(i % 10)
            values = quantity(tokens, panel.probe)
            shown = rng.permutation(values.size)[:MAX_DOTS]
            ax.scatter(tokens.mu[shown], values[shown], s=2, alpha=0.15, color=color, rasterized=True)
            bins = binned(tokens, values)
            centres = [(b["lo"] + b["hi"]) / 2 for b in bins if b["tokens"]]
            for j, style in enumerate((":", "-", ":")):
                label = f"{setting}: median, 5% and 95%" if j == 1 else None
                qs = [b["q"][j] for b in bins if b["tokens"]]
                ax.plot(centres, qs, style, color=color, linewidth=1.4, label=label)
        if panel.probe == "ratio":
            ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_yscale(panel.yscale)
        ax.set_title(panel.title)
        ax.set_xlabel("rollout probability μ of the sampled token")
        ax.set_xlim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7, frameon=False)
    fig.suptitle(f"{experiment.title} [{experiment.paper_item}]")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def aggregate_probes(experiment: Experiment, root: Path, out: Path, only: str | None) -> None:
    """Tables and figure of a probe experiment from the records under ``root`` (results/probes)."""
    records = {s: read_tokens(probe_record(s, root)) for s in experiment.probes}
    for setting, tokens in records.items():
        if not tokens.probed_with(find_setting(setting)):
            raise UserError(f"{probe_record(setting, root)}: probed with another version of setting {setting!r}; rerun")
    if only != "figure":
        rows = table_rows(records)
        write_tables(out, to_markdown(experiment, records, rows), to_csv(rows), to_latex(rows))
    if only != "table":
        import matplotlib.pyplot as plt

        fig = draw(experiment, records)
        save_figure(fig, out / "figure")
        plt.close(fig)
