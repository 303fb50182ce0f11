"""An experiment's figure: the paper's panel layout, one curve per run label (seeds averaged).

Curves are Gaussian-smoothed with the panel's sigma (the paper: 2 on every curve but AIME) and
drawn over their raw values, shaded; evaluation panels are drawn raw with markers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dppo_bench.aggregate.collect import Run
from dppo_bench.aggregate.tables import grouped
from dppo_bench.config import Experiment


def gaussian_smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian filter over the sequence index, edges extended with the end values."""
    if sigma <= 0 or len(values) < 2:
        return values
    radius = int(math.ceil(4 * sigma))
    x = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (x / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.concatenate([np.full(radius, values[0]), values, np.full(radius, values[-1])])
    return np.convolve(padded, kernel, mode="valid")


def mean_curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps every usable seed has, and the mean over seeds there."""
    series = [r.series[metric] for r in runs if r.usable and r.series.get(metric)]
    if not series:
        return np.array([]), np.array([])
    steps = sorted(set.intersection(*(set(s) for s in series)))
    return np.array(steps), np.array([np.mean([s[t] for s in series]) for t in steps])


def plot(experiment: Experiment, runs: list[Run], out_stem: Path, references: dict | None = None) -> None:
    """The figure as png and pdf; the paper's final values, where known, as dotted lines in the run's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = experiment.panels
    cols = min(experiment.panel_columns, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    groups = grouped(runs)
    colors = {label: plt.cm.tab10(i % 10) for i, label in enumerate(groups)}
    for ax, panel in zip(axes.flat, panels, strict=False):
        for label, group in groups.items():
            if panel.setting is not None and group[0].setting != panel.setting:
                continue
            style = "--" if group[0].dashed else "-"
            for metric in panel.metrics:
                steps, values = mean_curve(group, metric)
                if not len(steps):
                    continue
                if panel.smooth > 0:
                    ax.plot(steps, values, style, color=colors[label], alpha=0.2, linewidth=0.8)
                    ax.plot(steps, gaussian_smooth(values, panel.smooth), style, color=colors[label], linewidth=1.5)
                else:
                    ax.plot(steps, values, style, color=colors[label], marker="o", markersize=3, linewidth=1.3)
                ref = (references or {}).get((group[0].setting, group[0].method, metric, "final"))
                if ref is not None:
                    ax.axhline(ref.value, color=colors[label], linestyle=":", linewidth=1.0)
        ax.set_title(panel.title)
        ax.set_xlabel("step")
        if panel.ylabel:
            ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = []
    for label, group in groups.items():
        (line,) = axes.flat[0].plot([], [], "--" if group[0].dashed else "-", color=colors[label])
        usable = [r for r in group if r.usable]
        suffix = (
            "" if len(usable) == len(group) else f" [{', '.join(sorted({r.status for r in group if not r.usable}))}]"
        )
        line.set_label(label + suffix)
        handles.append(line)
    if references:
        (paper,) = axes.flat[0].plot(
            [], [], ":", color="grey", label="dotted: the paper's final value (read off its figure)"
        )
        handles.append(paper)
    fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=8, frameon=False)
    fig.suptitle(f"{experiment.title} [{experiment.paper_item}]")
    fig.tight_layout(rect=(0, 0.04 + 0.035 * math.ceil(len(handles) / 5), 1, 0.96))
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    for ext in (".png", ".pdf"):
        fig.savefig(out_stem.with_suffix(ext), dpi=150)
    plt.close(fig)
