"""Intervals over clients: a fixed cluster-bootstrap design over a federation's clients and exact replicates.

Study B's privacy unit is the subject, and every subject is one client of the federation. An interval that says
how a score would move on another cohort must resample clients (each with all of its rows), not trials or
updates, and then be crossed with seeds (:func:`~eegprivacy.evaluation.cluster_bootstrap.combine_seeds`).

The design is fixed: :func:`client_resample_counts` draws, from ``n_clients`` and a seed only, how many times
each client enters each of B with-replacement resamples. Every (model, ε, seed) cell of a federation with the
same clients therefore uses the same resamples, so replicate b of two cells (or of a score and its control) is
paired, and a report can average the per-seed replicates index by index before resampling the seeds.

Each ``*_replicates`` function takes per-row values (a score, a prediction, a label) with ``clients`` (the
client index of every row, in ``0..n_clients − 1``) and the (B, n_clients) count matrix, and returns the B values
the metric takes on the resamples, without materialising them: resample b is the data set in which every row of
client a appears ``counts[b, a]`` times. A client without rows (e.g. one the attacker-test half does not hold)
contributes nothing; a resample that leaves a metric undefined (no positive, no negative, too few negatives for
an FPR) gives NaN there, as the metric does on such data.
"""

from __future__ import annotations

import numpy as np

__all__ = ["client_resample_counts", "mean_replicates", "quantile_replicates", "auroc_replicates",
           "accuracy_replicates", "balanced_accuracy_replicates", "tpr_at_fpr_replicates"]

_CLIENT_STREAM = 0x434C4E54


def client_resample_counts(n_clients: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """How many times each client enters each of ``n_resamples`` with-replacement resamples of ``n_clients``.

    Parameters
    ----------
    n_clients : int
        The federation's clients (subjects), indexed ``0..n_clients − 1``.
    n_resamples : int
        B, the number of resamples.
    seed : int, default 0
        The design's seed. The counts depend on ``n_clients``, ``n_resamples`` and ``seed`` only, never on a
        cell's data or its seed: every cell of a federation shares them (paired replicates).

    Returns
    -------
    numpy.ndarray
        (B, n_clients) integer counts; each row sums to ``n_clients`` (a multinomial draw with equal
        probabilities: the cluster bootstrap's resample of whole clients).
    """
    n_clients, n_resamples = int(n_clients), int(n_resamples)
    if n_clients < 1 or n_resamples < 1:
        raise ValueError(f"need at least one client and one resample, got {n_clients} and {n_resamples}")
    rng = np.random.default_rng([_CLIENT_STREAM, n_clients, int(seed)])
    return rng.multinomial(n_clients, np.full(n_clients, 1.0 / n_clients), size=n_resamples)


def _check(clients, counts, *columns) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ValueError(f"counts must be (n_resamples, n_clients), got shape {counts.shape}")
    clients = np.asarray(clients).ravel().astype(int)
    if clients.size and (clients.min() < 0 or clients.max() >= counts.shape[1]):
        raise ValueError(f"client indices must lie in 0..{counts.shape[1] - 1}")
    out = [np.asarray(c).ravel() for c in columns]
    for column in out:
        if column.size != clients.size:
            raise ValueError(f"{column.size} values for {clients.size} clients (one client per row)")
    return clients, counts.astype(float), out


def _per_client(clients: np.ndarray, weights: np.ndarray, n_clients: int) -> np.ndarray:
    return np.bincount(clients, weights=weights.astype(float), minlength=n_clients)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), np.nan)


def mean_replicates(values, clients, counts) -> np.ndarray:
    """The mean of ``values`` on every client resample: Σ_a c_a S_a / Σ_a c_a n_a (S_a: the sum of client a's
    finite values, n_a: their number); NaN where a resample holds no finite value.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the row mean; their spread is the mean's variation over clients (subjects).
    """
    clients, counts, (values,) = _check(clients, counts, values)
    values = values.astype(float)
    finite = np.isfinite(values)
    n = counts.shape[1]
    sums = _per_client(clients[finite], values[finite], n)
    sizes = _per_client(clients[finite], np.ones(finite.sum()), n)
    return _ratio(counts @ sums, counts @ sizes)


def quantile_replicates(values, clients, counts, q: float) -> np.ndarray:
    """The ``q`` quantile of ``values`` on every client resample, as :func:`numpy.quantile` (linear
    interpolation) computes it on the materialised resample; NaN where a resample holds no finite value.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the quantile over client resamples.
    """
    clients, counts, (values,) = _check(clients, counts, values)
    values = values.astype(float)
    finite = np.isfinite(values)
    order = np.argsort(values[finite], kind="stable")
    x, owner = values[finite][order], clients[finite][order]
    out = np.full(counts.shape[0], np.nan)
    if x.size == 0:
        return out
    weights = counts[:, owner]  # (B, rows): how often each sorted row appears in each resample
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    ok = total > 0
    h = float(q) * (total - 1.0)
    lower = np.floor(h)
    # Position k of the sorted resample (0-based) is the first row whose cumulative weight exceeds k.
    i_lo = (cum <= lower[:, None]).sum(1)
    i_hi = (cum <= np.minimum(lower + 1.0, total - 1.0)[:, None]).sum(1)
    i_lo, i_hi = np.minimum(i_lo, x.size - 1), np.minimum(i_hi, x.size - 1)
    out[ok] = (x[i_lo] + (h - lower) * (x[i_hi] - x[i_lo]))[ok]
    return out


#: Negatives × clients above which :func:`_pair_matrix` goes client by client (bounded memory) instead of through
#: one cumulative count table.
_PAIR_TABLE_LIMIT = 4_000_000


def _pair_matrix(s_pos: np.ndarray, c_pos: np.ndarray, s_neg: np.ndarray, c_neg: np.ndarray, n: int) -> np.ndarray:
    """N[a, b] = #(positive of client a, negative of client b) with the positive scored higher, plus one half per
    tie: exact sums of halves, the same whichever way they are counted."""
    pair = np.zeros((n, n))
    if s_neg.size * n <= _PAIR_TABLE_LIMIT:
        order = np.argsort(s_neg, kind="stable")
        s_sorted = s_neg[order]
        # table[k, b]: negatives of client b among the k lowest-scored negatives
        table = np.zeros((s_neg.size + 1, n))
        table[np.arange(1, s_neg.size + 1), c_neg[order]] = 1.0
        np.cumsum(table, axis=0, out=table)
        by_client = np.argsort(c_pos, kind="stable")  # positives grouped by client, summed per group
        lo = np.searchsorted(s_sorted, s_pos[by_client], side="left")
        hi = np.searchsorted(s_sorted, s_pos[by_client], side="right")
        wins = table[lo] + 0.5 * (table[hi] - table[lo])
        owners, starts = np.unique(c_pos[by_client], return_index=True)
        if owners.size:
            pair[owners] = np.add.reduceat(wins, starts, axis=0)
        return pair
    for b in np.unique(c_neg):
        negatives = np.sort(s_neg[c_neg == b])
        below = np.searchsorted(negatives, s_pos, side="left")
        ties = np.searchsorted(negatives, s_pos, side="right") - below
        pair[:, b] = _per_client(c_pos, below + 0.5 * ties, n)
    return pair


def auroc_replicates(scores, labels, clients, counts) -> np.ndarray:
    """AUROC (ties count one half) of ``scores`` for ``labels`` (1 positive, 0 negative) on every client resample.

    Exact, through the client-pair matrix N[a, b] = #(positive of a, negative of b) with the positive scored
    higher, plus one half per tie; with P[a] positives and Q[b] negatives of each client, resample c gives
    AUROC = cᵀ N c / ((c·P)(c·Q)). NaN where a resample holds no positive or no negative.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the AUROC over client (subject) resamples.
    """
    clients, counts, (scores, labels) = _check(clients, counts, scores, labels)
    scores, labels = scores.astype(float), labels.astype(int)
    n = counts.shape[1]
    pos = labels == 1
    s_pos, c_pos = scores[pos], clients[pos]
    pair = _pair_matrix(s_pos, c_pos, scores[~pos], clients[~pos], n)
    n_pos = _per_client(c_pos, np.ones(c_pos.size), n)
    n_neg = _per_client(clients[~pos], np.ones((~pos).sum()), n)
    wins = ((counts @ pair) * counts).sum(axis=1)  # cᵀ N c per resample (exact: sums of halves)
    return _ratio(wins, (counts @ n_pos) * (counts @ n_neg))


def accuracy_replicates(pred, labels, clients, counts) -> np.ndarray:
    """Accuracy (share of rows with ``pred == labels``) on every client resample.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the accuracy over client (subject) resamples.
    """
    clients, counts, (pred, labels) = _check(clients, counts, pred, labels)
    return mean_replicates((pred == labels).astype(float), clients, counts)


def balanced_accuracy_replicates(pred, labels, clients, counts) -> np.ndarray:
    """Balanced accuracy of 0/1 predictions (the mean of the true-positive and true-negative rates) on every
    client resample; NaN where a resample holds no positive or no negative.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the balanced accuracy over client (subject) resamples.
    """
    clients, counts, (pred, labels) = _check(clients, counts, pred, labels)
    pred, labels = pred.astype(int), labels.astype(int)
    n = counts.shape[1]
    pos, neg = labels == 1, labels == 0
    tpr = _ratio(counts @ _per_client(clients, (pos & (pred == 1)).astype(float), n),
                 counts @ _per_client(clients, pos.astype(float), n))
    tnr = _ratio(counts @ _per_client(clients, (neg & (pred == 0)).astype(float), n),
                 counts @ _per_client(clients, neg.astype(float), n))
    return (tpr + tnr) / 2.0


def tpr_at_fpr_replicates(scores, labels, clients, counts, fpr: float) -> np.ndarray:
    """TPR at FPR ≤ ``fpr`` on every client resample, with the convention of
    :func:`eegprivacy.attacks.metrics.tpr_at_fpr`: the highest TPR among the ROC's operating points (a row is
    called positive when its score is at least the threshold, so tied rows move together) whose FPR does not
    exceed ``fpr``; NaN where a resample holds no positive or fewer than ⌈1/fpr⌉ negatives.

    The threshold is chosen on each resample's own (weighted) negatives: the best point passes every row scored
    above v*, the highest negative score whose weight at or above it exceeds ``fpr`` times the negatives.

    Returns
    -------
    numpy.ndarray
        (B,) replicates of the TPR at that FPR over client (subject) resamples.
    """
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr}")
    clients, counts, (scores, labels) = _check(clients, counts, scores, labels)
    scores, labels = scores.astype(float), labels.astype(int)
    n = counts.shape[1]
    pos = labels == 1
    n_pos = counts @ _per_client(clients[pos], np.ones(pos.sum()), n)
    n_neg = counts @ _per_client(clients[~pos], np.ones((~pos).sum()), n)
    out = np.full(counts.shape[0], np.nan)
    ok = (n_pos > 0) & (n_neg >= np.ceil(1.0 / fpr))
    if not ok.any():
        return out
    levels = np.unique(scores[~pos])[::-1]  # the negatives' distinct scores, highest first
    at_level = np.zeros((levels.size, n))  # negatives of each client at each level
    np.add.at(at_level, (np.searchsorted(-levels, -scores[~pos]), clients[~pos]), 1.0)
    weight_above = np.cumsum(at_level, axis=0) @ counts.T  # (levels, B): negatives scored >= each level
    allowed = (fpr + 1e-12) * n_neg
    first = np.argmax(weight_above > allowed[None, :], axis=0)  # v*: the first level over the allowance
    passed = np.zeros((levels.size, n))  # positives of each client scored strictly above each level
    s_pos, c_pos = scores[pos], clients[pos]
    for a in np.unique(c_pos):
        own = np.sort(s_pos[c_pos == a])
        passed[:, a] = own.size - np.searchsorted(own, levels, side="right")
    hits = np.sum(counts * passed[first], axis=1)
    out[ok] = (hits / np.where(n_pos > 0, n_pos, 1.0))[ok]
    return out
