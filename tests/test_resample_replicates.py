"""Metrics of resamples computed from multiplicities give the values the materialised resamples give, to the
last bit (the LiRA and study A bootstraps rely on it)."""

from __future__ import annotations

import numpy as np
import pytest

from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation.client_bootstrap import auroc_replicates
from eegprivacy.evaluation.cluster_bootstrap import auroc_along, bootstrap_indices, on_resamples
from eegprivacy.evaluation.weighted_replicates import tpr_at_threshold_weighted, two_way_cells
from eegprivacy.studies.federated.lira.pooled import two_way_resamples
from eegprivacy.studies.federated.lira.scoring import tpr_at_threshold


def _pool(rng, n_models=4, n_trials=60, n_clusters=6, tied=True):
    members = (rng.random((n_models, n_trials)) < 0.4).astype(int)
    scores = rng.normal(size=(n_models, n_trials)) + 0.7 * members
    if tied:  # ties within and across classes
        scores = np.round(scores, 1)
    cluster_of = rng.integers(0, n_clusters, n_trials)
    return members, scores, cluster_of


def _materialised(members, scores, cluster_of, models, clusters):
    trials = np.concatenate([np.flatnonzero(cluster_of == c) for c in clusters])
    return members[models][:, trials].ravel(), scores[models][:, trials].ravel()


@pytest.mark.parametrize("tied", [True, False])
def test_two_way_weights_reproduce_the_materialised_resamples(tied):
    rng = np.random.default_rng(3)
    members, scores, cluster_of = _pool(rng, tied=tied)
    n_clusters = cluster_of.max() + 1
    resamples = two_way_resamples(members.shape[0], n_clusters, 60, seed=5)
    cells, counts = two_way_cells(np.stack([np.bincount(m, minlength=members.shape[0]) for m, _ in resamples]),
                                  np.stack([np.bincount(c, minlength=n_clusters) for _, c in resamples]), cluster_of)
    weights = counts[:, cells]
    got_auroc = auroc_replicates(scores.ravel(), members.ravel(), cells, counts)
    for fpr in (0.02, 0.1, 0.3):
        got_tpr = tpr_at_threshold_weighted(scores.ravel(), members.ravel(), weights, fpr)
        for b, (models, clusters) in enumerate(resamples):
            member, score = _materialised(members, scores, cluster_of, models, clusters)
            if member.min() == member.max():
                assert np.isnan(got_tpr[b])
                continue
            assert got_tpr[b] == pytest.approx(tpr_at_threshold(member, score, fpr), abs=1e-12)
    for b, (models, clusters) in enumerate(resamples):
        member, score = _materialised(members, scores, cluster_of, models, clusters)
        want = auroc(member, score) if member.min() != member.max() else np.nan
        np.testing.assert_allclose(got_auroc[b], want, atol=1e-12)


def test_a_resample_without_one_class_is_nan_and_unit_weights_give_the_plain_tpr():
    scores, labels = np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])
    weights = np.array([[1, 1, 1, 1], [2, 2, 0, 0]])
    t = tpr_at_threshold_weighted(scores, labels, weights, 0.0)
    assert t[0] == pytest.approx(tpr_at_threshold(labels, scores, 0.0)) and np.isnan(t[1])
    with pytest.raises(ValueError, match="one label and one weight column"):
        tpr_at_threshold_weighted(scores, labels, weights[:, :3], 0.1)


def test_auroc_on_resamples_equals_the_sorted_resamples_bit_for_bit():
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(4, 90))
        y = (rng.random(n) < 0.4).astype(int)
        y[:2] = (1, 0)
        v = np.round(rng.normal(size=n), int(rng.integers(0, 3)))  # ties within and across classes
        for idx in (bootstrap_indices(y, 30, seed=trial), rng.integers(0, n, (30, n))):  # stratified or not
            want = auroc_along(v[idx], y[idx])
            got = on_resamples(auroc_along, v, y, idx)
            assert np.array_equal(want, got, equal_nan=True)


def test_auroc_replicates_counts_its_pairs_the_same_through_the_table_or_client_by_client(monkeypatch):
    import eegprivacy.evaluation.client_bootstrap as client_bootstrap

    rng = np.random.default_rng(5)
    for _ in range(30):
        n, rows = int(rng.integers(2, 30)), int(rng.integers(10, 400))
        clients, labels = rng.integers(0, n, rows), (rng.random(rows) < 0.4).astype(int)
        scores = np.round(rng.normal(size=rows), int(rng.integers(0, 3)))
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=20)
        table = client_bootstrap.auroc_replicates(scores, labels, clients, counts)
        monkeypatch.setattr(client_bootstrap, "_PAIR_TABLE_LIMIT", 0)
        by_client = client_bootstrap.auroc_replicates(scores, labels, clients, counts)
        monkeypatch.undo()
        assert np.array_equal(table, by_client, equal_nan=True)
