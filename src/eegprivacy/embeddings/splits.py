"""Cross-validators for the Study C audit: each split is the one that can falsify one kind of claim.

All three follow scikit-learn's splitter contract (``split(X, y=None, groups=None)`` yielding integer index
arrays, ``get_n_splits``), so they plug into ``cross_val_predict`` and into the audit endpoints alike.
``groups`` is always the subject of each window.

Time order **(ours)**: ``TemporalGapSplit`` and ``ReferenceSetSplit`` need to know the order of windows inside a
subject. They take it at construction (``times=`` / ``parts=``, one value per row of the ``X`` later passed to
``split``) because scikit-learn only forwards ``X, y, groups`` to splitters; with ``times=None`` the row order
within each subject is taken as time order. The gap is counted in windows, not seconds, so it means the same
for every window length.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["TemporalGapSplit", "SubjectDisjointSplit", "ReferenceSetSplit"]


def _check_groups(X, groups) -> np.ndarray:
    n = len(X)
    if groups is None:
        raise ValueError("groups (the subject of each window) is required")
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must have one entry per window: {groups.shape} vs {n} windows")
    return groups


def _order_within(groups: np.ndarray, times) -> dict:
    """Row indices of each subject, sorted by time (stable, so ties keep row order)."""
    n = groups.size
    if times is None:
        t = np.arange(n)
    else:
        t = np.asarray(times)
        if t.shape != (n,):
            raise ValueError(f"times must have one entry per window: {t.shape} vs {n} windows")
    out = {}
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        out[g] = idx[np.argsort(t[idx], kind="stable")]
    return out


class TemporalGapSplit:
    """Within-subject contiguous blocks in time; ``gap`` windows on each side of the test block are dropped.

    Every subject appears in both train and test (this split measures within-subject decodability), but no
    training window lies within ``gap`` windows (in time order) of a test window, so overlap or autocorrelation
    between adjacent windows cannot carry a test window's content into training. The protocol's default gap
    is 2 windows, i.e. at least one window length. Subjects with fewer than ``n_splits`` windows are skipped
    (in every fold) rather than silently producing empty blocks.

    With ``parts`` (one value per window, e.g. the recording run of each eegmmidb window) the test blocks are the
    parts instead of equal-size blocks, because a run is the unit a deployment would see later: fold k tests, for
    every subject, its windows of the k-th part (parts in sorted order of their values), and trains on its other
    windows except those within ``gap`` windows (in that subject's time order) of a test window. ``n_splits``
    must then equal the number of distinct parts. A subject lacking part k contributes no test windows to fold k
    and trains on all its windows there; no subject is skipped for having few windows.
    """

    def __init__(self, n_splits: int = 5, gap: int = 2, times=None, parts=None):
        if int(n_splits) < 2:
            raise ValueError(f"n_splits must be >= 2, got {n_splits}")
        if int(gap) < 0:
            raise ValueError(f"gap must be >= 0, got {gap}")
        self.n_splits = int(n_splits)
        self.gap = int(gap)
        self.times = times
        self.parts = parts
        if parts is not None:
            self._part_values()

    def _part_values(self) -> np.ndarray:
        """The distinct parts in sorted order (fold k tests the k-th); their number must be ``n_splits``."""
        values = np.unique(np.asarray(self.parts))
        if values.size != self.n_splits:
            raise ValueError(f"parts holds {values.size} distinct values but n_splits={self.n_splits}: with parts, "
                             "each fold tests one part, so the two must be equal")
        return values

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def split(self, X, y=None, groups=None):
        groups = _check_groups(X, groups)
        order = _order_within(groups, self.times)
        if self.parts is not None:
            yield from self._split_by_part(groups, order)
            return
        for k in range(self.n_splits):
            train, test = [], []
            for idx in order.values():
                if idx.size < self.n_splits:
                    continue
                blocks = np.array_split(np.arange(idx.size), self.n_splits)
                lo, hi = blocks[k][0], blocks[k][-1]
                pos = np.arange(idx.size)
                keep = (pos < lo - self.gap) | (pos > hi + self.gap)
                test.append(idx[blocks[k]])
                train.append(idx[keep])
            yield self._fold(train, test)

    def _split_by_part(self, groups: np.ndarray, order: dict):
        """Folds whose test block is one part per subject; training drops windows within ``gap`` of a test one."""
        parts = np.asarray(self.parts)
        if parts.shape != groups.shape:
            raise ValueError(f"parts must have one entry per window: {parts.shape} vs {groups.size} windows")
        for value in self._part_values():
            train, test = [], []
            for idx in order.values():
                pos = np.arange(idx.size)
                test_pos = pos[parts[idx] == value]
                if test_pos.size:
                    # distance (in this subject's time order) from every window to its nearest test window
                    near = np.abs(pos[:, None] - test_pos[None, :]).min(axis=1)
                    keep = near > self.gap
                else:
                    keep = np.ones(idx.size, bool)
                test.append(idx[test_pos])
                train.append(idx[keep])
            yield self._fold(train, test)

    def _fold(self, train: list, test: list) -> tuple[np.ndarray, np.ndarray]:
        train = np.sort(np.concatenate(train)) if train else np.empty(0, int)
        test = np.sort(np.concatenate(test)) if test else np.empty(0, int)
        if train.size == 0 or test.size == 0:
            raise ValueError("TemporalGapSplit produced an empty fold: too few windows per subject for "
                             f"n_splits={self.n_splits}, gap={self.gap}")
        return train, test


class SubjectDisjointSplit:
    """Grouped K-fold by subject with a seeded shuffle of subjects: train and test subjects never overlap.

    The key control for held-out-subject attribute leakage. Subjects are shuffled with ``random_state`` and
    dealt round-robin into folds, so fold sizes differ by at most one subject and a seed reproduces the folds.
    """

    def __init__(self, n_splits: int = 5, shuffle: bool = True, random_state=None):
        if int(n_splits) < 2:
            raise ValueError(f"n_splits must be >= 2, got {n_splits}")
        self.n_splits = int(n_splits)
        self.shuffle = bool(shuffle)
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def split(self, X, y=None, groups=None):
        groups = _check_groups(X, groups)
        subjects = np.unique(groups)
        if subjects.size < self.n_splits:
            raise ValueError(f"{subjects.size} subjects cannot fill n_splits={self.n_splits} folds")
        if self.shuffle:
            subjects = check_random_state(self.random_state).permutation(subjects)
        for k in range(self.n_splits):
            test_subjects = subjects[k::self.n_splits]
            is_test = np.isin(groups, test_subjects)
            yield np.flatnonzero(~is_test), np.flatnonzero(is_test)


class ReferenceSetSplit:
    """Enrollment (reference) windows from one recording or time part, queries from another, per subject.

    Yields ``(reference_idx, query_idx)``. With ``parts`` (e.g. the recording of each window: rest /
    arithmetic), references come from ``reference_part`` and queries from ``query_part``; ``symmetric=True``
    adds the swapped split. Without ``parts`` **(ours)**, each subject's windows (in ``times`` order) are
    halved: the first half enrolls, the second half queries, with ``gap`` windows dropped between them so that
    adjacent windows never straddle enrollment and query. Only subjects with windows on both sides are used:
    BPID@1 is only defined when every query subject is a candidate.
    """

    def __init__(self, parts=None, reference_part=None, query_part=None, times=None, gap: int = 2,
                 symmetric: bool = False):
        self.parts = parts
        self.reference_part = reference_part
        self.query_part = query_part
        self.times = times
        self.gap = int(gap)
        self.symmetric = bool(symmetric)

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return 2 if self.symmetric else 1

    def _sides(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = groups.size
        if self.parts is not None:
            parts = np.asarray(self.parts)
            if parts.shape != (n,):
                raise ValueError(f"parts must have one entry per window: {parts.shape} vs {n} windows")
            values = list(dict.fromkeys(parts.tolist()))  # first-seen order
            ref = self.reference_part if self.reference_part is not None else values[0]
            if self.query_part is not None:
                qry = self.query_part
            else:
                others = [v for v in values if v != ref]
                if not others:
                    raise ValueError("parts holds a single value: no query part")
                qry = others[0]
            return parts == ref, parts == qry
        is_ref = np.zeros(n, bool)
        is_qry = np.zeros(n, bool)
        for idx in _order_within(groups, self.times).values():
            half = idx.size // 2
            is_ref[idx[:max(0, half - self.gap)]] = True
            is_qry[idx[half + self.gap:]] = True
        return is_ref, is_qry

    def split(self, X, y=None, groups=None):
        groups = _check_groups(X, groups)
        is_ref, is_qry = self._sides(groups)
        both = np.intersect1d(np.unique(groups[is_ref]), np.unique(groups[is_qry]))
        if both.size < 2:
            raise ValueError(f"only {both.size} subject(s) have both reference and query windows")
        usable = np.isin(groups, both)
        ref, qry = np.flatnonzero(is_ref & usable), np.flatnonzero(is_qry & usable)
        yield ref, qry
        if self.symmetric:
            yield qry, ref
