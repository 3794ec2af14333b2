"""PhysioNet "EEG During Mental Arithmetic Tasks" (eegmat) v1.0.0: rest vs serial subtraction, 36 subjects.

``SubjectNN_1.edf`` is resting EEG (label 0), ``SubjectNN_2.edf`` is EEG during mental arithmetic (label 1).
Only the 19 scalp EEG channels are kept: the A2-A1 reference derivation and ECG are not brain signal and
would leak a cardiac fingerprint into any identity attack. Subject age, sex and counting quality come from the
dataset's own ``subject-info.csv`` (count quality 1 = good counter, 0 = bad counter).

The shipped manifest (``manifests/eegmat.tsv``) is the public v1.0.0 file list: 72 EDFs (Subject00-Subject35,
``_1`` and ``_2``) and ``subject-info.csv``. For the 13 resting recordings this project never had a copy of
(Subject22-Subject30 and Subject32-Subject35 ``_1``) size and sha256 are ``-``, not known here: such a file is
read when present, flagged ``unverified``, and its actual bytes enter the version. A present file whose published
checksum is known must match it (:class:`ChecksumMismatchError` otherwise).

A copy holding part of the dataset is normal (the project's mirror lacks those 13 resting recordings). By default
the loader reads the public recordings present under the data root and :meth:`EEGMAT.absent` names the rest, so a
cut-down copy is reported, never silent; the version is the hash of the files read, so it is well defined for
any subset. A stage that needs particular subjects passes ``subjects=[...]``: both recordings of each are then
required (a missing one is a :class:`DataMissingError` naming the file) or, with ``allow_download=True``, fetched;
``allow_download=True`` without ``subjects`` asks for the whole public list. ``subject-info.csv`` is always needed.
"""

from __future__ import annotations

import csv
import re
from functools import partial

from eegprivacy.data._local import (
    LocalDataset,
    manifest_expected,
    present_or_all,
    read_edf,
    read_edf_header,
    recording_meta,
)
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
    line_freq = 50.0  # recorded in Ukraine (50 Hz mains)
    # label: the recording's condition (per recording); count_quality: subject-info.csv's "Count quality"
    label_levels = {"label": {"0": "rest", "1": "mental arithmetic (serial subtraction)"},
                    "count_quality": {"0": "bad counter", "1": "good counter"}}
    can_download = True
    source = "https://physionet.org/content/eegmat/1.0.0/"
    download_url = "https://physionet.org/files/eegmat/1.0.0/"

    def __init__(self, root=None, allow_download: bool = False, subjects=None):
        """``subjects=None``: the public recordings present under the root (all of them when downloading is
        allowed); an explicit list (``["Subject07", ...]``) requires both recordings of each subject."""
        super().__init__(root, allow_download)
        self._subjects_arg = None if subjects is None else tuple(str(s) for s in subjects)
        if self._subjects_arg is not None:
            public = {_FILE.match(rel).group(1) for rel in self._public_edfs()}
            unknown = sorted(set(self._subjects_arg) - public)
            if unknown:
                raise ValueError(f"eegmat has subjects {min(public)}..{max(public)}, not {unknown}")

    @staticmethod
    def _public_edfs() -> list[str]:
        """Every recording of the public dataset, in manifest order."""
        return [rel for rel in manifest_expected("eegmat") if _FILE.match(rel)]

    def _requested(self) -> list[str]:
        """The public recordings asked for: all of them, or both of each explicit subject."""
        edfs = self._public_edfs()
        if self._subjects_arg is None:
            return edfs
        return [rel for rel in edfs if _FILE.match(rel).group(1) in self._subjects_arg]

    def absent(self) -> list[str]:
        """Requested public recordings this copy does not hold (``Subject22_1.edf``...). By default
        :meth:`recordings` leaves them out; with explicit ``subjects`` reading them is a :class:`DataMissingError`
        (or a download, when allowed)."""
        return [rel for rel in self._requested() if not (self.base / rel).is_file()]

    def _expected(self):
        published = manifest_expected("eegmat")
        requested = self._requested()
        required = self._subjects_arg is not None or self.allow_download
        read = requested if required else present_or_all(self.base, requested)
        return {SUBJECT_INFO: published[SUBJECT_INFO], **{rel: published[rel] for rel in read}}

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
            flags = [] if self.expected[rel].sha256 else ["unverified"]  # no published checksum known here
            meta = recording_meta(condition, label, header.sfreq(next(iter(channels))), channels.values(),
                                  header.duration_s, flags, **info[subject])
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
