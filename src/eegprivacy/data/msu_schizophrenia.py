"""MSU adolescent schizophrenia EEG (Borisov et al. 2005): resting EEG of 39 healthy adolescents and 45 with
symptoms of schizophrenia, one 60-s recording per subject.

Source: Lomonosov Moscow State University, "EEG of healthy adolescents and adolescents with symptoms of
schizophrenia", http://brain.bio.msu.ru/eeg_schizophrenia.htm (recordings by N.N. Gorbachevskaya, Mental Health
Research Center, and S.V. Borisov, Faculty of Biology, MSU). No formal license is stated; cite the page and
Borisov SV, Kaplan AYa, Gorbachevskaya NL, et al. "Analysis of EEG structural synchrony in adolescents with
schizophrenic disorders." Human Physiology 31(3):255-261, 2005, doi:10.1007/s10747-005-0042-z.

Layout: ``norm/*.eea`` (healthy, label 0) and ``sch/*.eea`` (schizophrenia, label 1), as in the two original
archives; the label is the class folder and nothing else. Each ``.eea`` file is ASCII text, one value per
line: 122880 values = 16 channels x 7680 samples (60 s at 128 Hz), channel-major (all samples of F7, then F3,
...), channel order F7, F3, F4, F8, T3, C3, Cz, C4, T4, T5, P3, Pz, P4, T6, O1, O2. Subject and recording are
the file stem exactly as published (mixed case: ``S10W1``, ``s12w1``, ``088w1``); stems are unique across both
folders, also case-insensitively, while numbers are not (``norm/S155W1`` and ``sch/155w1`` are different people).

Caveats, kept visible rather than corrected:
- Amplitude: the stated unit is µV and the values are read as µV (stored in volts, as everywhere), but they are
  about 10x typical resting EEG (per-channel SD 190-710, max |x| 1026-4570 per file). They are also coarsely
  quantised (about 100-270 levels per channel, steps of about 9.7 units on a 2.76-unit grid). Nothing is
  rescaled; every recording carries the flag ``amplitude_unit_doubtful``. Absolute amplitude features (RMS,
  variance, band powers in µV²) are therefore on an uncertain scale; within-dataset comparisons are unaffected.
- ``sch/387-02w1.eea`` and ``sch/387-03w1.eea`` may be two recordings of one patient (ID 387; their signals are
  distinct, correlation < 0.1). Both carry the flag ``possible_repeat_patient`` and stay separate subjects, as the
  published n = 45 counts them; a subject-disjoint split that must be safe should keep them on one side.
- In four files one pair of neighbouring channels correlates at r > 0.99 over the whole recording (possibly
  bridged electrodes): ``norm/S163W1`` P4/O2, ``sch/221w`` F4/F8, ``sch/454-1W`` T5/P3, ``sch/585w1`` T5/P3. They
  are loaded as they are and not flagged.
- 128 Hz gives a 64-Hz Nyquist: study A's shared 70-Hz low-pass and high-gamma band (45-70 Hz) do not fit. The
  project's params give this dataset its own feature settings (``features.per_dataset.msu_schizophrenia`` in
  ``params/features.yaml``): a 0.5-60 Hz band-pass and high gamma renamed for its edges, ``high_gamma_45_60``.
  Under the shared settings (e.g. as a user cohort) the feature pipeline moves the low-pass below Nyquist and
  drops high gamma (NaN), and flags both (``lowpass_clipped:60.8``, ``band_dropped:high_gamma``).

The shipped manifest ``manifests/msu_schizophrenia.tsv`` was generated from the data mirror's MANIFEST.tsv:
``awk -F'\\t' '$1=="msu-adolescent-schizophrenia"{sub("^msu-adolescent-schizophrenia/","",$2); print $2"\\t"$3"\\t"$4}'
MANIFEST.tsv | LC_ALL=C sort`` under a ``path<TAB>bytes<TAB>sha256`` header. No checksum is published by the
source; these are the sha256 of the files as mirrored (bytes unmodified from the source copy).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path, PurePosixPath

import numpy as np

from eegprivacy.data._local import LocalDataset, array_raw, manifest_expected, recording_meta
from eegprivacy.data.base import Recording
from eegprivacy.errors import InputDataError

SFREQ = 128.0
N_SAMPLES = 7680
CHANNELS = ["F7", "F3", "F4", "F8", "T3", "C3", "Cz", "C4", "T4", "T5", "P3", "Pz", "P4", "T6", "O1", "O2"]
N_VALUES = len(CHANNELS) * N_SAMPLES

# class folder -> (condition, label)
CLASSES = {"norm": ("healthy", 0), "sch": ("schizophrenia", 1)}
REPEAT_PATIENT = {"sch/387-02w1.eea", "sch/387-03w1.eea"}  # possibly one patient, ID 387
ALL_FLAGS = ("amplitude_unit_doubtful",)
_FILE = re.compile(r"^(norm|sch)/[^/]+\.eea$")


class EEAFormatError(InputDataError, ValueError):
    """An ``.eea`` file that is not 122880 finite numbers (16 channels x 7680 samples)."""


def read_eea(path: str | Path) -> np.ndarray:
    """One ``.eea`` file -> (16, 7680) float64 array in the file's units (stated µV), channel-major as stored."""
    path = Path(path)
    try:
        values = np.array(path.read_bytes().split(), dtype=np.float64)
    except ValueError as err:  # a token that is not a number
        raise EEAFormatError(f"{path}: not a text file of numbers ({err}); the file is garbled — replace it with "
                             "a fresh copy") from None
    if values.size != N_VALUES:
        raise EEAFormatError(f"{path}: {values.size} values, expected {N_VALUES} (16 channels x {N_SAMPLES} "
                             "samples); the file is cut or garbled — replace it with a fresh copy")
    if not np.isfinite(values).all():
        raise EEAFormatError(f"{path}: {int((~np.isfinite(values)).sum())} NaN/infinite value(s); replace it with "
                             "a fresh copy")
    return values.reshape(len(CHANNELS), N_SAMPLES)


class MSUSchizophrenia(LocalDataset):
    name = "msu_schizophrenia"
    description = ("MSU adolescent schizophrenia EEG: 39 healthy / 45 schizophrenia, 16-channel 60 s rest at "
                   "128 Hz, one recording per subject (amplitude unit doubtful)")
    folder = "msu-adolescent-schizophrenia"
    line_freq = 50.0  # recorded in Moscow (Russia: 50 Hz mains)
    label_levels = {"label": {"0": "healthy control", "1": "schizophrenia"}}  # the class folders norm/ and sch/
    source = ("http://brain.bio.msu.ru/eeg_schizophrenia.htm (Lomonosov Moscow State University; Borisov et al., "
              "Human Physiology 31:255, 2005); unpack the two archives into norm/ and sch/")

    def _expected(self):
        return manifest_expected("msu_schizophrenia", keep=lambda rel: bool(_FILE.match(rel)))

    def _recordings(self) -> list[Recording]:
        recs = []
        for rel in sorted(self.expected):
            self.require(rel)
            folder, stem = rel.split("/")[0], PurePosixPath(rel).stem
            condition, label = CLASSES[folder]
            flags = [*ALL_FLAGS, *(["possible_repeat_patient"] if rel in REPEAT_PATIENT else [])]
            meta = recording_meta(condition, label, SFREQ, CHANNELS, N_SAMPLES / SFREQ, flags,
                                  task="rest", class_folder=folder)
            recs.append(Recording(self.name, stem, stem, partial(self._load, rel), meta,
                                  source=str(self.base / rel)))
        return recs

    def _load(self, rel: str):
        return array_raw(read_eea(self.verify(rel)), CHANNELS, SFREQ)
