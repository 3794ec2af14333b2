"""The batched MLP (eegprivacy.batched.AdamMLP) is the paper's scikit-learn classifier, many fits at once.

Three references, from the strictest to the one that matters for the paper:
1. the same maths one task at a time (``tasks_per_batch=1``): equal to 1e-12, same epochs;
2. scikit-learn's ``StandardScaler + MLPClassifier`` (``default_mlp``), fit per task: equal to 1e-9, same epochs;
3. LOSO accuracy over 20 seeds on real MSU patients: a paired sign-flip permutation test finds no difference.
A no-signal table gives chance, and every unsupported configuration is refused rather than approximated.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import LeaveOneGroupOut

from eegprivacy.batched import AdamMLP
from eegprivacy.evaluation.loso import _positive_proba, default_mlp

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def msu_patients(data_root):
    """MSU's real patient table (84 adolescents, one row each: the mean of their window features)."""
    from eegprivacy.studies.release.table import computed_patient_vectors

    return computed_patient_vectors("msu_schizophrenia", REPO / "params/features.yaml")


def _loso_tasks(n: int, inner_pairs: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Outer LOSO tasks, then the first ``inner_pairs`` inner-LOSO tasks (train without patients i and j)."""
    rows = np.arange(n)
    tasks = [(rows[rows != k], np.array([k])) for k in range(n)]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)][:inner_pairs]
    tasks += [(rows[(rows != i) & (rows != j)], np.array([i, j])) for i, j in pairs]
    return tasks


def _sklearn(X, y, tasks, seed):
    """scikit-learn's path per task, as LOSOEvaluation runs it: P(y = 1) of the test rows, the epochs run and
    the last epoch's training loss."""
    probas, epochs, losses = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for train, test in tasks:
            model = default_mlp(seed).fit(X[train], y[train])
            probas.append(_positive_proba(model, X[test]))
            epochs.append(model[-1].n_iter_)
            losses.append(model[-1].loss_)
    return probas, np.array(epochs), np.array(losses)


def _max_difference(a, b) -> float:
    return max(float(np.max(np.abs(p - q))) for p, q in zip(a, b, strict=True))


def test_batched_equals_one_task_at_a_time(msu_patients, torch_one_thread):
    """On a DP release of the real table (ε = 1: fits stop early, at different epochs)."""
    from eegprivacy.studies.release.table import release

    X, y = msu_patients
    X = release(X, "gaussian_analytic", 1.0, 1e-5, 2.0, seed=0)[1]
    tasks = _loso_tasks(len(y), inner_pairs=16)[::4]  # outer and inner tasks, 25 in all
    batched = AdamMLP(random_state=5, tasks_per_batch=7)  # several batches, the last one partial
    serial = AdamMLP(random_state=5, tasks_per_batch=1)
    got, ref = batched.fit_predict_tasks(X, y, tasks), serial.fit_predict_tasks(X, y, tasks)
    assert _max_difference(got, ref) <= 1e-12
    np.testing.assert_array_equal(batched.n_iter_, serial.n_iter_)
    assert len({int(i) for i in batched.n_iter_}) > 1  # tasks stop at different epochs: freezing is exercised


@pytest.mark.parametrize("table", ["real", "released"])
def test_batched_equals_scikit_learn(msu_patients, table, torch_one_thread):
    """On the real table and on a DP release of it (noisier: other stopping epochs), every task's probabilities
    and epoch count equal scikit-learn's."""
    X, y = msu_patients
    if table == "released":
        from eegprivacy.studies.release.table import release

        X = release(X, "gaussian_analytic", 10.0, 1e-5, 2.0, seed=0)[1]
    tasks = _loso_tasks(len(y), inner_pairs=12)[::6]
    engine = AdamMLP.from_estimator(default_mlp(11))
    got = engine.fit_predict_tasks(X, y, tasks)
    ref, epochs, losses = _sklearn(X, y, tasks, 11)
    assert _max_difference(got, ref) <= 1e-9
    np.testing.assert_array_equal(engine.n_iter_, epochs)
    np.testing.assert_allclose(engine.loss_, losses, rtol=1e-9)  # the loss the stopping rule reads


def test_loso_accuracy_over_20_seeds_is_indistinguishable_from_scikit_learn(msu_patients, torch_one_thread):
    """LOSO on 16 real MSU patients (8 per class), 20 MLP seeds: per-seed accuracy of the batched path minus
    scikit-learn's, tested by an exact paired sign-flip permutation test (two-sided); p must exceed 0.05."""
    X, y = msu_patients
    keep = np.concatenate([np.flatnonzero(y == c)[:8] for c in (0, 1)])
    X, y = X[keep], y[keep]
    tasks = _loso_tasks(len(y))
    differences = []
    for seed in range(20):
        batched = np.concatenate(AdamMLP(random_state=seed).fit_predict_tasks(X, y, tasks))
        reference = np.concatenate(_sklearn(X, y, tasks, seed)[0])
        differences.append(np.mean((batched >= 0.5) == y) - np.mean((reference >= 0.5) == y))
    differences = np.array(differences)
    signs = 1 - 2 * ((np.arange(2 ** 20)[:, None] >> np.arange(20)) & 1)  # every sign pattern
    observed = abs(differences.sum())
    p_value = np.mean(np.abs(signs @ differences) >= observed - 1e-12)
    assert p_value > 0.05, (p_value, differences)


def test_no_signal_gives_chance(torch_one_thread):
    """SYNTHETIC pure-noise features: LOSO AUROC over seeds is centred on 0.5 (the engine adds no bias)."""
    rng = np.random.default_rng(0)
    aurocs = []
    for seed in range(6):
        X = rng.standard_normal((40, 30))
        y = np.repeat([0, 1], 20)
        proba = np.concatenate(AdamMLP(random_state=seed, max_iter=60).fit_predict_tasks(X, y, _loso_tasks(40)))
        aurocs.append(roc_auc_score(y, proba))
    assert abs(np.mean(aurocs) - 0.5) < 0.12, aurocs


def test_one_class_training_set_is_certain_of_it():
    X = np.random.default_rng(0).standard_normal((6, 3))
    y = np.array([1, 1, 1, 0, 0, 0])
    engine = AdamMLP(random_state=0)
    out = engine.fit_predict_tasks(X, y, [(np.array([0, 1]), np.array([3, 4])), (np.array([3, 4]), np.array([0]))])
    np.testing.assert_array_equal(out[0], [1.0, 1.0])
    np.testing.assert_array_equal(out[1], [0.0])
    np.testing.assert_array_equal(engine.n_iter_, [0, 0])


def test_loso_tasks_of_a_grouped_table_match_scikit_learn(torch_one_thread):
    """SYNTHETIC: several rows per group (LeaveOneGroupOut tasks); a repeated training row weighs twice."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 8))
    y = (X[:, 0] + rng.standard_normal(30) > 0).astype(int)
    groups = np.repeat(np.arange(10), 3)
    tasks = list(LeaveOneGroupOut().split(X, y, groups))
    tasks.append((np.concatenate([np.arange(20), np.arange(5)]), np.arange(20, 30)))  # rows 0-4 twice
    got = AdamMLP.from_estimator(default_mlp(2)).fit_predict_tasks(X, y, tasks)
    ref = _sklearn(X, y, tasks, 2)[0]
    assert _max_difference(got, ref) <= 1e-9


@pytest.mark.parametrize("change", [dict(mlp__solver="sgd"), dict(mlp__activation="tanh"),
                                    dict(mlp__hidden_layer_sizes=(50, 50)), dict(mlp__batch_size=32),
                                    dict(mlp__early_stopping=True), dict(mlp__random_state=None),
                                    dict(mlp__random_state=np.random.RandomState(0)),
                                    dict(scaler__with_mean=False)])
def test_configurations_it_does_not_reproduce_are_refused(change):
    assert AdamMLP.from_estimator(default_mlp(0).set_params(**change)) is None


def test_from_estimator_reads_the_papers_settings():
    engine = AdamMLP.from_estimator(default_mlp(7))
    assert (engine.hidden, engine.alpha, engine.max_iter, engine.random_state) == (100, 1e-4, 200, 7)


@pytest.mark.parametrize("X, y, tasks, message", [
    (np.zeros((250, 2)), np.arange(250) % 2, [(np.arange(201), np.array([0]))], "201 training rows"),
    (np.zeros((4, 2)), np.array([0, 1, 2, 0]), [(np.arange(3), np.array([3]))], "only 0 and 1"),
    (np.full((4, 2), np.nan), np.array([0, 1, 1, 0]), [(np.arange(3), np.array([3]))], "NaN"),
    (np.zeros((4, 2)), np.array([0, 1, 1, 0]), [(np.arange(3), np.array([9]))], "out of range"),
])
def test_bad_input_is_refused_with_the_reason(X, y, tasks, message):
    with pytest.raises(ValueError, match=message):
        AdamMLP().fit_predict_tasks(X, y, tasks)
