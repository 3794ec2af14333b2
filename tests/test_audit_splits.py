"""Study C splitters: subject-disjoint never shares a subject; temporal-gap never puts adjacent windows
(within the gap) on both sides; reference sets only hold subjects present on both sides."""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas  # noqa: F401
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_predict

from eegprivacy.embeddings.splits import ReferenceSetSplit, SubjectDisjointSplit, TemporalGapSplit


def _groups(n_subjects=7, n_windows=23):
    return np.repeat(np.arange(n_subjects), n_windows)


def test_subject_disjoint_never_shares_a_subject_and_covers_all():
    groups = _groups()
    X = np.zeros((groups.size, 2))
    sp = SubjectDisjointSplit(n_splits=3, random_state=1)
    seen = []
    for train, test in sp.split(X, groups=groups):
        assert not set(groups[train]) & set(groups[test])
        assert set(groups[train]) | set(groups[test]) == set(groups)
        seen.append(test)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(groups.size))
    assert sp.get_n_splits() == 3


def test_subject_disjoint_is_seeded():
    groups = _groups()
    X = np.zeros((groups.size, 1))
    a = [t.tolist() for _, t in SubjectDisjointSplit(3, random_state=4).split(X, groups=groups)]
    b = [t.tolist() for _, t in SubjectDisjointSplit(3, random_state=4).split(X, groups=groups)]
    c = [t.tolist() for _, t in SubjectDisjointSplit(3, random_state=5).split(X, groups=groups)]
    assert a == b and a != c


def test_subject_disjoint_needs_groups_and_enough_subjects():
    X = np.zeros((10, 1))
    with pytest.raises(ValueError):
        list(SubjectDisjointSplit(3).split(X))
    with pytest.raises(ValueError):
        list(SubjectDisjointSplit(3).split(X, groups=np.repeat([0, 1], 5)))


@pytest.mark.parametrize("gap", [0, 2, 3])
def test_temporal_gap_keeps_gap_between_train_and_test(gap):
    rng = np.random.default_rng(0)
    groups = _groups()
    times = rng.permutation(groups.size).astype(float)  # shuffled rows: order must come from `times`
    X = np.zeros((groups.size, 1))
    sp = TemporalGapSplit(n_splits=4, gap=gap, times=times)
    all_test = []
    for train, test in sp.split(X, groups=groups):
        assert not set(train) & set(test)
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            rank = np.empty(idx.size, int)
            rank[np.argsort(times[idx])] = np.arange(idx.size)
            rank_of = dict(zip(idx, rank))
            r_tr = np.array([rank_of[i] for i in train if groups[i] == g])
            r_te = np.array([rank_of[i] for i in test if groups[i] == g])
            assert r_tr.size and r_te.size  # every subject on both sides
            assert np.abs(r_tr[:, None] - r_te[None, :]).min() > gap
            assert np.ptp(r_te) == r_te.size - 1  # the test block is contiguous in time
        all_test.append(test)
    assert np.array_equal(np.sort(np.concatenate(all_test)), np.arange(groups.size))


def test_temporal_gap_drops_exactly_gap_windows_each_side():
    groups = np.zeros(20, int)
    folds = list(TemporalGapSplit(n_splits=4, gap=2).split(np.zeros((20, 1)), groups=groups))
    train, test = folds[1]  # test = rows 5..9, rows 3,4 and 10,11 dropped
    assert test.tolist() == [5, 6, 7, 8, 9]
    assert train.tolist() == [0, 1, 2] + list(range(12, 20))


def test_splitters_work_with_sklearn_cross_val_predict():
    groups = _groups(6, 12)
    X = np.random.default_rng(0).standard_normal((groups.size, 3))
    y = X[:, 0]
    for sp in (SubjectDisjointSplit(3, random_state=0), TemporalGapSplit(3, gap=1)):
        pred = cross_val_predict(Ridge(), X, y, groups=groups, cv=sp)
        assert np.corrcoef(pred, y)[0, 1] > 0.9


def test_reference_set_by_parts_only_keeps_subjects_with_both():
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3])
    parts = np.array(["rest", "rest", "task", "task"] * 2 + ["rest", "rest", "task", "task"])
    sp = ReferenceSetSplit(parts=parts, reference_part="rest", query_part="task", symmetric=True)
    (ref, qry), (ref2, qry2) = list(sp.split(np.zeros((12, 1)), groups=groups))
    assert set(groups[ref]) == set(groups[qry]) == {0, 1}  # 2 only rest, 3 only task
    assert (parts[ref] == "rest").all() and (parts[qry] == "task").all()
    assert ref2.tolist() == qry.tolist() and qry2.tolist() == ref.tolist()
    assert sp.get_n_splits() == 2


def test_reference_set_by_time_halves_with_gap():
    groups = np.repeat([0, 1, 2], 10)
    (ref, qry), = ReferenceSetSplit(gap=2).split(np.zeros((30, 1)), groups=groups)
    for g in range(3):
        r = ref[groups[ref] == g] - 10 * g
        q = qry[groups[qry] == g] - 10 * g
        assert r.tolist() == [0, 1, 2] and q.tolist() == [7, 8, 9]
