"""Metrics of bootstrap resamples given as row multiplicities, without materialising the resamples.

A cluster bootstrap that resamples whole groups of rows (subjects, target models, or both crossed) produces data
sets in which every row of the original appears an integer number of times. Materialising each resample (index,
concatenate, sort, score) costs a sort of the whole resample per replicate; here every row is sorted once and the
B resamples enter as a (B, rows) matrix of multiplicities, so a thousand replicates are a few matrix reductions.
A two-way resample (target models × subjects) is a one-way resample of its (model, subject) cells
(:func:`two_way_cells`), so :mod:`eegprivacy.evaluation.client_bootstrap`'s exact replicates apply to it.
The values are those the metric takes on the materialised resample (the same arithmetic on integer counts), so a
caller can switch between the two without moving an interval: ``tests/test_resample_replicates.py`` checks both
against the materialised computation.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["two_way_cells", "tpr_at_threshold_weighted"]

#: Resample rows × data rows held in memory at once (float64: 8 bytes each).
_CHUNK_CELLS = 2_000_000


def two_way_cells(model_counts: np.ndarray, cluster_counts: np.ndarray,
                  cluster_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A two-way resample of (models × clusters of trials) as cells: (cell of every row, cell counts).

    Parameters
    ----------
    model_counts : numpy.ndarray
        (B, n_models): how often each model enters each resample.
    cluster_counts : numpy.ndarray
        (B, n_clusters): how often each cluster of trials enters each resample.
    cluster_of : numpy.ndarray
        (n_trials,) the cluster index of every trial.

    Returns
    -------
    cells : numpy.ndarray
        (n_models · n_trials,) the cell (model m, cluster k) → m · n_clusters + k of every row of the flattened
        (n_models, n_trials) score matrix.
    counts : numpy.ndarray
        (B, n_models · n_clusters): cell (m, k) enters resample b ``model_counts[b, m] · cluster_counts[b, k]``
        times, so ``counts[:, cells]`` are the rows' multiplicities, and the cells are the "clients" of
        :mod:`eegprivacy.evaluation.client_bootstrap`'s replicates (e.g. its exact AUROC).
    """
    model_counts, cluster_counts = np.atleast_2d(model_counts), np.atleast_2d(cluster_counts)
    n_models, n_clusters = model_counts.shape[1], cluster_counts.shape[1]
    cells = (np.arange(n_models)[:, None] * n_clusters + np.asarray(cluster_of, dtype=int)[None, :]).ravel()
    counts = (model_counts[:, :, None] * cluster_counts[:, None, :]).reshape(model_counts.shape[0], -1)
    return cells, counts


def _chunks(n_resamples: int, n_rows: int) -> Iterator[slice]:
    step = max(1, _CHUNK_CELLS // max(1, n_rows))
    for start in range(0, n_resamples, step):
        yield slice(start, min(n_resamples, start + step))


def _prepare(scores, labels, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float).ravel()
    labels = np.asarray(labels).astype(int).ravel()
    weights = np.atleast_2d(np.asarray(weights))
    if not scores.shape == labels.shape or weights.shape[1] != scores.size:
        raise ValueError(f"one label and one weight column per score: {scores.shape}, {labels.shape}, "
                         f"{weights.shape}")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must hold 0 (negative) and 1 (positive) only")
    return scores, labels, weights


def tpr_at_threshold_weighted(scores, labels, weights, fpr: float) -> np.ndarray:
    """TPR at the threshold of FPR ``fpr`` set on every resample's own negatives, as
    :func:`eegprivacy.studies.federated.lira.scoring.tpr_at_threshold` computes it on the materialised resample: with n
    negatives (counted with their multiplicity), the threshold is the (⌊fpr·n⌋ + 1)-th highest negative score,
    and the TPR the share of positive weight scored strictly above it (ties count against the attacker); 1 where
    ⌊fpr·n⌋ ≥ n.

    Returns
    -------
    numpy.ndarray
        (B,) TPRs; NaN where a resample holds no positive or no negative.
    """
    scores, labels, weights = _prepare(scores, labels, weights)
    neg_order = np.flatnonzero(labels == 0)[np.argsort(scores[labels == 0], kind="stable")]
    pos_order = np.flatnonzero(labels == 1)[np.argsort(scores[labels == 1], kind="stable")]
    s_neg, s_pos = scores[neg_order], scores[pos_order]
    out = np.full(weights.shape[0], np.nan)
    if s_neg.size == 0 or s_pos.size == 0:
        return out
    for part in _chunks(weights.shape[0], scores.size):
        w = weights[part]
        cum_neg = np.cumsum(w[:, neg_order], axis=1)
        cum_pos = np.cumsum(w[:, pos_order], axis=1)
        n_neg, n_pos = cum_neg[:, -1], cum_pos[:, -1]
        allowed = np.floor(float(fpr) * n_neg + 1e-9)
        cut = n_neg - allowed - 1  # 0-based position, ascending, of the threshold in the resample's negatives
        first = np.minimum((cum_neg <= cut[:, None]).sum(axis=1), s_neg.size - 1)
        threshold = s_neg[first]
        at_or_below = np.searchsorted(s_pos, threshold, side="right")  # positives scored ≤ the threshold
        below_weight = np.where(at_or_below > 0, cum_pos[np.arange(len(first)), np.maximum(at_or_below - 1, 0)], 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpr = (n_pos - below_weight) / np.where(n_pos > 0, n_pos, 1)
        tpr = np.where(allowed >= n_neg, 1.0, tpr)
        out[part] = np.where((n_neg > 0) & (n_pos > 0), tpr, np.nan)
    return out
