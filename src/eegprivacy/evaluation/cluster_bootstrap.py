"""Intervals over patients: a stratified cluster bootstrap of per-patient LOSO predictions, combined with seeds.

Study A's privacy unit is the patient, so an interval that says how a number would move on another cohort must
resample patients, not windows and not only noise seeds. Every LOSO evaluation here ends in one prediction per
patient; resampling those predictions (within each class, so every resample keeps both classes and AUROC stays
defined) and, independently, the seeds (noise draws and MLP initialisations) gives an interval over
``subjects+seeds``. Two arms evaluated on the same patients and seeds (a release and its matched null) are
compared *paired*: the same patient resample and the same seed resample enter both, so the difference's interval
is not inflated by the cohort variation the two share.

The functions are vectorised over leading axes: ``scores`` of shape (..., n_patients) give one value per leading
index, so a whole (seeds × resamples) grid is one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

__all__ = ["auroc_along", "balanced_accuracy_along", "bootstrap_indices", "seed_indices", "combine_seeds",
           "percentile_interval", "bootstrap_p_value", "holm", "utility_horizon"]

_BOOTSTRAP_STREAM = 0x424F4F54
_SEED_STREAM = 0x53454544


def auroc_along(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """AUROC along the last axis (ties count one half), vectorised over leading axes; NaN with one class."""
    scores = np.asarray(scores, dtype=float)
    y = np.broadcast_to(np.asarray(y, dtype=int), scores.shape)
    ranks = rankdata(scores, axis=-1)
    n1 = y.sum(-1)
    n0 = y.shape[-1] - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(y == 1, ranks, 0.0).sum(-1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)


def balanced_accuracy_along(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean of sensitivity and specificity of 0/1 predictions along the last axis; NaN with one class."""
    pred = np.asarray(pred, dtype=float)
    y = np.broadcast_to(np.asarray(y, dtype=float), pred.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = (pred * y).sum(-1) / y.sum(-1)
        tnr = ((1 - pred) * (1 - y)).sum(-1) / (1 - y).sum(-1)
    return (tpr + tnr) / 2.0


def bootstrap_indices(y: np.ndarray, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n) patient indices resampled with replacement within each class: a stratified cluster
    bootstrap (the patient is the unit; every resample keeps both classes, so AUROC is defined)."""
    rng = np.random.default_rng([_BOOTSTRAP_STREAM, seed])
    y = np.asarray(y)
    out = np.empty((n_resamples, len(y)), dtype=int)
    for label in np.unique(y):
        where = np.flatnonzero(y == label)
        out[:, where] = where[rng.integers(0, len(where), size=(n_resamples, len(where)))]
    return out


def seed_indices(n_seeds: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n_seeds) seed indices resampled with replacement (the seed half of the combined bootstrap)."""
    return np.random.default_rng([_SEED_STREAM, seed]).integers(0, n_seeds, size=(n_resamples, n_seeds))


def combine_seeds(per_seed: np.ndarray, seed_idx: np.ndarray) -> np.ndarray:
    """Replicate b: the mean over seed resample ``seed_idx[b]`` of the seeds' values on patient resample b.

    ``per_seed`` is (seeds, resamples): each seed's metric on every patient resample."""
    return per_seed[seed_idx, np.arange(per_seed.shape[1])[:, None]].mean(axis=1)


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval of the finite replicates; NaNs when fewer than two are finite."""
    replicates = np.asarray(replicates, dtype=float)
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size < 2:
        return float("nan"), float("nan")
    alpha = 1.0 - confidence
    low, high = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def bootstrap_p_value(replicates: np.ndarray) -> float:
    """One-sided p-value of "the difference is at most 0" from bootstrap replicates of a difference:
    (1 + #replicates <= 0) / (1 + #replicates), never 0 (Davison & Hinkley's add-one rule)."""
    replicates = np.asarray(replicates, dtype=float)
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return float("nan")
    return float((1 + np.count_nonzero(replicates <= 0)) / (1 + replicates.size))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaNs stay NaN and do not count."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def utility_horizon(epsilons: Sequence[float], keeps_utility: Sequence[bool]) -> float | None:
    """The smallest ε at which the release keeps utility (its difference from the matched null is significant
    after the table's correction); None when no ε does."""
    cleared = [float(e) for e, ok in zip(epsilons, keeps_utility) if bool(ok)]
    return min(cleared) if cleared else None
