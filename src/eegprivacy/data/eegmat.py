"""PhysioNet "EEG During Mental Arithmetic Tasks" (eegmat) v1.0.0: rest vs serial subtraction, 36 subjects.

``SubjectNN_1.edf`` is resting EEG (label 0), ``SubjectNN_2.edf`` is EEG during mental arithmetic (label 1).
Only the 19 scalp EEG channels are kept: the A2-A1 reference derivation and ECG are not brain signal and
would leak a cardiac fingerprint into any identity attack. Subject age, sex and counting quality come from the
dataset's own ``subject-info.csv`` (count quality 1 = good counter, 0 = bad counter).
"""

from __future__ import annotations

import csv
import re
from functools import partial

from eegprivacy.data._local import LocalDataset, manifest_expected, read_edf, read_edf_header, recording_meta
from eegprivacy.data.base import Recording

SUBJECT_INFO = "subject-info.csv"
_FILE = re.compile(r"^(Subject\d{2})_([12])\.edf$")
_CONDITIONS = {"1": ("rest", 0), "2": ("arithmetic", 1)}
_NON_SCALP = ("A2-A1",)


def eeg_labels(labels) -> dict[str, str]:
    """EDF label -> clean 10-20 name for the scalp channels ("EEG Fp1" -> "Fp1")."""
    out = {}
    for label in labels:
        if label.startswith("EEG "):
            name = label[4:].strip()
            if name not in _NON_SCALP:
                out[label] = name
    return out


class EEGMAT(LocalDataset):
    name = "eegmat"
    description = "PhysioNet eegmat v1.0.0: rest vs mental arithmetic, 19-channel EEG at 500 Hz, 36 subjects"
    folder = "eegmat"
    can_download = True
    source = "https://physionet.org/content/eegmat/1.0.0/"
    download_url = "https://physionet.org/files/eegmat/1.0.0/"

    def _expected(self):
        return manifest_expected("eegmat")

    def _subject_info(self) -> dict[str, dict]:
        with open(self.verify(SUBJECT_INFO), newline="") as fh:
            rows = list(csv.DictReader(fh))
        return {
            r["Subject"]: {"age": int(r["Age"]), "sex": r["Gender"].strip(), "count_quality": int(r["Count quality"])}
            for r in rows
        }

    def _recordings(self) -> list[Recording]:
        info = self._subject_info()
        recs = []
        for rel in sorted(self.expected):
            match = _FILE.match(rel)
            if not match:
                continue
            subject, part = match.groups()
            header = self.edf_header(rel)
            channels = eeg_labels(header.labels)
            condition, label = _CONDITIONS[part]
            meta = recording_meta(condition, label, header.sfreq(next(iter(channels))), channels.values(),
                                  header.duration_s, **info[subject])
            recs.append(Recording(self.name, subject, rel[:-4], partial(self._load, rel), meta,
                                  source=str(self.base / rel)))
        return recs

    def _load(self, rel: str):
        path = self.verify(rel)
        labels = read_edf_header(path).labels
        channels = eeg_labels(labels)
        raw = read_edf(path, exclude=[lab for lab in labels if lab not in channels])
        raw.rename_channels(channels)
        raw.set_channel_types(dict.fromkeys(raw.ch_names, "eeg"))
        return raw
