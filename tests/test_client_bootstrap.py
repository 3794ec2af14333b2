"""The client cluster bootstrap (issue 33): every vectorised replicate equals the metric computed on the
materialised resample (each drawn client's rows repeated as often as it was drawn), on small random SYNTHETIC
data; the design is shared by every cell; and scores without signal give replicate AUROCs centred on 0.5."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score

from eegprivacy.attacks.metrics import auroc, tpr_at_fpr
from eegprivacy.evaluation import client_bootstrap as cb

N_CLIENTS, B = 6, 40


def _data(seed: int, n_rows: int = 90, ties: bool = False):
    rng = np.random.default_rng(seed)
    clients = rng.integers(0, N_CLIENTS, size=n_rows)
    clients[:N_CLIENTS] = np.arange(N_CLIENTS)
    labels = rng.integers(0, 2, size=n_rows)
    scores = rng.normal(size=n_rows) + 0.8 * labels
    if ties:  # vote-fraction-like scores: many ties, as an RF attacker gives
        scores = np.round(1 / (1 + np.exp(-scores)), 1)
    return scores, labels, clients


def _materialise(counts_row: np.ndarray, clients: np.ndarray) -> np.ndarray:
    """Row indices of the resample: every row of client a, repeated counts_row[a] times."""
    drawn = np.repeat(np.arange(len(counts_row)), counts_row)
    return np.concatenate([np.flatnonzero(clients == a) for a in drawn]) if drawn.size else np.array([], int)


def test_the_design_depends_on_the_clients_and_seed_only():
    counts = cb.client_resample_counts(N_CLIENTS, B)
    assert counts.shape == (B, N_CLIENTS) and (counts.sum(1) == N_CLIENTS).all()
    np.testing.assert_array_equal(counts, cb.client_resample_counts(N_CLIENTS, B, seed=0))
    assert not np.array_equal(counts, cb.client_resample_counts(N_CLIENTS, B, seed=1))


@pytest.mark.parametrize("ties", [False, True])
def test_auroc_replicates_equal_the_materialised_resamples(ties):
    scores, labels, clients = _data(1, ties=ties)
    counts = cb.client_resample_counts(N_CLIENTS, B)
    got = cb.auroc_replicates(scores, labels, clients, counts)
    for b in range(B):
        rows = _materialise(counts[b], clients)
        assert got[b] == pytest.approx(auroc(labels[rows], scores[rows]), abs=1e-12, nan_ok=True)


def test_accuracy_and_balanced_accuracy_replicates_equal_the_materialised_resamples():
    scores, labels, clients = _data(2)
    pred = (scores > 0.4).astype(int)
    counts = cb.client_resample_counts(N_CLIENTS, B)
    acc = cb.accuracy_replicates(pred, labels, clients, counts)
    bal = cb.balanced_accuracy_replicates(pred, labels, clients, counts)
    for b in range(B):
        rows = _materialise(counts[b], clients)
        assert acc[b] == pytest.approx(np.mean(pred[rows] == labels[rows]), abs=1e-12)
        assert bal[b] == pytest.approx(balanced_accuracy_score(labels[rows], pred[rows]), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("fpr", [0.05, 0.1, 0.3])
def test_tpr_at_fpr_replicates_follow_the_tie_convention_of_tpr_at_fpr(ties, fpr):
    scores, labels, clients = _data(3, n_rows=120, ties=ties)
    counts = cb.client_resample_counts(N_CLIENTS, B)
    got = cb.tpr_at_fpr_replicates(scores, labels, clients, counts, fpr)
    for b in range(B):
        rows = _materialise(counts[b], clients)
        assert got[b] == pytest.approx(tpr_at_fpr(labels[rows], scores[rows], fpr), abs=1e-12, nan_ok=True)


def test_tpr_at_an_unresolvable_fpr_is_nan():
    scores, labels, clients = _data(4, n_rows=60)
    got = cb.tpr_at_fpr_replicates(scores, labels, clients, cb.client_resample_counts(N_CLIENTS, B), 0.01)
    assert np.isnan(got).all()  # at most ~60 negatives in a resample: 1 % needs 100


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_mean_and_quantile_replicates_equal_the_materialised_resamples(q):
    values, _, clients = _data(5)
    values = values.copy()
    values[7] = np.nan  # a non-finite value counts nowhere
    counts = cb.client_resample_counts(N_CLIENTS, B)
    mean = cb.mean_replicates(values, clients, counts)
    quantile = cb.quantile_replicates(values, clients, counts, q)
    for b in range(B):
        rows = _materialise(counts[b], clients)
        kept = values[rows][np.isfinite(values[rows])]
        assert mean[b] == pytest.approx(kept.mean(), abs=1e-12)
        assert quantile[b] == pytest.approx(np.quantile(kept, q), abs=1e-12)


def test_a_client_without_rows_contributes_nothing():
    """Only some clients hold attacker-test rows (a split by client): the others' draws add no row."""
    scores, labels, clients = _data(6)
    keep = clients < 3
    counts = cb.client_resample_counts(N_CLIENTS, B)
    got = cb.auroc_replicates(scores[keep], labels[keep], clients[keep], counts)
    for b in range(B):
        rows = _materialise(counts[b], clients[keep])
        expected = auroc(labels[keep][rows], scores[keep][rows]) if rows.size else np.nan
        assert got[b] == pytest.approx(expected, abs=1e-12, nan_ok=True)


def test_random_scores_give_replicate_aurocs_centred_on_one_half():
    """No signal: scores independent of membership, on 20 SYNTHETIC federations of 16 clients. The replicate
    AUROCs centre on 0.5 (averaged over the federations) and the 95 % percentile interval covers 0.5 in most."""
    rng = np.random.default_rng(7)
    n_clients = 16
    clients = np.repeat(np.arange(n_clients), 30)
    counts = cb.client_resample_counts(n_clients, 400)
    centres, covered = [], 0
    for _ in range(20):
        labels = rng.integers(0, 2, size=clients.size)
        reps = cb.auroc_replicates(rng.normal(size=clients.size), labels, clients, counts)
        centres.append(np.mean(reps))
        low, high = np.quantile(reps, [0.025, 0.975])
        covered += low < 0.5 < high
    assert abs(np.mean(centres) - 0.5) < 0.015
    assert covered >= 16
