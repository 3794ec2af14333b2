"""subject_label_leakage on SYNTHETIC embeddings (no EEG): a subject-level label (a diagnosis stand-in) decoded
from held-out subjects reads chance with an interval covering it when the embeddings carry no label, lies above its
permuted-label null when the class shifts the embedding mean, and its permuted null moves whole subjects' labels."""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas  # noqa: F401
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LinearRegression

from eegprivacy.embeddings.endpoints.labels import _ba_draws, subject_label_leakage
from eegprivacy.embeddings.heads import weighted_balanced_accuracy
from eegprivacy.embeddings.splits import SubjectDisjointSplit, TemporalGapSplit
from eegprivacy.evaluation.cluster_bootstrap import subject_counts


def synthetic_cohort(seed=0, n_subjects=40, n_windows=6, dim=8, shift=0.0, offset=1.0):
    """Synthetic cohort: balanced subject labels ("HC"/"SZ") in random order; each subject has a random offset
    (subjects differ, as real ones do) and the label adds ``shift`` to every embedding coordinate (0: no signal)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_subjects), n_windows)
    labels = rng.permutation(np.arange(n_subjects) % 2)
    Z = (rng.standard_normal((groups.size, dim)) + offset * np.repeat(rng.standard_normal((n_subjects, dim)),
                                                                       n_windows, axis=0)
         + shift * labels[groups][:, None])
    return Z, np.array(["HC", "SZ"])[labels[groups]], groups


def test_no_signal_synthetic_reads_chance_with_an_interval_covering_it():
    Z, y, groups = synthetic_cohort(seed=1)
    res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=500,
                                n_permutations=19, random_state=0)
    assert res.ci[0] <= 0.5 <= res.ci[1]
    assert res.window_ci[0] <= 0.5 <= res.window_ci[1]
    assert abs(res.balanced_accuracy - 0.5) < 0.2
    assert res.p_value > 0.1
    assert res.n_subjects == 40 and res.n_windows == Z.shape[0] and res.ci_over == "subjects"
    assert res.draws.shape == (500,) and res.null_scores.shape == (19,)


def _null_runs(prior_corrected, n_datasets=100):
    """(coverage of 0.5 by the 95 % interval, mean balanced accuracy) over synthetic no-signal cohorts."""
    covered, values = 0, []
    for seed in range(n_datasets):
        Z, y, groups = synthetic_cohort(seed=seed)
        res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=seed), n_bootstrap=200,
                                    n_permutations=0, random_state=seed, prior_corrected=prior_corrected)
        covered += res.ci[0] <= 0.5 <= res.ci[1]
        values.append(res.balanced_accuracy)
    return covered / n_datasets, float(np.mean(values))


def test_null_coverage_over_100_synthetic_no_signal_cohorts():
    """The interval covers chance in >= 85 % of label-free cohorts and the mean reads chance; the plain 0.5 rule
    reads below chance (the training fold's class balance is anti-correlated with the held-out fold's), which is
    why the decision is made relative to the training prior by default."""
    coverage, mean = _null_runs(prior_corrected=True)
    assert coverage >= 0.85
    assert abs(mean - 0.5) < 0.02
    _, mean_plain = _null_runs(prior_corrected=False)
    assert mean_plain < mean - 0.02


def test_strong_synthetic_subject_signal_lies_above_its_nulls():
    Z, y, groups = synthetic_cohort(seed=2, shift=1.5)
    n_perm = 19
    res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=500,
                                n_permutations=n_perm, random_state=0)
    assert res.ci[0] > 0.5 and res.window_ci[0] > 0.5
    assert res.ci[0] > res.control_permuted_q95
    assert res.p_value == pytest.approx(1 / (1 + n_perm))
    assert res.ci[0] > res.control_gaussian
    assert abs(res.control_permuted - 0.5) < 0.15 and abs(res.control_gaussian - 0.5) < 0.25


class _RecordingHead(ClassifierMixin, BaseEstimator):
    """Learns nothing; records every (X, y) it is fitted on so a test can inspect the labels the null used."""

    fits: list = []

    def fit(self, X, y):
        type(self).fits.append((np.asarray(X).copy(), np.asarray(y).copy()))
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, X):
        return np.full((len(X), self.classes_.size), 1.0 / self.classes_.size)

    def predict(self, X):
        return self.classes_[np.zeros(len(X), int)]


def test_permuted_null_moves_whole_subjects_labels(monkeypatch):
    """A window-level shuffle would give training subjects mixed labels; the subject-level null must keep one
    label per subject, permute the labels across all subjects once per permutation (a subject carries the same
    permuted label into every fold it trains in; the multiset of labels is unchanged), leave every training fold
    with both classes, and actually permute. (Issue 46: it used to permute within each fold's training subjects,
    a null not exchangeable with the observed labels.)"""
    Z, y, groups = synthetic_cohort(seed=3)
    Z[:, 0] = np.arange(Z.shape[0])  # column 0 names the row, so each recorded fit tells whose windows it saw
    monkeypatch.setattr(_RecordingHead, "fits", [])
    n_perm, n_folds = 6, 4
    subject_label_leakage(Z, y, groups, SubjectDisjointSplit(n_folds, random_state=0), estimator=_RecordingHead(),
                          n_bootstrap=10, n_permutations=n_perm, random_state=0)
    codes = np.unique(y, return_inverse=True)[1]
    truth = np.array([codes[groups == s][0] for s in np.unique(groups)])
    on_rows = [(X[:, 0].astype(int), lab) for X, lab in _RecordingHead.fits
               if np.array_equal(X[:, 0], np.round(X[:, 0]))]  # the Gaussian control's fits drop out
    assert len(on_rows) == n_folds * (1 + n_perm)
    assert all(np.array_equal(lab, codes[rows]) for rows, lab in on_rows[:n_folds])  # the real fits: true labels
    changed = 0
    for p in range(n_perm):
        permuted = np.full(truth.size, -1)
        for rows, lab in on_rows[n_folds * (1 + p):n_folds * (2 + p)]:
            for s in np.unique(groups[rows]):
                u = np.unique(lab[groups[rows] == s])
                assert u.size == 1  # one label per training subject
                assert permuted[s] in (-1, u[0])  # the same label in every fold the subject trains in
                permuted[s] = u[0]
            assert np.unique(lab).size == 2  # every training fold sees both classes
        assert (permuted >= 0).all()  # every subject trains somewhere
        assert np.array_equal(np.sort(permuted), np.sort(truth))  # permuted across all subjects
        changed += not np.array_equal(permuted, truth)
    assert changed > 0


def test_mixed_labels_within_a_subject_raise():
    Z, y, groups = synthetic_cohort(seed=4)
    y = y.copy()
    y[np.flatnonzero(groups == 7)[0]] = "SZ" if y[groups == 7][0] == "HC" else "HC"
    with pytest.raises(ValueError, match="1 of 40 subjects have windows with different labels"):
        subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=10,
                              n_permutations=0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        subject_label_leakage(Z, np.full(groups.size, "HC"), groups, SubjectDisjointSplit(5, random_state=0))


def test_needs_held_out_subjects_and_probabilities():
    Z, y, groups = synthetic_cohort(seed=5)
    with pytest.raises(ValueError, match="subject-disjoint"):
        subject_label_leakage(Z, y, groups, TemporalGapSplit(3, gap=1), n_bootstrap=10, n_permutations=0)
    with pytest.raises(TypeError, match="predict_proba"):
        subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), estimator=LinearRegression())


def test_same_seed_same_result_other_seed_other_interval():
    Z, y, groups = synthetic_cohort(seed=6, shift=0.3)
    split = SubjectDisjointSplit(5, random_state=0)
    kw = dict(n_bootstrap=200, n_permutations=5)
    a = subject_label_leakage(Z, y, groups, split, random_state=11, **kw)
    b = subject_label_leakage(Z, y, groups, split, random_state=11, **kw)
    c = subject_label_leakage(Z, y, groups, split, random_state=12, **kw)
    assert a.as_dict() == b.as_dict()
    assert np.array_equal(a.draws, b.draws) and np.array_equal(a.null_scores, b.null_scores)
    assert a.ci != c.ci


def test_no_permutations_gives_nan_null_and_p_value():
    Z, y, groups = synthetic_cohort(seed=7)
    res = subject_label_leakage(Z, y, groups, SubjectDisjointSplit(5, random_state=0), n_bootstrap=20,
                                n_permutations=0)
    assert np.isnan(res.p_value) and np.isnan(res.control_permuted) and np.isnan(res.control_permuted_q95)


def test_bootstrap_draws_equal_weighted_balanced_accuracy_per_resample():
    """The vectorised draws weight each window by its subject's multiplicity, exactly like
    ``weighted_balanced_accuracy`` on the windows; a resample that lost a class is NaN."""
    rng = np.random.default_rng(0)
    n_subjects = 9
    cls = np.r_[np.zeros(4, int), np.ones(5, int)]
    tries = rng.integers(1, 6, n_subjects).astype(float)
    index = np.repeat(np.arange(n_subjects), tries.astype(int))
    truth = cls[index]
    pred = np.where(rng.random(index.size) < 0.7, truth, 1 - truth)
    hits = np.bincount(index, weights=(pred == truth), minlength=n_subjects)
    W = subject_counts(n_subjects, 50, 0).astype(float)
    W[0] = np.r_[np.zeros(4), np.ones(5)]  # only class 1 drawn
    draws = _ba_draws(cls, hits, tries, W)
    expected = [weighted_balanced_accuracy(truth, pred, w[index]) for w in W]
    np.testing.assert_allclose(draws, expected, equal_nan=True)
    assert np.isnan(draws[0])
