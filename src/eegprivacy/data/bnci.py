"""BCI Competition IV dataset 2a (BNCI Horizon 2020 set 001-2014) through MOABB's ``BNCI2014_001``.

Nine subjects, two sessions each (``A01T.mat`` training, ``A01E.mat`` evaluation), 22 EEG + 3 EOG channels
at 250 Hz, four imagery classes. MOABB parses the files; this class keeps the 22 EEG channels and turns the
left/right hand trials into annotations spanning MOABB's imagery interval (2-6 s after trial start), so the
Raw looks like every other motor-imagery recording here.

Files are looked up in the MNE/MOABB layout under the data root, first as published on BNCI Horizon
(``MNE-bnci-data/database/data-sets/001-2014/A01T.mat``), then where MOABB >= 1.5 downloads them
(``MNE-bnci-data/~bci/database/001-2014/A01T.mat``). MOABB is only handed files that are already there, so
it never goes to the network unless ``allow_download=True``. The source publishes no checksums: unless a
``manifests/bnci2014_001.tsv`` ships, recordings carry the flag ``unverified`` (their sha256 still enters
the dataset version).
"""

from __future__ import annotations

import contextlib
import os
from functools import partial
from pathlib import Path

import numpy as np

from eegprivacy.data._local import Expected, LocalDataset, manifest_expected, recording_meta
from eegprivacy.data.base import Recording

SUBJECTS = tuple(range(1, 10))
SESSIONS = {"T": ("0train", "training"), "E": ("1test", "evaluation")}
SFREQ = 250.0
# The 22 EEG channels in file order (BCI Competition IV 2a description); MOABB names them the same way.
EEG_CHANNELS = ("Fz", "FC3", "FC1", "FCz", "FC2", "FC4", "C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP3", "CP1",
                "CPz", "CP2", "CP4", "P1", "Pz", "P2", "POz")
HORIZON_URL = "http://bnci-horizon-2020.eu/database/data-sets/"
MOABB_URL = "https://lampx.tugraz.at/~bci/database/"  # moabb.datasets.bnci.base.BNCI_URL in MOABB 1.7
LAYOUTS = {  # folder inside MNE-bnci-data -> the base URL MOABB derives that folder from
    "database/data-sets/001-2014": HORIZON_URL,
    "~bci/database/001-2014": MOABB_URL,
}


@contextlib.contextmanager
def _mne_bnci_path(root: Path):
    """MOABB writes ``MNE_DATA`` into the user's MNE config when neither it nor ``MNE_DATASETS_BNCI_PATH``
    is set; setting the latter for the call keeps a read from changing anyone's configuration."""
    key = "MNE_DATASETS_BNCI_PATH"
    old = os.environ.get(key)
    os.environ[key] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


class BNCI2014001(LocalDataset):
    name = "bnci2014_001"
    description = "BCI Competition IV 2a (BNCI 2014-001): left vs right hand imagery, 22-channel EEG at 250 Hz"
    folder = "MNE-bnci-data"
    line_freq = 50.0  # recorded in Graz (Austria: 50 Hz mains; the competition's description names a 50 Hz notch)
    can_download = True
    source = ("BNCI Horizon 2020, http://bnci-horizon-2020.eu/database/data-sets/001-2014/ "
              "(or moabb.datasets.BNCI2014_001().download(path=<data root>))")

    def __init__(self, root=None, allow_download: bool = False, subjects=SUBJECTS,
                 classes=("left_hand", "right_hand")):
        super().__init__(root, allow_download)
        self.subject_ids = tuple(int(s) for s in subjects)
        self.classes = tuple(classes)

    # -- files ------------------------------------------------------------------------------------------
    def _layout(self, subject: int) -> str:
        """The first layout holding both of a subject's files (the BNCI Horizon one when neither does)."""
        for layout in LAYOUTS:
            if all((self.base / layout / f"A{subject:02d}{s}.mat").is_file() for s in SESSIONS):
                return layout
        return next(iter(LAYOUTS))

    def _files(self, subject: int) -> dict[str, str]:
        layout = self._layout(subject)
        return {s: f"{layout}/A{subject:02d}{s}.mat" for s in SESSIONS}

    def _expected(self):
        try:
            published = manifest_expected("bnci2014_001")
        except FileNotFoundError:
            published = {}
        return {rel: published.get(rel, Expected(None, None))
                for subject in self.subject_ids for rel in self._files(subject).values()}

    def _fetch(self, subject: int) -> None:
        """MOABB's own download, to wherever its current mirror puts files; the layout is re-resolved after."""
        from moabb.datasets import BNCI2014_001

        with _mne_bnci_path(self.root):
            BNCI2014_001().data_path(subject, path=str(self.root), update_path=False)
        self.__dict__.pop("_exp", None)

    # -- recordings -------------------------------------------------------------------------------------
    def _recordings(self) -> list[Recording]:
        recs = []
        for subject in self.subject_ids:
            files = self._files(subject)
            if self.allow_download and not all((self.base / rel).is_file() for rel in files.values()):
                self._fetch(subject)
                files = self._files(subject)
            for rel in files.values():
                self.require(rel)
            for session, rel in files.items():
                flags = [] if self.expected[rel].sha256 else ["unverified"]
                meta = recording_meta("motor_imagery", -1, SFREQ, EEG_CHANNELS, float("nan"), flags,
                                      session=SESSIONS[session][1], classes=",".join(self.classes))
                recs.append(Recording(self.name, f"A{subject:02d}", Path(rel).stem,
                                      partial(self._load, subject, session), meta))
        return recs

    def _load(self, subject: int, session: str):
        """MOABB reads both sessions of a subject at once; the requested one is kept."""
        import mne
        from moabb.datasets import BNCI2014_001
        from moabb.datasets.bnci.bnci_2014 import _load_data_001_2014

        files = self._files(subject)
        for rel in files.values():
            self.verify(rel)
        base_url = LAYOUTS[files[session].rsplit("/", 1)[0]]
        with _mne_bnci_path(self.root):
            sessions = _load_data_001_2014(subject, path=str(self.root), base_url=base_url, verbose="error")
        runs = list(sessions[SESSIONS[session][0]].values())
        raw = mne.concatenate_raws(runs, verbose="error") if len(runs) > 1 else runs[0]

        moabb_ds = BNCI2014_001()
        start, stop = moabb_ds.interval
        events = mne.find_events(raw, stim_channel="STI", shortest_event=1, initial_event=True, verbose="error")
        code_to_class = {code: cls for cls, code in moabb_ds.event_id.items()}
        keep = np.array([code_to_class.get(code) in self.classes for code in events[:, 2]], dtype=bool)
        events = events[keep]
        # annotation onsets count from meas_date when the annotations have one, else from the first sample
        first = 0 if raw.annotations.orig_time is not None else raw.first_samp
        onsets = (events[:, 0] - first) / raw.info["sfreq"] + start
        raw.annotations.append(onsets, stop - start, [code_to_class[c] for c in events[:, 2]])
        return raw.pick("eeg")
