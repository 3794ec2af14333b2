"""Federated layer: FedAvg through Flower's apps, two backends, and the scikit-learn estimator study A uses."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from eegprivacy.evaluation import LOSOEvaluation
from eegprivacy.federated import FedAvgClassifier, MLPTask, combine_moments, run_fedavg


def _partitions(sizes=(5, 10, 21), d=12, seed=0):
    rng = np.random.default_rng(seed)
    parts = []
    for k, n in enumerate(sizes):
        y = (rng.random(n) < 0.4).astype(int)
        X = rng.normal(loc=k, scale=1 + k, size=(n, d)) + y[:, None]  # sites differ in location and spread
        parts.append((X, y))
    return parts


def _small_task(d=12):
    return functools.partial(MLPTask, d, hidden_layer_sizes=(8,), batch_size=4)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))


@pytest.mark.slow
def test_inprocess_backend_matches_flower_ray_simulation(monkeypatch, tmp_path, capfd):
    """The one Ray run of the suite (~30 s on 2 cores): same apps, same seed, same final weights."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr"))
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    parts = _partitions()
    kwargs = dict(num_rounds=3, local_epochs=2, seed=7, standardize=True)
    fast = run_fedavg(_small_task(), parts, backend="inprocess", **kwargs)
    ray = run_fedavg(_small_task(), parts, backend="flower", **kwargs)
    assert len(fast.weights) == len(ray.weights) == 4
    assert all(np.allclose(u, v, rtol=1e-10, atol=1e-12) for u, v in zip(fast.weights, ray.weights))
    assert [h["n_examples"] for h in ray.history] == [[5, 10, 21]] * 3
    assert np.allclose([h["train_loss"] for h in fast.history], [h["train_loss"] for h in ray.history])
    assert np.allclose(fast.feature_mean, ray.feature_mean) and np.allclose(fast.feature_scale, ray.feature_scale)
    assert "DEPRECATED" not in capfd.readouterr().err


def test_fedavg_weights_clients_by_their_example_counts():
    parts = _partitions(sizes=(5, 10, 21))
    res = run_fedavg(_small_task(), parts, num_rounds=2, local_epochs=3, seed=1, keep_updates=True)
    n = np.array([5, 10, 21], dtype=float)
    for rnd, nxt in ((1, res.sent[2]), (2, res.weights)):
        returned = [res.updates[rnd][c] for c in range(3)]
        manual = [sum(n[c] * returned[c][i] for c in range(3)) / n.sum() for i in range(len(nxt))]
        assert all(np.allclose(m, w, rtol=0, atol=1e-12) for m, w in zip(manual, nxt))
        unweighted = [np.mean([returned[c][i] for c in range(3)], axis=0) for i in range(len(nxt))]
        assert not np.allclose(unweighted[0], nxt[0])  # the weighting matters on this problem
    assert _same(res.update(1, 0), [u - s for u, s in zip(res.updates[1][0], res.sent[1])])
    assert res.history[0]["n_examples"] == [5, 10, 21] and res.history[0]["clients"] == [0, 1, 2]
    assert np.isclose(res.history[0]["train_loss"], n @ res.history[0]["client_train_loss"] / n.sum())


def test_same_seed_same_weights_other_seed_other_weights(capfd):
    parts = _partitions()
    state = random.getstate()
    a = run_fedavg(_small_task(), parts, num_rounds=3, local_epochs=2, seed=3)
    assert random.getstate() == state  # FedAvg's node sampling does not move the caller's `random` stream
    b = run_fedavg(_small_task(), parts, num_rounds=3, local_epochs=2, seed=3)
    c = run_fedavg(_small_task(), parts, num_rounds=3, local_epochs=2, seed=4)
    assert _same(a.weights, b.weights)
    assert not np.allclose(a.weights[0], c.weights[0])
    out = capfd.readouterr()
    assert out.out == "" and out.err == ""  # thousands of federations in a LOSO loop must stay silent


def test_federated_evaluation_is_recorded_per_round():
    res = run_fedavg(_small_task(), _partitions(), num_rounds=2, local_epochs=1, seed=0, federated_evaluation=True)
    assert [sorted(h) for h in res.history] == [sorted(["round", "clients", "n_examples", "client_train_loss",
                                                         "train_loss", "eval_loss", "eval_accuracy"])] * 2
    assert all(0 <= h["eval_accuracy"] <= 1 and h["eval_loss"] > 0 for h in res.history)


def test_initial_weights_are_scikit_learns_and_a_single_class_client_trains():
    task = MLPTask(6, hidden_layer_sizes=(5,))
    X = np.random.default_rng(0).normal(size=(4, 6))
    # A vanishing learning rate leaves MLPClassifier's own initial weights in place after one pass.
    ref = MLPClassifier(hidden_layer_sizes=(5,), random_state=11, learning_rate_init=1e-300, batch_size=4)
    ref.partial_fit(X, [0, 1, 0, 1], classes=[0, 1])
    assert _same(task.initial_weights(11), ref.coefs_ + ref.intercepts_)
    w0 = task.initial_weights(11)
    w1, metrics = task.train(w0, X, np.zeros(4, dtype=int), epochs=2, seed=5)
    assert [w.shape for w in w1] == [w.shape for w in w0] and np.isfinite(metrics["train_loss"])
    assert _same(w1, task.train(w0, X, np.zeros(4, dtype=int), epochs=2, seed=5)[0])  # no state carried over
    assert task.predict_proba(w1, X).shape == (4, 2)


def test_federated_scaler_equals_the_pooled_standard_scaler():
    parts = _partitions()
    stats = [(X.shape[0], X.mean(axis=0), ((X - X.mean(axis=0)) ** 2).sum(axis=0)) for X, _ in parts]
    mean, scale = combine_moments(*map(np.array, zip(*stats)))
    pooled = StandardScaler().fit(np.vstack([X for X, _ in parts]))
    assert np.allclose(mean, pooled.mean_) and np.allclose(scale, pooled.scale_)


def test_classifier_is_a_clonable_sklearn_estimator():
    est = FedAvgClassifier(hidden_layer_sizes=(8,), num_rounds=2, local_epochs=1, random_state=0)
    copy = clone(est)
    assert copy.get_params() == est.get_params()
    assert copy.set_params(random_state=5).random_state == 5 and est.random_state == 0
    parts = _partitions()
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    sites = np.repeat(["h1", "h2", "h3"], [5, 10, 21])
    fitted = est.fit(X, y, clients=sites)
    assert fitted is est and est.n_clients_ == 3 and len(est.history_) == 2
    assert not hasattr(clone(est), "classes_")
    proba = est.predict_proba(X)
    assert proba.shape == (36, 2) and np.allclose(proba.sum(axis=1), 1)
    assert set(est.predict(X)) <= {0, 1}
    assert np.allclose(est.mean_, X.mean(axis=0))  # federated scaler = the pooled one
    again = clone(est).fit(X, y, clients=sites)
    assert all(np.array_equal(u, v) for u, v in zip(est.coefs_ + est.intercepts_, again.coefs_ + again.intercepts_))


def test_single_class_sites_and_single_class_training_sets():
    X = np.random.default_rng(1).normal(size=(9, 4))
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0])
    est = FedAvgClassifier(hidden_layer_sizes=(4,), num_rounds=2, local_epochs=1, random_state=0)
    est.fit(X, y, clients=[0, 0, 0, 1, 1, 1, 2, 2, 2])  # every site holds one class only
    assert list(est.classes_) == [0, 1] and est.predict_proba(X).shape == (9, 2)
    est.fit(X[3:], y[3:], clients=[1, 1, 1, 2, 2, 2])
    assert list(est.classes_) == [0] and np.all(est.predict_proba(X) == 1)


def test_works_inside_loso_with_row_aligned_clients():
    rng = np.random.default_rng(2)
    y = np.array([1, 0, 1, 0, 0, 1, 0, 0])
    X = rng.normal(size=(8, 5)) + y[:, None]
    patients = np.arange(8)
    hospital = np.array([0, 0, 0, 1, 1, 1, 1, 2])  # hospital 2 has one patient: absent from its own fold
    proto = FedAvgClassifier(hidden_layer_sizes=(6,), num_rounds=2, local_epochs=2, random_state=None)
    res = LOSOEvaluation(estimator=proto, random_state=4, nested=True).evaluate(
        X, y, patients, fit_params={"clients": hospital})
    assert np.all((res.proba >= 0) & (res.proba <= 1)) and set(res.metrics) == {"optimistic", "nested"}
    keep = patients != 7  # the fold that holds out hospital 2's only patient, redone by hand
    est = clone(proto).set_params(random_state=4).fit(X[keep], y[keep], clients=hospital[keep])
    assert est.n_clients_ == 2
    assert np.isclose(est.predict_proba(X[~keep])[0, 1], res.proba[7])


def test_bad_inputs_are_refused():
    parts = _partitions()
    with pytest.raises(ValueError, match="empty"):
        run_fedavg(_small_task(), [parts[0], (np.empty((0, 12)), np.empty(0))], 1, 1, seed=0)
    with pytest.raises(ValueError, match="backend"):
        run_fedavg(_small_task(), parts, 1, 1, seed=0, backend="grpc")
    with pytest.raises(ValueError, match="NaN"):
        run_fedavg(_small_task(), [(np.full((2, 12), np.nan), np.array([0, 1]))], 1, 1, seed=0)
