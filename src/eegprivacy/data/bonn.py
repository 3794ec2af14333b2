"""Bonn University epilepsy EEG (Andrzejak et al. 2001): sets A-E, 100 single-channel segments each.

Each segment is 4097 samples at 173.61 Hz (23.6 s), one ASCII integer per line. The source states no unit;
the values are read as microvolts (their range, about +-200 for surface EEG, fits that) and stored in volts.
The dataset publishes no patient IDs, so every segment is its own "subject" (``Z001`` ...) and carries the
flag ``no_patient_ids``: nothing that needs subject-disjoint splits or identity attacks is meaningful here.
"""

from __future__ import annotations

from functools import partial
from pathlib import PurePosixPath

import numpy as np

from eegprivacy.data._local import LocalDataset, array_raw, manifest_expected, recording_meta
from eegprivacy.data.base import Recording

SFREQ = 173.61
N_SAMPLES = 4097
CHANNEL = "EEG"

# folder -> (set letter, condition, seizure, epilepsy patient)
SETS = {
    "A_Z": ("A", "healthy_eyes_open", False, False),
    "B_O": ("B", "healthy_eyes_closed", False, False),
    "C_N": ("C", "interictal_opposite_hemisphere", False, True),
    "D_F": ("D", "interictal_epileptogenic_zone", False, True),
    "E_S": ("E", "ictal", True, True),
}


class Bonn(LocalDataset):
    name = "bonn"
    description = "Bonn epilepsy EEG, sets A-E: 500 single-channel 23.6 s segments at 173.61 Hz, no patient IDs"
    folder = "bonn-epilepsy"
    line_freq = 50.0  # recorded in Bonn (Germany: 50 Hz mains)
    label_levels = {"label": {"0": "no seizure (sets A-D)", "1": "seizure (set E, ictal)"}}
    source = ("the Bonn epilepsy EEG record, doi:10.34810/data490 (Andrzejak et al. 2001); "
              "unzip sets A-E into A_Z/ B_O/ C_N/ D_F/ E_S/")

    def _expected(self):
        return manifest_expected("bonn", keep=lambda rel: rel.split("/")[0] in SETS)

    def _recordings(self) -> list[Recording]:
        recs = []
        for rel in sorted(self.expected):
            self.require(rel)
            folder, stem = rel.split("/")[0], PurePosixPath(rel).stem
            letter, condition, seizure, patient = SETS[folder]
            meta = recording_meta(condition, int(seizure), SFREQ, [CHANNEL], N_SAMPLES / SFREQ, ["no_patient_ids"],
                                  set=letter, seizure=seizure, epilepsy_patient=patient)
            recs.append(Recording(self.name, stem, stem, partial(self._load, rel), meta,
                                  source=str(self.base / rel)))
        return recs

    def _load(self, rel: str):
        samples = np.loadtxt(self.verify(rel), dtype=np.float64)
        return array_raw(samples, [CHANNEL], SFREQ)
