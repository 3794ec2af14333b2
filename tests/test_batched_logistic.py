"""The batched logistic regression (eegprivacy.batched.logistic) is scikit-learn's default head, many label vectors
at once, and the permuted-label null that subject_label_leakage builds on it is the one-fit-at-a-time null.

All data here are SYNTHETIC (Gaussian features, no EEG). The references, strictest first:
1. scikit-learn's own fit converged (``newton-cholesky``, tol 1e-12): equal to 1e-8 in probability and
   coefficients; the default head's L-BFGS with its tol tightened to 1e-10: equal to 1e-5. The default head as
   shipped (L-BFGS, tol 1e-4) stops short of the optimum -- by up to 1e-2 in probability even on these small
   tables -- so it is held to a weaker, one-sided standard: its objective is never below the batched one;
2. subject_label_leakage through the batched path against the same function refitting a converged scikit-learn
   head one fit at a time: the same result, null included, except a permutation whose held-out subject sits
   within 1e-6 of the decision rule;
3. labels independent of the embeddings: a null centred on chance and a p-value that is not small.
"""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas  # noqa: F401
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils import check_random_state

from eegprivacy.batched.logistic import logistic_C, logistic_proba
from eegprivacy.embeddings.endpoints.labels import (
    _batched_subject_probabilities,
    _oof_subject_probabilities,
    _permuted_subject_codes,
    _subject_label_codes,
    subject_label_leakage,
)
from eegprivacy.embeddings.heads import default_head
from eegprivacy.embeddings.splits import SubjectDisjointSplit
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _table(n, d, seed, n_labels=6, signal=1.0):
    """SYNTHETIC training rows (correlated, offset, unequal scales: as embeddings are), test rows, and label
    vectors: half drawn from a logistic model of the standardised features (``signal`` its weights' norm, about;
    10 at d = n/2 makes them separable), half balanced labels with no relation to the features."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) / np.sqrt(d) + np.eye(d)
    X = rng.standard_normal((n, d)) @ mix * rng.uniform(0.3, 3.0, d) + rng.normal(0, 5, d)
    X_test = rng.standard_normal((40, d)) @ mix * 2.0
    w = rng.standard_normal(d) / np.sqrt(d) * signal
    p = 1 / (1 + np.exp(-((X - X.mean(axis=0)) / X.std(axis=0)) @ w))
    Y = np.array([(rng.random(n) < p).astype(int) for _ in range(n_labels // 2)]
                 + [rng.permutation(np.arange(n) % 2) for _ in range(n_labels - n_labels // 2)])
    return X, Y, X_test


def _objective(model, X, y) -> float:
    """scikit-learn's objective, unscaled: 0.5 ||w||² + C Σ log-loss, on the pipeline's standardised rows."""
    Xs = model[0].transform(X)
    lr = model[-1]
    m = Xs @ lr.coef_[0] + lr.intercept_[0]
    return float(0.5 * lr.coef_[0] @ lr.coef_[0] + lr.C * np.sum(np.logaddexp(0, m) - y * m))


CASES = {"well_conditioned": (300, 10, 1.0), "nearly_separable_d_is_n_over_2": (120, 60, 10.0)}


@pytest.mark.parametrize("case", CASES)
def test_probabilities_equal_a_converged_default_head(case):
    """SYNTHETIC tables. In the nearly separable case the model-drawn labels are separable (only the L2 penalty
    keeps the optimum finite; test probabilities reach 1e-15) and the random ones are 80 % fitted."""
    n, d, signal = CASES[case]
    X, Y, X_test = _table(n, d, seed=1, signal=signal)
    fits = logistic_proba(X, Y, X_test)
    assert fits.converged.all() and fits.proba.shape == (len(Y), len(X_test))
    for j, y in enumerate(Y):
        exact = default_head().set_params(logisticregression__solver="newton-cholesky",
                                          logisticregression__tol=1e-12).fit(X, y)
        np.testing.assert_allclose(fits.proba[j], exact.predict_proba(X_test)[:, 1], rtol=0, atol=1e-8)
        np.testing.assert_allclose(fits.decision[j], exact.decision_function(X_test), rtol=0, atol=1e-7)
        np.testing.assert_allclose(fits.coef[j], exact[-1].coef_[0], rtol=0, atol=1e-8)
        assert abs(fits.intercept[j] - exact[-1].intercept_[0]) <= 1e-8

        tight = default_head().set_params(logisticregression__tol=1e-10, logisticregression__max_iter=100_000)
        tight.fit(X, y)
        assert np.max(np.abs(fits.proba[j] - tight.predict_proba(X_test)[:, 1])) <= 1e-5

        shipped = default_head().fit(X, y)  # L-BFGS at tol 1e-4: near the optimum, never below it
        batched_model = default_head().set_params(logisticregression__solver="newton-cholesky",
                                                  logisticregression__tol=1e-12).fit(X, y)
        batched_model[-1].coef_[0], batched_model[-1].intercept_[0] = fits.coef[j], fits.intercept[j]
        assert _objective(batched_model, X, y) <= _objective(shipped, X, y) + 1e-9


def test_mixed_precision_and_chunks_change_nothing_but_rounding():
    """SYNTHETIC table: float32 Hessian-vector products and one fit per chunk give the float64 batch's fits."""
    X, Y, X_test = _table(200, 30, seed=3, n_labels=9)
    ref = logistic_proba(X, Y, X_test, mixed=False)
    chunked = logistic_proba(X, Y, X_test, max_bytes=1)  # one fit per chunk
    mixed = logistic_proba(X, Y, X_test)
    np.testing.assert_allclose(chunked.proba, ref.proba, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mixed.proba, ref.proba, rtol=0, atol=1e-9)
    assert (np.abs(mixed.n_iter - ref.n_iter) <= 1).all()


def test_constant_column_and_bad_labels():
    """SYNTHETIC table with a constant column (scale 1, as StandardScaler); one-class or non-0/1 labels refused."""
    X, Y, X_test = _table(150, 8, seed=4, n_labels=2)
    X[:, 2] = 7.0  # StandardScaler keeps scale 1 for a constant column; its coefficient is 0
    fits = logistic_proba(X, Y, X_test)
    ref = default_head().set_params(logisticregression__solver="newton-cholesky",
                                    logisticregression__tol=1e-12).fit(X, Y[0])
    np.testing.assert_allclose(fits.proba[0], ref.predict_proba(X_test)[:, 1], rtol=0, atol=1e-8)
    assert abs(fits.coef[0, 2]) <= 1e-8
    with pytest.raises(ValueError, match="one class only"):
        logistic_proba(X, np.r_[Y[:1], np.zeros((1, X.shape[0]), int)], X_test)
    with pytest.raises(ValueError, match="only 0 and 1"):
        logistic_proba(X, 2 * Y, X_test)


class _OtherLogistic(LogisticRegression):
    """scikit-learn's logistic regression under another name: logistic_C does not recognise a subclass, so
    subject_label_leakage refits it one fit at a time (its path before the batched solver)."""


def test_which_heads_are_batched():
    assert logistic_C(default_head()) == 1.0
    assert logistic_C(make_pipeline(StandardScaler(), LogisticRegression(C=0.1, solver="newton-cholesky"))) == 0.1
    for head in (make_pipeline(StandardScaler(), _OtherLogistic()),
                 make_pipeline(StandardScaler(), LogisticRegression(penalty="l1", solver="saga")),
                 make_pipeline(StandardScaler(), LogisticRegression(solver="liblinear")),
                 make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced")),
                 make_pipeline(StandardScaler(with_mean=False), LogisticRegression()),
                 make_pipeline(StandardScaler(), FunctionTransformer(), LogisticRegression()),
                 LogisticRegression()):
        assert logistic_C(head) is None, head


def _cohort(seed, n_subjects=30, n_windows=6, dim=12, shift=0.0):
    """SYNTHETIC cohort: balanced subject labels, a random offset per subject, the label adding ``shift`` to every
    coordinate (0: the embeddings carry no label)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_subjects), n_windows)
    labels = rng.permutation(np.arange(n_subjects) % 2)
    Z = (rng.standard_normal((groups.size, dim)) + np.repeat(rng.standard_normal((n_subjects, dim)), n_windows, 0)
         + shift * labels[groups][:, None])
    return Z, np.array(["HC", "SZ"])[labels[groups]], groups


@pytest.mark.parametrize("prior_corrected", [True, False])
def test_batched_scores_equal_the_one_fit_at_a_time_scores(prior_corrected):
    """SYNTHETIC cohort, 40 dimensions for ~140 training windows a fold: each subject's summed class scores and
    each window's prediction, per permutation, as _oof_subject_probabilities forms them from converged fits."""
    Z, y, groups = _cohort(seed=6, dim=40)
    _, _, s_index, subject_code = _subject_label_codes(y, groups, len(y))
    folds = list(SubjectDisjointSplit(5, random_state=1).split(Z, subject_code[s_index], groups))
    rng = np.random.RandomState(0)
    codes = _permuted_subject_codes(subject_code, s_index, folds, np.arange(subject_code.size), 4, rng)
    perms = [[labels[s_index[train]] for train, _ in folds] for labels in codes]
    stacked = [np.stack([labels[k] for labels in perms]) for k in range(len(folds))]
    n_subjects = subject_code.size
    got, rows, pred = _batched_subject_probabilities(default_head(), 1.0, Z, stacked, folds, s_index, n_subjects,
                                                     2, prior_corrected, window_predictions=True)
    head = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cholesky", tol=1e-12, max_iter=1000))
    for p, labels in enumerate(perms):
        ref, ref_rows, ref_pred = _oof_subject_probabilities(head, Z, labels, folds, s_index, n_subjects, 2,
                                                             prior_corrected, window_predictions=True)
        np.testing.assert_allclose(got[p], ref, rtol=0, atol=1e-7)
        np.testing.assert_array_equal(rows, ref_rows)
        np.testing.assert_array_equal(pred[p], ref_pred)


def _near_rule(Z, y, groups, split, head, n_bootstrap, n_permutations, seed) -> set[int]:
    """Permutations whose null has a held-out subject within 1e-6 of the decision rule (its mean prior-corrected
    scores of the two classes that close), replaying subject_label_leakage's draws one fit at a time."""
    _, _, s_index, subject_code = _subject_label_codes(y, groups, len(y))
    folds = list(split.split(Z, subject_code[s_index], groups))
    rng = check_random_state(seed)
    rng.standard_normal(Z.shape)  # the Gaussian control's embeddings
    subject_counts(subject_code.size, n_bootstrap, rng)  # the bootstrap
    windows = np.bincount(s_index)
    near = set()
    codes = _permuted_subject_codes(subject_code, s_index, folds, np.arange(subject_code.size), n_permutations, rng)
    for p in range(n_permutations):
        labels = [codes[p][s_index[train]] for train, _ in folds]
        score = _oof_subject_probabilities(head, Z, labels, folds, s_index, subject_code.size, 2, True)
        if np.min(np.abs(score[:, 1] - score[:, 0]) / windows) < 1e-6:
            near.add(p)
    return near


def test_batched_null_equals_the_one_fit_at_a_time_null():
    """SYNTHETIC cohort with a weak label signal; the one-at-a-time head is converged (newton-cholesky, tol 1e-12),
    so both paths fit the same optimum and every field agrees."""
    Z, y, groups = _cohort(seed=5, shift=0.3)
    split = SubjectDisjointSplit(5, random_state=0)
    kw = dict(n_bootstrap=50, n_permutations=40, random_state=3)
    loop_head = make_pipeline(StandardScaler(), _OtherLogistic(solver="newton-cholesky", tol=1e-12, max_iter=1000))
    batched = subject_label_leakage(Z, y, groups, split, **kw)
    loop = subject_label_leakage(Z, y, groups, split, estimator=loop_head, **kw)
    assert batched.balanced_accuracy == loop.balanced_accuracy
    assert batched.window_balanced_accuracy == loop.window_balanced_accuracy
    assert batched.control_gaussian == loop.control_gaussian
    np.testing.assert_array_equal(batched.draws, loop.draws)
    differ = set(np.flatnonzero(batched.null_scores != loop.null_scores).tolist())
    if differ:  # only a subject on the decision rule may read differently
        assert differ <= _near_rule(Z, y, groups, split, loop_head, 50, 40, 3)
    else:
        assert batched.p_value == loop.p_value
    assert len(set(batched.null_scores.tolist())) > 3  # the permutations really differ


def test_no_signal_null_is_centred_on_chance():
    """SYNTHETIC cohort whose labels are independent of its embeddings: 500 permutations (batched) centre near 0.5
    and the observed score is unremarkable among them."""
    Z, y, groups = _cohort(seed=8, n_subjects=40, n_windows=8, dim=16)
    res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=100,
                                n_permutations=500, random_state=0)
    assert res.null_scores.shape == (500,) and np.isfinite(res.null_scores).all()
    assert abs(res.control_permuted - 0.5) < 0.03
    assert res.p_value > 0.1
    assert 0.5 < res.control_permuted_q95 < 0.75


def test_a_fit_the_solver_does_not_converge_is_refitted_by_the_head(monkeypatch):
    """SYNTHETIC cohort; the solver is made to report its first fit of every fold unconverged (with a NaN
    answer): that fit is redone with the head itself, with a warning, and nothing NaN reaches the result."""
    import eegprivacy.batched.logistic as batched

    solve = batched.logistic_proba

    def first_fit_fails(*args, **kwargs):
        fits = solve(*args, **kwargs)
        fits.proba[0], fits.decision[0], fits.converged[0] = np.nan, np.nan, False
        return fits

    monkeypatch.setattr(batched, "logistic_proba", first_fit_fails)
    Z, y, groups = _cohort(seed=9)
    with pytest.warns(RuntimeWarning, match="did not converge in the batched solver"):
        res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=20,
                                    n_permutations=5, random_state=0)
    assert np.isfinite([res.balanced_accuracy, res.window_balanced_accuracy, res.control_gaussian]).all()
    assert np.isfinite(res.null_scores).all()
