"""Decision-threshold selection by F1 of the positive class, as in study A (section 4.3).

A patient is predicted positive when its probability is >= the threshold. Grids are built with np.round so
that 0.35 is 0.35 and not 0.35000000000000003, which keeps thresholds usable as dictionary keys and tags.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ORIGINAL_GRID", "DP_GRID", "make_grid", "f1_by_threshold", "best_f1_threshold"]


def make_grid(start: float, stop: float, step: float) -> np.ndarray:
    """Inclusive grid start..stop, read-only so a shared module constant cannot be edited by accident."""
    count = int(round((stop - start) / step)) + 1
    grid = np.round(start + step * np.arange(count), 10)
    grid.setflags(write=False)
    return grid


ORIGINAL_GRID = make_grid(0.20, 0.80, 0.05)  # the paper's grid for the original (non-private) features
DP_GRID = make_grid(0.05, 0.95, 0.05)  # the paper's wider grid for DP-perturbed features


def f1_by_threshold(y_true, proba, grid) -> np.ndarray:
    """F1 of the positive class at every threshold of `grid`, all at once (0/0 counts as 0.0)."""
    y = np.asarray(y_true).ravel().astype(bool)
    p = np.asarray(proba, dtype=float).ravel()
    g = np.asarray(grid, dtype=float).ravel()
    if y.shape != p.shape:
        raise ValueError(f"y_true and proba differ in length: {y.size} vs {p.size}")
    pred = p[None, :] >= g[:, None]
    tp = np.count_nonzero(pred & y, axis=1)
    n_pred = np.count_nonzero(pred, axis=1)
    denom = n_pred + np.count_nonzero(y)  # 2tp + fp + fn
    return np.divide(2.0 * tp, denom, out=np.zeros(g.size), where=denom > 0)


def best_f1_threshold(y_true, proba, grid) -> float:
    """The grid threshold that maximises positive-class F1.

    Ties are common on 17 patients (several thresholds give the same confusion matrix), so they are broken
    deterministically: the threshold closest to 0.5 wins (the least committal choice), then the lowest.
    """
    g = np.asarray(grid, dtype=float).ravel()
    if g.size == 0:
        raise ValueError("empty threshold grid")
    f1 = f1_by_threshold(y_true, proba, g)
    best = np.flatnonzero(f1 == f1.max())
    distance = np.round(np.abs(g[best] - 0.5), 10)  # rounding keeps 0.45 and 0.55 equally close
    closest = best[distance == distance.min()]
    return float(g[closest[np.argmin(g[closest])]])
