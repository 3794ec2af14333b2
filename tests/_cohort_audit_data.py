"""A small real cohort for the cohort-audit tests: MSU adolescent schizophrenia ``.eea`` files from the mirror.

Each ``.eea`` file is 122880 numbers in µV: 16 channels × 7680 samples (60 s at 128 Hz), channel-major. The class
folder gives the label (``sch`` = 1, ``norm`` = 0). ``MiniMSU`` is a plain :class:`EEGDataset`, so the audit sees
it exactly as it would see ``get_dataset("bids", ...)``: recordings with meta ``label``, ``subject``, ``session``,
``run``; ``rename`` gives the subjects other ids and ``reverse`` hands the recordings out in the opposite order, to
check that the audit's numbers depend on the data and labels only.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

import mne
import numpy as np

from eegprivacy.data.base import EEGDataset, Recording
from eegprivacy.paths import data_root

MSU_CHANNELS = ["F7", "F3", "F4", "F8", "T3", "C3", "Cz", "C4", "T4", "T5", "P3", "Pz", "P4", "T6", "O1", "O2"]
SFREQ = 128.0


def msu_files(n_per_class: int = 6) -> list[tuple[Path, int]]:
    root = Path(data_root()) / "msu-adolescent-schizophrenia"
    out = []
    for folder, label in (("norm", 0), ("sch", 1)):
        files = sorted((root / folder).glob("*.eea"))
        if len(files) < n_per_class:
            raise FileNotFoundError(f"need {n_per_class} .eea files in {root / folder} (set EEGPRIVACY_DATA)")
        out += [(f, label) for f in files[:n_per_class]]
    return out


def _load(path: Path, scale: float = 1.0):
    values = np.loadtxt(path, dtype=float)
    data = values.reshape(len(MSU_CHANNELS), -1) * 1e-6 * scale
    info = mne.create_info(MSU_CHANNELS, SFREQ, "eeg")
    return mne.io.RawArray(data, info, verbose="error")


class MiniMSU(EEGDataset):
    """``n_per_class`` healthy and as many schizophrenia recordings, one 60-s recording per subject."""

    synthetic = False

    def __init__(self, n_per_class: int = 6, name: str = "mini_msu", rename: bool = False, reverse: bool = False,
                 labels: dict | None = None):
        self.name = name
        self._files = msu_files(n_per_class)
        self._rename, self._reverse = rename, reverse
        self._labels = labels  # position -> label override (e.g. one class only, for error tests)

    def _recordings(self) -> list[Recording]:
        recs = []
        for i, (path, label) in enumerate(self._files):
            subject = f"zz{len(self._files) - i:03d}" if self._rename else path.stem
            if self._labels is not None:
                label = self._labels.get(i, label)
            meta = {"label": label, "condition": "rest", "sfreq": SFREQ, "n_channels": len(MSU_CHANNELS),
                    "channels": ",".join(MSU_CHANNELS), "duration_s": 60.0, "flags": "", "session": "1",
                    "run": "1", "task": "rest"}
            recs.append(Recording(self.name, subject, "r01", partial(_load, path), meta, source=path.name))
        return recs[::-1] if self._reverse else recs

    def _version(self) -> str:
        digest = hashlib.sha256()
        for path, label in sorted(self._files):
            digest.update(f"{path.name}:{label}:{path.stat().st_size}".encode())
        return digest.hexdigest()


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
