"""PhysioNet EEG Motor Movement/Imagery (eegmmidb) v1.0.0, located through ``mne.datasets.eegbci``.

Files live where MNE puts them (``MNE-eegbci-data/files/eegmmidb/1.0.0/S001/S001R04.edf``) and are checked
against the checksum list MNE ships (``mne/data/eegbci_checksums.txt``), which is the published one.

``mne.datasets.eegbci.load_data`` (MNE 1.13) downloads a run only when its file is absent and never checks
the checksum of a file already on disk, so it is called only once every requested file is present (or when
downloading is allowed) and verification is done here.

Known defect, handled rather than hidden: some copies of S001R01/S001R02 end a few kB early (header says 61
one-second records, 60 are complete). Such a run is recognised from its EDF header (declared size > file
size), loaded as the 60 s that are there, flagged ``truncated`` and reported with one warning per process.
A checksum mismatch with a complete-length file is corruption and raises :class:`ChecksumMismatchError`.

A copy holding some runs of some subjects is normal (the project's mirror has all 14 runs of S001 and only the
imagery runs 4, 8, 12 of S002-S016). Without an explicit ``subjects`` list the loader reads, of the requested runs,
those present in each subject folder, and :meth:`EEGMMIDB.absent` names the rest; a stage that needs particular
subjects passes ``subjects=...``, and then every requested run of each is required (a missing one is a
:class:`DataMissingError` naming the file).
"""

from __future__ import annotations

from functools import lru_cache, partial
from importlib import resources

from eegprivacy.data._local import (
    EdfHeaderError,
    Expected,
    LocalDataset,
    read_edf,
    read_edf_header,
    recording_meta,
    warn_once,
)
from eegprivacy.data.base import Recording

DEFAULT_RUNS = (1, 2, 4, 8, 12)
EEGBCI_FOLDER = "MNE-eegbci-data/files/eegmmidb/1.0.0"

# run -> (task, condition, label). Trial-level labels (T0 rest, T1/T2) stay in the Raw's annotations; the
# recording label only says what kind of run it is.
_RUN_KINDS = {
    "baseline_eyes_open": ("baseline", 0, (1,)),
    "baseline_eyes_closed": ("baseline", 1, (2,)),
    "execution_left_right_fist": ("motor_execution", 2, (3, 7, 11)),
    "imagery_left_right_fist": ("motor_imagery", 3, (4, 8, 12)),
    "execution_fists_feet": ("motor_execution", 4, (5, 9, 13)),
    "imagery_fists_feet": ("motor_imagery", 5, (6, 10, 14)),
}
RUNS = {run: (task, condition, label) for condition, (task, label, runs) in _RUN_KINDS.items() for run in runs}


@lru_cache(maxsize=1)
def mne_checksums() -> dict[str, str]:
    """MNE's shipped sha256 list for eegmmidb, keyed like ``S001/S001R01.edf``."""
    text = resources.files("mne").joinpath("data", "eegbci_checksums.txt").read_text()
    return dict(line.split() for line in text.splitlines() if line.strip())


def _relpath(subject: int, run: int) -> str:
    return f"S{subject:03d}/S{subject:03d}R{run:02d}.edf"


@lru_cache(maxsize=8)
def standard_names(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Channel names as ``mne.datasets.eegbci.standardize`` writes them ("Fc5." -> "FC5"), from a header."""
    import mne
    from mne.datasets import eegbci

    raw = mne.io.RawArray([[0.0]] * len(labels), mne.create_info(list(labels), 1.0, "eeg"), verbose="error")
    eegbci.standardize(raw)
    return tuple(raw.ch_names)


class EEGMMIDB(LocalDataset):
    name = "eegmmidb"
    description = "PhysioNet eegmmidb v1.0.0: motor movement/imagery, 64-channel EEG at 160 Hz"
    folder = EEGBCI_FOLDER
    line_freq = 60.0  # recorded in the USA with BCI2000 (60 Hz mains)
    label_levels = {"label": {str(label): condition.replace("_", " ")
                              for condition, (_, label, _) in _RUN_KINDS.items()}}  # the kind of run
    can_download = True
    source = "https://physionet.org/content/eegmmidb/1.0.0/ (or mne.datasets.eegbci.load_data)"

    def __init__(self, root=None, allow_download: bool = False, runs=DEFAULT_RUNS, subjects=None):
        """``subjects=None`` means the subjects present under the root (S001 if none is), each with the requested
        runs its folder holds; an explicit ``subjects`` requires (or, when allowed, downloads) every requested
        run of each."""
        super().__init__(root, allow_download)
        self.runs = tuple(int(r) for r in runs)
        unknown = [r for r in self.runs if r not in RUNS]
        if unknown:
            raise ValueError(f"eegmmidb has runs 1-14, not {unknown}")
        self._subjects_arg = None if subjects is None else tuple(int(s) for s in subjects)

    def _subject_ids(self) -> tuple[int, ...]:
        if self._subjects_arg is not None:
            return self._subjects_arg
        found = sorted(int(p.name[1:]) for p in self.base.glob("S[0-9][0-9][0-9]") if p.is_dir())
        return tuple(found) or (1,)

    def _requested(self) -> list[tuple[int, int]]:
        """Every (subject, run) asked for: the requested runs of the explicit or present subjects."""
        return [(s, r) for s in self._subject_ids() for r in self.runs]

    def _pairs(self) -> list[tuple[int, int]]:
        """The (subject, run) pairs this instance reads, in subject then run order.

        With explicit subjects, all requested pairs (so a missing file is an error that names it). Otherwise the
        requested pairs whose file is present; if none is, all requested pairs, so the error names the first
        missing file rather than listing an empty dataset.
        """
        requested = self._requested()
        if self._subjects_arg is not None:
            return requested
        present = [(s, r) for s, r in requested if (self.base / _relpath(s, r)).is_file()]
        return present or requested

    def absent(self) -> list[str]:
        """Requested runs of the listed subjects that this copy does not hold (``S002/S002R01.edf``...), which
        :meth:`recordings` leaves out when no explicit subject list asks for them."""
        read = set(self._pairs())
        return [_relpath(s, r) for s, r in self._requested() if (s, r) not in read]

    def _expected(self):
        sums = mne_checksums()
        return {rel: Expected(None, sums[rel]) for rel in (_relpath(s, r) for s, r in self._pairs())}

    def _download(self, rel: str) -> None:
        from mne.datasets import eegbci

        subject, run = int(rel[1:4]), int(rel[-6:-4])
        eegbci.load_data(subject, [run], path=self.root, update_path=False)

    def _locate(self, subject: int, runs: list[int]) -> dict[int, str]:
        """Paths through ``eegbci.load_data``, which cannot touch the network once every file is present."""
        from mne.datasets import eegbci

        for run in runs:
            self.require(_relpath(subject, run))  # raises DataMissingError, or downloads when allowed
        paths = eegbci.load_data(subject, list(runs), path=self.root, update_path=False, verbose="error")
        return {run: path.relative_to(self.base).as_posix() for run, path in zip(runs, paths)}

    def _recordings(self) -> list[Recording]:
        recs = []
        runs_of: dict[int, list[int]] = {}
        for subject, run in self._pairs():
            runs_of.setdefault(subject, []).append(run)
        for subject, runs in runs_of.items():
            for run, rel in self._locate(subject, runs).items():
                header = self.edf_header(rel)
                labels = tuple(lab for lab in header.labels if lab != "EDF Annotations")
                task, condition, label = RUNS[run]
                meta = recording_meta(condition, label, header.sfreq(labels[0]), standard_names(labels),
                                      header.duration_s, ["truncated"] if header.truncated else [],
                                      run=run, task=task)
                recs.append(Recording(self.name, f"S{subject:03d}", f"S{subject:03d}R{run:02d}",
                                      partial(self._load, rel), meta, source=str(self.base / rel)))
        return recs

    def _accept_mismatch(self, rel, path) -> bool:
        try:
            header = read_edf_header(path)
        except EdfHeaderError:  # empty or corrupted header: damage, not the known truncation
            return False
        if not header.truncated:
            return False
        warn_once(
            str(path),
            f"eegmmidb: {rel} is truncated (header declares {header.n_records} records, "
            f"{header.complete_records} complete ones are present); loading {header.duration_s:.1f} s "
            "and flagging it 'truncated'.",
        )
        return True

    def _load(self, rel: str):
        from mne.datasets import eegbci

        raw = read_edf(self.verify(rel))
        eegbci.standardize(raw)
        return raw
