"""Per-subject member / non-member splits (study B): within every subject, a stratified 80/20 split of its
trials into training trials (members of the federated model) and held-out trials (non-members).

Each subject's split is drawn from a seed derived from (split seed, the subject's id), not from its position,
so adding, dropping or reordering other subjects never changes a subject's split; the same seed gives the same
split on every machine.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence

import numpy as np
from sklearn.model_selection import train_test_split

__all__ = ["member_split", "SubjectMemberSplit", "subject_seed", "run_split_seed"]


def subject_seed(seed: int, subject) -> int:
    """A 32-bit seed for one subject's split: independent streams keyed by the subject's id, not its index."""
    key = zlib.crc32(str(subject).encode("utf-8"))
    return int(np.random.SeedSequence([int(seed), key]).generate_state(1)[0])


def run_split_seed(split_seed: int, seed: int) -> int:
    """The split seed of one run of a repeated-seed sweep: each run seed draws its own member split (so the spread
    across seeds covers the split too), reproducibly from the base ``split_seed``. A deployment that should
    reproduce the sweep's run ``seed`` passes this value as its split seed."""
    return int(np.random.SeedSequence([int(split_seed), int(seed), 17]).generate_state(1)[0])


def member_split(y: Sequence, subjects: Sequence, test_size: float = 0.2, seed: int = 0) -> np.ndarray:
    """Boolean mask over trials: True = member (training trial), False = non-member (held out).

    Stratified by label within each subject; a subject whose smaller class has fewer than two trials cannot
    be stratified and is an error (its held-out set could miss a class the attack and the utility need).
    """
    y = np.asarray(y).ravel()
    subjects = np.asarray(subjects).ravel()
    if y.size != subjects.size:
        raise ValueError(f"y has {y.size} trials but subjects has {subjects.size}")
    if not 0.0 < float(test_size) < 1.0:
        raise ValueError(f"test_size must be a fraction in (0, 1), got {test_size!r}")
    member = np.zeros(y.size, dtype=bool)
    for subject in dict.fromkeys(subjects.tolist()):
        rows = np.flatnonzero(subjects == subject)
        _, counts = np.unique(y[rows], return_counts=True)
        if counts.min() < 2:
            raise ValueError(f"subject {subject}: a class has {counts.min()} trial(s); a stratified member/"
                             "non-member split needs at least 2 per class")
        train, _ = train_test_split(rows, test_size=float(test_size), stratify=y[rows],
                                    random_state=subject_seed(seed, subject))
        member[train] = True
    return member


class SubjectMemberSplit:
    """scikit-learn-style splitter with one split: members (train) and non-members (test) of every subject.

    ``groups`` are the subject ids (``trials.metadata["subject"]``); ``random_state`` is the split seed.
    """

    def __init__(self, test_size: float = 0.2, random_state: int = 0):
        self.test_size = test_size
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return 1

    def split(self, X, y, groups) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if groups is None:
            raise ValueError("SubjectMemberSplit needs groups: the subject of every trial")
        member = member_split(y, groups, self.test_size, self.random_state)
        yield np.flatnonzero(member), np.flatnonzero(~member)

    def __repr__(self) -> str:
        return f"SubjectMemberSplit(test_size={self.test_size}, random_state={self.random_state})"
