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
from sklearn.utils import check_random_state

__all__ = ["auroc_along", "auroc_on_resamples", "on_resamples", "balanced_accuracy_along", "bootstrap_indices",
           "seed_indices", "combine_seeds", "subject_counts", "percentile_interval", "bootstrap_p_value",
           "bootstrap_p_value_two_sided", "p_value_mc_error", "holm", "utility_horizon", "fixed_sequence_horizon"]

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


#: Patients above which :func:`auroc_on_resamples` sorts each resample instead of building an (n × n) pair matrix.
_PAIR_LIMIT = 3000


def auroc_on_resamples(values: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``auroc_along(values[idx], labels[idx])`` for (B, n) resample indices ``idx``, the same numbers from each
    resample's patient counts (:func:`~eegprivacy.evaluation.client_bootstrap.auroc_replicates`, every patient its
    own client: one pair matrix and a matrix product) instead of a sort of every resample. Both count ties one half
    and sum halves exactly, so they agree to the last bit (``tests/test_resample_replicates.py``)."""
    from eegprivacy.evaluation.client_bootstrap import auroc_replicates

    values = np.asarray(values, dtype=float).ravel()
    idx = np.atleast_2d(np.asarray(idx, dtype=int))
    n = values.size
    if n > _PAIR_LIMIT:  # the (n × n) pair matrix would not pay: sort every resample
        return auroc_along(values[idx], np.asarray(labels).ravel()[idx])
    offsets = (np.arange(idx.shape[0]) * n)[:, None]
    counts = np.bincount((idx + offsets).ravel(), minlength=idx.shape[0] * n).reshape(idx.shape[0], n)
    return auroc_replicates(values, labels, np.arange(n), counts)


#: Metrics with a faster exact form on resample indices (:func:`on_resamples`).
_ON_RESAMPLES = {auroc_along: auroc_on_resamples}


def on_resamples(metric, values: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``metric(values[idx], labels[idx])``: a metric along every resample of (B, n) patient indices ``idx``,
    through its faster exact form where one exists (AUROC: :func:`auroc_on_resamples`)."""
    fast = _ON_RESAMPLES.get(metric)
    if fast is not None:
        return fast(values, labels, idx)
    return metric(np.asarray(values)[idx], np.asarray(labels)[idx])


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


def subject_counts(n_subjects: int, n_bootstrap: int, random_state=None) -> np.ndarray:
    """Multiplicities (n_bootstrap, n_subjects) of a subject bootstrap: each row draws ``n_subjects`` subjects
    with replacement. A window counts as often as its subject was drawn, so every statistic that is a ratio of
    per-subject sums (Pearson moments, AUC pair counts, hit counts) is recomputed exactly on each resample.

    Study C's intervals (:mod:`eegprivacy.embeddings.endpoints`) and its permutation tests' effect sizes
    (:mod:`eegprivacy.evaluation.permutation`) draw their resamples here. Unlike :func:`bootstrap_indices` it is
    not stratified and takes a scikit-learn ``random_state`` (a seed or a ``RandomState`` that the caller goes on
    drawing from), so one generator can feed several resamples in a fixed order."""
    if int(n_subjects) < 1:
        raise ValueError("a subject bootstrap needs at least one subject")
    if int(n_bootstrap) < 1:
        raise ValueError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    rng = check_random_state(random_state)
    return rng.multinomial(int(n_subjects), np.full(int(n_subjects), 1.0 / int(n_subjects)), size=int(n_bootstrap))


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


def bootstrap_p_value_two_sided(replicates: np.ndarray) -> float:
    """Two-sided p-value of "the difference is 0" from bootstrap replicates of a difference: twice the smaller of
    the two one-sided add-one p-values ((1 + #replicates <= 0) / (1 + B) and (1 + #replicates >= 0) / (1 + B)),
    at most 1. A difference far below 0 is as significant as one far above it."""
    replicates = np.asarray(replicates, dtype=float)
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return float("nan")
    below = (1 + np.count_nonzero(replicates <= 0)) / (1 + replicates.size)
    above = (1 + np.count_nonzero(replicates >= 0)) / (1 + replicates.size)
    return float(min(1.0, 2.0 * min(below, above)))


def p_value_mc_error(p: float, n_resamples: int) -> float:
    """Monte-Carlo standard error of a resampling p-value: ``sqrt(p (1 − p) / B)``, at least ``1/B`` at p = 0 or 1.

    Parameters
    ----------
    p : float
        A p-value estimated from ``n_resamples`` bootstrap or permutation replicates.
    n_resamples : int
        B, the number of replicates it was counted over.

    Returns
    -------
    float
        The binomial standard error of ``p`` as an estimate of the p-value an infinite number of resamples would
        give; NaN when ``p`` is NaN.

    Notes
    -----
    A p-value counted over B replicates is itself random: re-running the bootstrap with another seed moves it by
    about this much. A decision ``p < α`` is only a decision of the data, not of the resampling seed, when ``p``
    is several such errors away from α (the conventions ask that the error of every p-value that decides a
    horizon be reported; :func:`eegprivacy.studies.release.utility.summarise` marks ``decision_stable`` at
    ``|p − α| > 3·error``). At p = 0 (or 1) the binomial formula says 0, which would claim a precision B
    replicates cannot have; the floor ``1/B`` is the resolution of the count.
    """
    if not 0 < int(n_resamples):
        raise ValueError(f"n_resamples must be a positive count, got {n_resamples!r}")
    p = float(p)
    if not np.isfinite(p):
        return float("nan")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    error = float(np.sqrt(p * (1.0 - p) / n_resamples))
    return error if error > 0 else 1.0 / n_resamples


def fixed_sequence_horizon(epsilons: Sequence[float], p_values: Sequence[float],
                           alpha: float) -> tuple[float | None, list[bool]]:
    """A utility horizon from a fixed-sequence test: ε from the largest down, each at level ``alpha``.

    Parameters
    ----------
    epsilons : sequence of float
        The ε of each tested cell of one mechanism, in any order.
    p_values : sequence of float
        One-sided p-value of "release − null ≤ 0" at each ε (same order); NaN counts as not rejected.
    alpha : float
        The level of every test in the sequence, already split across the table's mechanisms by the caller
        (e.g. ``α / m`` for m mechanisms, a Bonferroni split of the table's family-wise error rate).

    Returns
    -------
    horizon : float or None
        The smallest ε rejected (the mechanism keeps utility there and at every larger ε of the grid), or None
        when the largest ε is not rejected.
    decisions : list of bool
        Per input ε, in the caller's order, whether it was rejected ("keeps utility").

    Notes
    -----
    Why a fixed sequence rather than Holm over every cell: utility can only grow with ε (less noise), so the
    hypotheses have a natural order, and testing them in that order spends the whole level on each step: the
    family-wise error rate of the sequence is ``alpha`` without dividing it among the ε of the grid (Maurer,
    Hothorn & Lehmacher 1995; Westfall & Krishen 2001). Holm over all (mechanism, ε) cells divides α by up to
    the number of cells and can reject a small ε while keeping a larger one, a horizon with a hole in it. Here the
    test stops at the first non-rejection, so the decisions are monotone in ε by construction and the horizon
    is the end of an unbroken run of rejections from the top of the grid. Input order does not matter; repeated
    ε values are tested one after another (a tie is kept only when every copy rejects before the first failure).
    """
    eps = np.asarray(epsilons, dtype=float).ravel()
    p = np.asarray(p_values, dtype=float).ravel()
    if eps.shape != p.shape:
        raise ValueError(f"epsilons ({eps.size}) and p_values ({p.size}) differ in length")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if np.isnan(eps).any():
        raise ValueError("an ε is NaN")
    decisions = [False] * eps.size
    horizon = None
    for i in np.argsort(-eps, kind="stable"):
        if not (np.isfinite(p[i]) and p[i] < alpha):
            break
        decisions[int(i)] = True
        horizon = float(eps[i])
    return horizon, decisions


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
