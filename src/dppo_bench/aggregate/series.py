"""One run's metric over its steps: the paper's Gaussian smoothing, and the statistics tables report."""

from __future__ import annotations

import math
import statistics

import numpy as np


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


def series_stat(series: dict[int, float], stat: str, smooth: float = 0.0) -> float | None:
    """``stat`` of the values in step order, after smoothing with sigma ``smooth`` (0: raw). A peak of a noisy
    per-step curve is its noise's maximum; the paper's peaks are read off curves smoothed with sigma 2."""
    if not series:
        return None
    values = [float(v) for v in gaussian_smooth(np.array([series[s] for s in sorted(series)]), smooth)]
    tenth = max(1, len(values) // 10)
    if stat == "start":
        return statistics.fmean(values[:tenth])
    if stat == "end":
        return statistics.fmean(values[-tenth:])
    if stat == "final":
        return values[-1]
    if stat == "peak":
        return max(values)
    if stat == "min":
        return min(values)
    return statistics.fmean(values)
