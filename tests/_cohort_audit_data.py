"""A small real cohort for the cohort-audit tests: subjects of the MSU adolescent schizophrenia cohort, read by the
project's own loader (``eegprivacy.data.msu_schizophrenia``) from the mirror.

``MiniMSU`` is a plain :class:`EEGDataset` over the first ``n_per_class`` healthy and schizophrenia subjects (by
file name), so the audit sees it exactly as it sees any dataset; ``rename`` gives the subjects other ids and
``reverse`` hands the recordings out in the opposite order, to check that the audit's numbers depend on the data
and labels only. ``subjects`` names the subset, for writing the same patients as a BIDS tree.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from functools import partial

import mne
import numpy as np

from eegprivacy.data.base import EEGDataset, Recording
from eegprivacy.data.msu_schizophrenia import MSUSchizophrenia

# The key to_bids numbers the test trees' subjects with (tests/test_to_bids_pseudonyms.py): fixed, so a test that
# damages sub-05 damages the same subject on every run.
TREE_KEY = b"eegprivacy tests: a fixed key for the subject numbers"
MSU_CHANNELS = ["F7", "F3", "F4", "F8", "T3", "C3", "Cz", "C4", "T4", "T5", "P3", "Pz", "P4", "T6", "O1", "O2"]
SFREQ = 128.0


def msu_subjects(n_per_class: int = 6) -> list[str]:
    """The first ``n_per_class`` subjects of each class (by file name), healthy first."""
    meta = MSUSchizophrenia().metadata().sort_values("recording")
    picked = [meta[meta.label == label].subject.head(n_per_class).tolist() for label in (0, 1)]
    if min(map(len, picked)) < n_per_class:
        raise FileNotFoundError(f"need {n_per_class} MSU subjects per class in the mirror (set EEGPRIVACY_DATA)")
    return picked[0] + picked[1]


class MiniMSU(EEGDataset):
    """``n_per_class`` healthy and as many schizophrenia subjects of the real MSU loader, one 60-s recording each."""

    synthetic = False

    def __init__(self, n_per_class: int = 6, name: str = "mini_msu", rename: bool = False, reverse: bool = False,
                 labels: dict | None = None):
        self.name = name
        self.source = MSUSchizophrenia()
        self.subjects = msu_subjects(n_per_class)
        self._rename, self._reverse = rename, reverse
        self._labels = labels  # position -> label override (e.g. one class only, for error tests)

    def _recordings(self) -> list[Recording]:
        by_subject = {r.subject: r for r in self.source.recordings(self.subjects)}
        recs = []
        for i, subject in enumerate(self.subjects):
            rec = by_subject[subject]
            meta = dict(rec.meta)
            if self._labels is not None:
                meta["label"] = self._labels.get(i, meta["label"])
            recs.append(replace(rec, dataset=self.name, meta=meta,
                                subject=f"zz{len(self.subjects) - i:03d}" if self._rename else subject))
        return recs[::-1] if self._reverse else recs

    def _version(self) -> str:
        return hashlib.sha256(f"{self.source.version()}:{self.subjects}:{self._labels}".encode()).hexdigest()


class OneClassMSU(MiniMSU):
    """Every patient labelled 0: the audit must refuse it."""

    def __init__(self, n_per_class: int = 3):
        super().__init__(n_per_class, name="one_class_msu", labels={i: 0 for i in range(2 * n_per_class)})


class UnlabelledMSU(MiniMSU):
    """No patient label at all."""

    def __init__(self, n_per_class: int = 3):
        super().__init__(n_per_class, name="unlabelled_msu", labels={i: None for i in range(2 * n_per_class)})


def _noise(seed: int, n_times: int):
    rng = np.random.default_rng([0x4E4F4953, seed])
    info = mne.create_info(MSU_CHANNELS, SFREQ, "eeg")
    return mne.io.RawArray(rng.standard_normal((len(MSU_CHANNELS), n_times)) * 10e-6, info, verbose="error")


class NoiseCohort(EEGDataset):
    """White-noise recordings (same generator for every subject) with alternating labels: the features carry no
    label information, so every utility must sit at its null and the baseline at chance."""

    name = "noise_cohort"
    synthetic = True

    def __init__(self, n_subjects: int = 12, seconds: float = 30.0):
        self.n_subjects, self.seconds = n_subjects, seconds

    def _recordings(self) -> list[Recording]:
        n_times = int(self.seconds * SFREQ)
        return [Recording(self.name, f"n{i:02d}", "r01", partial(_noise, i, n_times),
                          {"label": i % 2, "condition": "rest", "sfreq": SFREQ, "n_channels": len(MSU_CHANNELS),
                           "channels": ",".join(MSU_CHANNELS), "duration_s": self.seconds, "flags": ""})
                for i in range(self.n_subjects)]

    def _version(self) -> str:
        return hashlib.sha256(f"noise:{self.n_subjects}:{self.seconds}".encode()).hexdigest()
