"""New Delhi epilepsy EEG segments (Swami et al. 2016): ictal, interictal and pre-ictal, 10 patients.

Each ``.mat`` file holds one int16 column of 1024 samples at 200 Hz (5.12 s), under a variable named after
its class (``ictal``, ``interictal``, ``preictal``). The source states no unit; samples are read as
microvolts and stored in volts. Segments carry no patient IDs (flag ``no_patient_ids``), so each segment is
its own "subject". ``label`` is 1 for ictal (seizure) and 0 otherwise, as for Bonn; ``class`` keeps all three.
"""

from __future__ import annotations

import re
from functools import partial

from eegprivacy.data._local import LocalDataset, array_raw, manifest_expected, recording_meta
from eegprivacy.data.base import Recording

SFREQ = 200.0
N_SAMPLES = 1024
CHANNEL = "EEG"
CLASSES = ("ictal", "interictal", "preictal")
_FILE = re.compile(r"^(ictal|interictal|preictal)/\1(\d+)\.mat$")


def _order(rel: str):
    cls, number = _FILE.match(rel).groups()
    return CLASSES.index(cls), int(number)


class NewDelhi(LocalDataset):
    name = "new_delhi"
    description = "New Delhi epilepsy EEG: 146 single-channel 5.12 s segments at 200 Hz, no patient IDs"
    folder = "new-delhi-epilepsy"
    line_freq = 50.0  # recorded in New Delhi (India: 50 Hz mains)
    label_levels = {"label": {"0": "no seizure (interictal or pre-ictal)", "1": "seizure (ictal)"}}
    source = ("the New Delhi epilepsy EEG segments (Swami et al., Expert Systems with Applications 56:116, 2016), "
              "published by the Neurology & Sleep Centre, Hauz Khas, New Delhi; one folder per class")

    def _expected(self):
        return manifest_expected("new_delhi", keep=lambda rel: bool(_FILE.match(rel)))

    def _recordings(self) -> list[Recording]:
        recs = []
        for rel in sorted(self.expected, key=_order):
            self.require(rel)
            cls = rel.split("/")[0]
            stem = rel.split("/")[1][:-4]
            meta = recording_meta(cls, int(cls == "ictal"), SFREQ, [CHANNEL], N_SAMPLES / SFREQ, ["no_patient_ids"],
                                  **{"class": cls})
            recs.append(Recording(self.name, stem, stem, partial(self._load, rel, cls), meta,
                                  source=str(self.base / rel)))
        return recs

    def _load(self, rel: str, cls: str):
        from scipy.io import loadmat

        samples = loadmat(self.verify(rel))[cls]
        return array_raw(samples.reshape(1, -1), [CHANNEL], SFREQ)
