"""TemporalGapSplit with ``parts`` (synthetic index layouts, no data): each fold tests exactly one part (e.g. one
eegmmidb run) of every subject, training never holds a test window nor one within ``gap`` of it, and without
``parts`` the folds are the equal-block folds of before."""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas  # noqa: F401

from eegprivacy.embeddings.splits import TemporalGapSplit


def _runs(n_subjects=2, per_part=(6, 7, 5), seed=0):
    """Synthetic layout: each subject records parts 4, 8, 12 (the eegmmidb run numbers) one after another in
    time; rows are shuffled so order must come from ``times`` and part membership from ``parts``."""
    groups, parts, times = [], [], []
    for s in range(n_subjects):
        t = 0
        for run, n in zip((4, 8, 12), per_part):
            groups += [s] * n
            parts += [run] * n
            times += list(range(t, t + n))
            t += n
    perm = np.random.default_rng(seed).permutation(len(groups))
    return np.asarray(groups)[perm], np.asarray(parts)[perm], np.asarray(times, float)[perm]


def _rank_within(groups, times):
    """Each row's position in its subject's time order."""
    rank = np.empty(groups.size, int)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        rank[idx[np.argsort(times[idx], kind="stable")]] = np.arange(idx.size)
    return rank


@pytest.mark.parametrize("gap", [0, 1, 2])
def test_each_fold_tests_exactly_one_part_and_honours_the_gap(gap):
    groups, parts, times = _runs()
    X = np.zeros((groups.size, 1))
    sp = TemporalGapSplit(n_splits=3, gap=gap, times=times, parts=parts)
    rank = _rank_within(groups, times)
    folds = list(sp.split(X, groups=groups))
    assert len(folds) == sp.get_n_splits() == 3
    for (train, test), run in zip(folds, (4, 8, 12)):  # sorted part values
        assert np.array_equal(test, np.flatnonzero(parts == run))  # exactly that part, for every subject
        assert not set(train) & set(test)
        for g in np.unique(groups):
            r_tr = rank[train][groups[train] == g]
            r_te = rank[test][groups[test] == g]
            assert np.abs(r_tr[:, None] - r_te[None, :]).min() > gap  # gap honoured on both sides
            # and nothing more than the gap is dropped: every other window of the subject trains
            others = rank[(groups == g) & (parts != run)]
            dist = np.abs(others[:, None] - r_te[None, :]).min(axis=1)
            assert np.array_equal(np.sort(r_tr), np.sort(others[dist > gap]))
    assert np.array_equal(np.sort(np.concatenate([t for _, t in folds])), np.arange(groups.size))


def test_gap_drops_exactly_gap_windows_each_side_of_a_middle_part():
    groups, parts, times = _runs(n_subjects=1, seed=3)
    order = np.argsort(times)  # rows in time order: part 4 = positions 0..5, 8 = 6..12, 12 = 13..17
    train, test = list(TemporalGapSplit(3, gap=2, times=times, parts=parts).split(
        np.zeros((groups.size, 1)), groups=groups))[1]
    pos = np.empty(groups.size, int)
    pos[order] = np.arange(groups.size)
    assert sorted(pos[test]) == list(range(6, 13))
    assert sorted(pos[train]) == [0, 1, 2, 3] + [15, 16, 17]


def test_subject_lacking_a_part_trains_but_is_not_tested_there():
    groups = np.array([0] * 9 + [1] * 6)
    parts = np.array([1] * 3 + [2] * 3 + [3] * 3 + [1] * 3 + [3] * 3)  # subject 1 has no part 2
    folds = list(TemporalGapSplit(3, gap=0, parts=parts).split(np.zeros((15, 1)), groups=groups))
    train, test = folds[1]
    assert set(groups[test]) == {0}
    assert set(np.flatnonzero(groups == 1)) <= set(train)


def test_n_splits_must_match_the_number_of_parts():
    groups, parts, times = _runs()
    with pytest.raises(ValueError, match=r"3 distinct values but n_splits=2"):
        TemporalGapSplit(2, gap=1, times=times, parts=parts)
    with pytest.raises(ValueError, match="one entry per window"):
        list(TemporalGapSplit(3, gap=1, parts=parts[:-1]).split(np.zeros((groups.size, 1)), groups=groups))


def test_empty_fold_still_raises():
    groups = np.zeros(6, int)
    parts = np.array([0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="empty fold"):  # gap 4 leaves no training window next to a 2-window part
        list(TemporalGapSplit(3, gap=4, parts=parts).split(np.zeros((6, 1)), groups=groups))


@pytest.mark.parametrize("n_splits,gap,shuffled", [(4, 2, True), (3, 0, False), (5, 1, True)])
def test_without_parts_the_folds_are_unchanged(n_splits, gap, shuffled):
    """``parts=None`` takes the old equal-block path; checked against an inline copy of that rule."""
    groups = np.repeat(np.arange(5), [23, 11, 4, 17, 9])  # one subject too short for 5 splits: skipped
    times = np.random.default_rng(1).permutation(groups.size).astype(float) if shuffled else None
    X = np.zeros((groups.size, 1))
    old = list(TemporalGapSplit(n_splits, gap, times=times).split(X, groups=groups))
    new = list(TemporalGapSplit(n_splits, gap, times=times, parts=None).split(X, groups=groups))
    t = np.arange(groups.size) if times is None else times
    for k, ((tr_a, te_a), (tr_b, te_b)) in enumerate(zip(old, new)):
        assert np.array_equal(tr_a, tr_b) and np.array_equal(te_a, te_b)
        expect_tr, expect_te = [], []
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            idx = idx[np.argsort(t[idx], kind="stable")]
            if idx.size < n_splits:
                continue
            block = np.array_split(np.arange(idx.size), n_splits)[k]
            pos = np.arange(idx.size)
            expect_te.append(idx[block])
            expect_tr.append(idx[(pos < block[0] - gap) | (pos > block[-1] + gap)])
        assert np.array_equal(tr_a, np.sort(np.concatenate(expect_tr)))
        assert np.array_equal(te_a, np.sort(np.concatenate(expect_te)))
