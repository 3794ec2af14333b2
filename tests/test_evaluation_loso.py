"""Patient-level LOSO: no leakage between folds, training-only scaling, nested thresholds, determinism."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import LeaveOneGroupOut
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation, best_f1_threshold, default_mlp

FITS: dict[str, list[dict]] = defaultdict(list)  # tag -> one record per fit (n_jobs=1 keeps it in-process)


class Recorder(ClassifierMixin, BaseEstimator):
    """Remembers which patient ids (column 0) it trained on and predicted; P(1) = sigmoid(column 1)."""

    def __init__(self, tag="default", random_state=None):
        self.tag = tag
        self.random_state = random_state

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        self.record_ = {"train": set(np.unique(X[:, 0]).tolist()), "test": set(), "seed": self.random_state}
        FITS[self.tag].append(self.record_)
        return self

    def predict_proba(self, X):
        self.record_["test"].update(np.unique(X[:, 0]).tolist())
        p = 1.0 / (1.0 + np.exp(-X[:, 1]))
        return np.column_stack([1.0 - p, p])


class RecordingScaler(StandardScaler):
    """StandardScaler that remembers the patient ids (column 0) of the rows it was fitted on."""

    def __init__(self, tag="scaler", copy=True, with_mean=True, with_std=True):
        super().__init__(copy=copy, with_mean=with_mean, with_std=with_std)
        self.tag = tag

    def fit(self, X, y=None, sample_weight=None):
        FITS[self.tag].append({"train": set(np.unique(np.asarray(X)[:, 0]).tolist())})
        return super().fit(X, y, sample_weight)

    def fit_transform(self, X, y=None, **fit_params):
        return StandardScaler.transform(self.fit(X, y), X)  # training rows are not "test" rows

    def transform(self, X, copy=None):
        FITS[self.tag][-1].setdefault("test", set()).update(np.unique(np.asarray(X)[:, 0]).tolist())
        return super().transform(X, copy)


def cohort(n, d, seed, shift=3.0):
    """Synthetic patients; `shift` moves 5 features by ±shift with the label (0 = no signal)."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=int)
    y[: round(0.4 * n)] = 1
    rng.shuffle(y)
    X = rng.normal(size=(n, d))
    X[:, :5] += shift * (2 * y - 1)[:, None]
    return X, y


def with_ids(X, ids):
    return np.column_stack([np.asarray(ids, dtype=float), X])


def test_default_mlp_is_the_papers():
    pipe = default_mlp(7)
    assert [type(s) for _, s in pipe.steps] == [StandardScaler, MLPClassifier]
    p = pipe[-1].get_params()
    assert p["hidden_layer_sizes"] == (100,)
    assert (p["activation"], p["solver"], p["alpha"], p["learning_rate"]) == ("relu", "adam", 1e-4, "constant")
    assert (p["max_iter"], p["early_stopping"], p["random_state"]) == (200, False, 7)


@pytest.mark.parametrize("nested", [False, True])
def test_no_patient_in_train_and_test_of_any_fit(nested):
    FITS.clear()
    n = 7
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(n), 2)  # two rows per patient: aggregation must keep them together
    perm = rng.permutation(ids.size)
    X = with_ids(rng.normal(size=(ids.size, 3)), ids)[perm]
    y = np.repeat(np.array([0, 1, 0, 1, 1, 0, 0]), 2)[perm]
    groups = np.array([f"patient-{i}" for i in ids])[perm]
    LOSOEvaluation(Recorder(tag="leak"), nested=nested).evaluate(X, y, groups)

    records = FITS["leak"]
    assert len(records) == n + (n * (n - 1) // 2 if nested else 0)
    everyone = set(range(n))
    for r in records:
        assert r["train"].isdisjoint(r["test"]), r
        assert r["train"] | r["test"] == everyone  # every other patient is used for training
        assert len(r["test"]) == (1 if len(r["train"]) == n - 1 else 2)


def test_scaler_is_fitted_on_training_patients_only():
    FITS.clear()
    X, y = cohort(8, 4, seed=1)
    X = with_ids(X, range(8))
    est = Pipeline([("scaler", RecordingScaler(tag="sc")), ("clf", LogisticRegression())])
    LOSOEvaluation(est, nested=True).evaluate(X, y, np.arange(8))
    assert len(FITS["sc"]) == 8 + 28
    for r in FITS["sc"]:
        assert r["train"].isdisjoint(r["test"])


def test_patients_indexed_by_first_appearance_and_rows_averaged():
    groups = np.array(["c", "a", "c", "b", "a", "b", "d"])
    score = np.array([0.0, 1.0, 2.0, -1.0, 3.0, 1.0, 0.5])  # Recorder's logit per row
    y = np.array([1, 0, 1, 0, 0, 0, 1])
    X = np.column_stack([np.zeros(7), score])
    res = LOSOEvaluation(Recorder(), nested=False).evaluate(X, y, groups)
    sig = 1 / (1 + np.exp(-score))
    expected = [sig[[0, 2]].mean(), sig[[1, 4]].mean(), sig[[3, 5]].mean(), sig[6]]
    np.testing.assert_allclose(res.proba, expected)
    assert res.y_true.tolist() == [1, 0, 0, 1]


def test_single_class_training_fold_predicts_that_class():
    """Holding out the only positive leaves a negatives-only fold: P(positive) is 0, not a 2-column guess."""
    X, y = cohort(5, 3, seed=0)
    y = np.array([0, 0, 1, 0, 0])
    res = LOSOEvaluation(random_state=0, nested=False).evaluate(X, y, np.arange(5))
    assert res.proba[2] == 0.0


def test_input_validation():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="one label"):
        LOSOEvaluation(Recorder(), nested=False).evaluate(X, [0, 1, 1, 1], [0, 0, 1, 2])
    with pytest.raises(ValueError, match="at least 3"):
        LOSOEvaluation(Recorder(), nested=True).evaluate(X, [0, 0, 1, 1], [0, 0, 1, 1])
    with pytest.raises(ValueError, match="0 and 1"):
        LOSOEvaluation(Recorder(), nested=False).evaluate(X, [0, 2, 1, 1], [0, 1, 2, 3])


def test_seed_reaches_every_fit_and_factories_work():
    FITS.clear()
    X, y = cohort(5, 2, seed=0)
    LOSOEvaluation(Recorder(tag="seed", random_state=99), random_state=3).evaluate(X, y, np.arange(5))
    assert {r["seed"] for r in FITS["seed"]} == {3}
    seen = []
    LOSOEvaluation(lambda rs: seen.append(rs) or Recorder(tag="f"), random_state=4, nested=False).evaluate(
        X, y, np.arange(5)
    )
    assert seen == [4]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_separable_problem_is_learned_and_permuted_labels_stay_near_chance():
    X, y = cohort(16, 20, seed=0, shift=3.0)
    res = LOSOEvaluation(random_state=0, threshold_grid=ORIGINAL_GRID).evaluate(X, y, np.arange(16))
    assert res["optimistic"].metrics["balanced_accuracy"] > 0.9
    assert res["nested"].metrics["balanced_accuracy"] > 0.9

    X, y = cohort(30, 20, seed=0, shift=3.0)
    evaluation = LOSOEvaluation(random_state=0, nested=False)
    null = [
        evaluation.evaluate(X, np.random.default_rng(100 + s).permutation(y), np.arange(30))
        .metrics["optimistic"]["balanced_accuracy"]
        for s in range(5)
    ]
    # Optimistic threshold picking inflates the null a little above 0.5; a patient leaking into its own
    # training fold would push it to ~1.0, as resubstitution shows:
    assert np.mean(null) < 0.7, null
    yp = np.random.default_rng(100).permutation(y)
    assert (default_mlp(0).fit(X, yp).predict(X) == yp).mean() > 0.95


def test_same_seed_same_numbers_and_parallel_equals_serial():
    X, y = cohort(9, 30, seed=2, shift=0.5)
    groups = np.arange(9)
    a = LOSOEvaluation(random_state=5, threshold_grid=DP_GRID).evaluate(X, y, groups)
    b = LOSOEvaluation(random_state=5, threshold_grid=DP_GRID, n_jobs=2).evaluate(X, y, groups)
    c = LOSOEvaluation(random_state=6, threshold_grid=DP_GRID, nested=False).evaluate(X, y, groups)
    np.testing.assert_array_equal(a.proba, b.proba)
    np.testing.assert_array_equal(a.inner_proba, b.inner_proba)
    np.testing.assert_array_equal(a["nested"].thresholds, b["nested"].thresholds)
    assert a.metrics == b.metrics
    assert not np.array_equal(a.proba, c.proba)


def _noisy(n=12, seed=4):
    X, y = cohort(n, 6, seed=seed, shift=0.7)
    return X, y, LOSOEvaluation(LogisticRegression(C=0.5), threshold_grid=DP_GRID)


def test_nested_thresholds_equal_a_naive_inner_loso_on_training_patients():
    X, y, evaluation = _noisy()
    res = evaluation.evaluate(X, y, np.arange(y.size))
    est = LogisticRegression(C=0.5)
    for i in range(y.size):
        train = np.flatnonzero(np.arange(y.size) != i)
        inner = np.empty(train.size)
        for tr, te in LeaveOneGroupOut().split(X[train], y[train], train):
            inner[te] = clone(est).fit(X[train][tr], y[train][tr]).predict_proba(X[train][te])[:, 1]
        np.testing.assert_allclose(res.inner_proba[i, train], inner, rtol=1e-10)
        assert res["nested"].thresholds[i] == best_f1_threshold(y[train], inner, DP_GRID)
    assert np.unique(res["nested"].thresholds).size > 1  # thresholds really are chosen per fold
    assert np.isnan(res["nested"].threshold) and res["optimistic"].threshold in DP_GRID.tolist()
    expected = (res.proba >= res["nested"].thresholds).astype(int)
    np.testing.assert_array_equal(res["nested"].y_pred, expected)


def test_held_out_patient_cannot_move_its_own_nested_threshold():
    X, y, evaluation = _noisy()
    base = evaluation.evaluate(X, y, np.arange(y.size))
    for i in range(y.size):
        X2, y2 = X.copy(), y.copy()
        y2[i] = 1 - y2[i]
        X2[i] = X2[i] * -3 + 5
        moved = evaluation.evaluate(X2, y2, np.arange(y.size))
        assert moved["nested"].thresholds[i] == base["nested"].thresholds[i]
        others = np.arange(y.size) != i
        assert not np.allclose(moved.inner_proba[others], base.inner_proba[others], equal_nan=True)


def test_result_carries_metrics_and_confusion():
    X, y = cohort(6, 3, seed=0)
    res = LOSOEvaluation(Recorder(), nested=True).evaluate(X, y, np.arange(6))
    for name in ("optimistic", "nested"):
        p = res[name]
        (tn, fp), (fn, tp) = p.confusion
        assert (p.metrics["tn"], p.metrics["fp"], p.metrics["fn"], p.metrics["tp"]) == (tn, fp, fn, tp)
        assert p.metrics["n"] == 6 and "accuracy_ci_low" in p.metrics
    assert set(res.metrics) == {"optimistic", "nested"}


def test_inner_k_fold_thresholds_equal_a_naive_group_k_fold_on_training_patients():
    """``inner_folds=k``: each outer fold's threshold comes from a k-fold split of its training patients only,
    with n + n*k fits in all; rows of a patient stay together."""
    from sklearn.model_selection import GroupKFold

    X, y = cohort(12, 6, seed=4, shift=0.7)
    X, y, groups = np.repeat(X, 2, axis=0), np.repeat(y, 2), np.repeat(np.arange(12), 2)  # 2 rows per patient
    est = LogisticRegression(C=0.5)
    res = LOSOEvaluation(est, threshold_grid=DP_GRID, inner_folds=4).evaluate(X, y, groups)
    y_patient = y[::2]
    for i in range(12):
        others = np.flatnonzero(np.arange(12) != i)
        inner = np.empty(others.size)
        for tr, te in GroupKFold(4).split(others, groups=others):
            fit_rows = np.isin(groups, others[tr])
            model = clone(est).fit(X[fit_rows], y[fit_rows])
            for k in te:
                inner[k] = model.predict_proba(X[groups == others[k]])[:, 1].mean()
        np.testing.assert_allclose(res.inner_proba[i, others], inner, rtol=1e-10)
        assert np.isnan(res.inner_proba[i, i])
        assert res["nested"].thresholds[i] == best_f1_threshold(y_patient[others], inner, DP_GRID)
    FITS["kfold"].clear()
    LOSOEvaluation(Recorder(tag="kfold"), inner_folds=3).evaluate(with_ids(X[::2], np.arange(12)), y[::2],
                                                                 np.arange(12))
    assert len(FITS["kfold"]) == 12 + 12 * 3
    with pytest.raises(ValueError, match="inner_folds"):
        LOSOEvaluation(Recorder(), inner_folds=1).evaluate(X, y, groups)


def test_inner_k_fold_held_out_patient_cannot_move_its_own_threshold():
    X, y = cohort(12, 6, seed=4, shift=0.7)
    evaluation = LOSOEvaluation(LogisticRegression(C=0.5), threshold_grid=DP_GRID, inner_folds=4)
    base = evaluation.evaluate(X, y, np.arange(12))
    for i in range(12):
        X2, y2 = X.copy(), y.copy()
        y2[i] = 1 - y2[i]
        X2[i] = X2[i] * -3 + 5
        assert evaluation.evaluate(X2, y2, np.arange(12))["nested"].thresholds[i] == base["nested"].thresholds[i]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("inner_folds", [None, 3])
def test_batched_mlp_equals_scikit_learns_path(inner_folds, torch_one_thread):
    """Issue 37: the paper's MLP is fitted by eegprivacy.batched.AdamMLP by default; every probability equals
    scikit-learn's one-fit-at-a-time path to AdamMLP's 1e-9, the decisions and metrics exactly, for any n_jobs.
    Two rows per patient (grouped tasks) and a fold whose training set holds one class are included."""
    X, y = cohort(10, 12, seed=3, shift=0.6)
    y[:] = 0
    y[[2, 7]] = 1  # holding out patient 2 or 7 leaves one positive; inner folds without both see one class
    X, y, groups = np.repeat(X, 2, axis=0), np.repeat(y, 2), np.repeat(np.arange(10), 2)
    X += np.random.default_rng(0).normal(scale=0.1, size=X.shape)
    kw = dict(random_state=4, threshold_grid=DP_GRID, inner_folds=inner_folds)
    evaluation = LOSOEvaluation(**kw)
    prototype = evaluation.make_estimator()
    assert evaluation.batched_engine(prototype, [(np.arange(18), np.arange(2))]) is not None
    batched = evaluation.evaluate(X, y, groups)
    parallel = LOSOEvaluation(**kw, n_jobs=2).evaluate(X, y, groups)
    reference = LOSOEvaluation(**kw, batched=False).evaluate(X, y, groups)
    np.testing.assert_allclose(batched.proba, reference.proba, rtol=0, atol=1e-9)
    np.testing.assert_allclose(batched.inner_proba, reference.inner_proba, rtol=0, atol=1e-9)
    for name in ("optimistic", "nested"):
        np.testing.assert_array_equal(batched[name].thresholds, reference[name].thresholds)
        np.testing.assert_array_equal(batched[name].y_pred, reference[name].y_pred)
    assert batched.metrics == reference.metrics
    np.testing.assert_array_equal(parallel.proba, batched.proba)  # batches do not depend on n_jobs
    np.testing.assert_array_equal(parallel.inner_proba, batched.inner_proba)


def test_batched_path_is_taken_only_where_it_reproduces_scikit_learn():
    """Other estimators, fit_params, minibatch-sized training sets and batched=False keep scikit-learn's path."""
    small = [(np.arange(50), np.arange(50, 60))]
    evaluation = LOSOEvaluation(random_state=0)
    assert evaluation.batched_engine(evaluation.make_estimator(), small) is not None
    assert evaluation.batched_engine(evaluation.make_estimator(), [(np.arange(201), np.arange(1))]) is None
    assert evaluation.batched_engine(evaluation.make_estimator(), small, {"clients": np.zeros(60)}) is None
    assert LOSOEvaluation(random_state=None).batched_engine(default_mlp(None), small) is None  # unseeded
    assert LOSOEvaluation(batched=False).batched_engine(default_mlp(0), small) is None
    assert evaluation.batched_engine(Pipeline([("s", StandardScaler()), ("c", LogisticRegression())]), small) is None
