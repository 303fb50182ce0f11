"""An experiment's figure: the paper's panel layout, one curve per run label (seeds averaged).

Curves are Gaussian-smoothed with the panel's sigma (the paper: 2 on every curve but AIME) and
drawn over their raw values, shaded; evaluation panels are drawn raw with markers. The paper's readings
(results/reference/paper.csv) of a shown run and metric are drawn in the run's colour.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dppo_bench.aggregate.collect import Run
from dppo_bench.aggregate.reference import AT_STEP, Key, References, at_steps
from dppo_bench.aggregate.series import gaussian_smooth
from dppo_bench.aggregate.tables import grouped
from dppo_bench.config import Experiment, Panel
from dppo_bench.io import atomic_write


def mean_curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps every usable seed has, and the mean over seeds there."""
    series = [r.series[metric] for r in runs if r.usable and r.series.get(metric)]
    if not series:
        return np.array([]), np.array([])
    steps = sorted(set.intersection(*(set(s) for s in series)))
    return np.array(steps), np.array([np.mean([s[t] for s in series]) for t in steps])


# the paper's "Max & Min of pi - mu" panel marks where there is no mismatch
ZERO_LINE_METRICS = {"mismatch/diff_min", "mismatch/diff_max"}
ZERO_LINE_LABEL = "no mismatch (π = μ)"


def draw_references(ax, references: References, group: list[Run], metric: str, color) -> set[str]:
    """The paper's readings of this run and metric: its final value dotted, values at a step as crosses."""
    setting, method = group[0].setting, group[0].method
    drawn = set()
    final = references.get(Key(setting, method, metric, "final", None))
    if final is not None:
        ax.axhline(final.value, color=color, linestyle=":", linewidth=1.0)
        drawn.add("final")
    for step, ref in at_steps(references, setting, method, metric):
        ax.plot([step], [ref.value], "x", color=color, markersize=7, markeredgewidth=1.5)
        drawn.add(AT_STEP)
    return drawn


def draw_zero_line(ax, panel: Panel) -> None:
    """A dashed line at 0 labelled as in the paper, on panels of the signed pi - mu extremes."""
    if ZERO_LINE_METRICS & set(panel.metrics):
        ax.axhline(0.0, color="black", linestyle="--", linewidth=0.9, label=ZERO_LINE_LABEL)
        ax.legend(loc="upper right", fontsize=7, frameon=False)


def draw_panel(ax, panel: Panel, groups: dict[str, list[Run]], colors: dict, references: References) -> set[str]:
    """One panel's curves; returns the kinds of paper reading drawn on it."""
    drawn = set()
    for label, group in groups.items():
        if panel.setting is not None and group[0].setting != panel.setting:
            continue
        style = "--" if group[0].dashed else "-"
        for metric in panel.metrics:
            steps, values = mean_curve(group, metric)
            if len(steps) and panel.smooth > 0:
                ax.plot(steps, values, style, color=colors[label], alpha=0.2, linewidth=0.8)
                ax.plot(steps, gaussian_smooth(values, panel.smooth), style, color=colors[label], linewidth=1.5)
            elif len(steps):
                ax.plot(steps, values, style, color=colors[label], marker="o", markersize=3, linewidth=1.3)
            drawn |= draw_references(ax, references, group, metric, colors[label])
    draw_zero_line(ax, panel)
    ax.set_yscale(panel.yscale)
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    if panel.ylabel:
        ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    return drawn


REFERENCE_LEGEND = {
    "final": (":", "dotted: the paper's final value (read off its figure)"),
    AT_STEP: ("x", "cross: the paper's value at that step (read off its figure)"),
}


def legend_handles(ax, groups: dict[str, list[Run]], colors: dict, drawn: set[str]) -> list:
    handles = []
    for label, group in groups.items():
        (line,) = ax.plot([], [], "--" if group[0].dashed else "-", color=colors[label])
        usable = [r for r in group if r.usable]
        suffix = (
            "" if len(usable) == len(group) else f" [{', '.join(sorted({r.status for r in group if not r.usable}))}]"
        )
        line.set_label(label + suffix)
        handles.append(line)
    for kind, (style, text) in REFERENCE_LEGEND.items():
        if kind in drawn:
            handles.append(ax.plot([], [], style, color="grey", label=text)[0])
    return handles


def draw(experiment: Experiment, runs: list[Run], references: References | None = None):
    """The figure (a matplotlib Figure), in the paper's panel layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = experiment.panels
    cols = min(experiment.panel_columns, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    groups = grouped(runs)
    colors = {label: plt.cm.tab10(i % 10) for i, label in enumerate(groups)}
    drawn = set()
    for ax, panel in zip(axes.flat, panels, strict=False):
        drawn |= draw_panel(ax, panel, groups, colors, references or {})
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = legend_handles(axes.flat[0], groups, colors, drawn)
    fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=8, frameon=False)
    fig.suptitle(f"{experiment.title} [{experiment.paper_item}]")
    fig.tight_layout(rect=(0, 0.04 + 0.035 * math.ceil(len(handles) / 5), 1, 0.96))
    return fig


def plot(experiment: Experiment, runs: list[Run], out_stem: Path, references: References | None = None) -> None:
    """The figure as png and pdf."""
    import matplotlib.pyplot as plt

    fig = draw(experiment, runs, references)
    save_figure(fig, out_stem)
    plt.close(fig)


def save_figure(fig, out_stem: Path) -> None:
    """``out_stem``.png and .pdf, each whole or not at all (a full disk leaves the old figure, never a part)."""
    for ext in ("png", "pdf"):
        atomic_write(out_stem.with_suffix(f".{ext}"), lambda f, ext=ext: fig.savefig(f, format=ext, dpi=150))
