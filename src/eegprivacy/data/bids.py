"""Any BIDS EEG dataset behind the dataset interface, read with ``mne-bids``; and :func:`to_bids`, which writes any
:class:`EEGDataset` (a ``clinical_folder`` cohort, a public loader) as a BIDS tree.

Layout expected (BIDS-EEG, https://bids-specification.readthedocs.io)::

    <root>/
        dataset_description.json
        participants.tsv                      # participant_id + the label column you name
        sub-01/[ses-1/]eeg/sub-01[_ses-1]_task-rest[_run-1]_eeg.edf   (+ _eeg.json, _channels.tsv sidecars)
        sub-02/...

Subjects are the ``sub-*`` folders; sessions, tasks and runs come from the file names (``find_matching_paths``);
one :class:`Recording` per recording file, in any format mne-bids reads: EDF (``.edf``), BDF (``.bdf``),
BrainVision (``.vhdr`` + ``.vmrk``/``.eeg``), EEGLAB (``.set`` [+ ``.fdt``]) and FIF (``.fif``). The subject is
the ``sub-<label>`` folder name, the recording id the file's entities (``sub-01_ses-1_task-rest_run-1``); only
EEG channels (by ``channels.tsv`` type) are kept.

Label rule: the patient label is the ``participants.tsv`` column named by ``label``, one value per participant.
Its values must be ``0``/``1``, or be mapped to 0/1 by ``label_map`` (e.g. ``{"HC": 0, "SZ": 1}``); ``condition``
is the value as written. Refused, each with an error naming the file or column: no ``participants.tsv``; no such
column; a value that is not 0/1 and not in ``label_map`` (a third value); a missing label (``n/a`` or empty: not
excluded silently, remove the row or the subject folder); a participant listed without a ``sub-`` folder, or a
folder not listed; a subject with no recording of the requested task; a recording whose header cannot be read
(raised when listing). The version is the sha256 over (relative path, size, sha256) of every file in the tree
(hidden files excepted), so moving the tree keeps it and any changed byte changes it.

Converting a non-BIDS folder (or any dataset) to BIDS, e.g. a clinical folder (``metadata.csv`` + recordings)::

    from eegprivacy.data import get_dataset
    from eegprivacy.data.bids import to_bids

    cohort = get_dataset("clinical_folder", folder="my_hospital_eeg")
    conversion = to_bids(cohort, "my_hospital_bids", label_column="label", task="rest")
    bids = get_dataset("bids", root="my_hospital_bids", label="label")

``to_bids`` writes each recording with ``mne_bids.write_raw_bids(..., format="EDF")``, one BIDS subject per
dataset subject (pseudonymous labels ``01``, ``02``, ... in the order of a keyed hash of the source ids, so the
numbers carry nothing about the source order, unless ``keep_subject_ids=True``; the mapping and the key are only
held in memory, never written), ``run-N`` entities where a subject has several recordings of a task, and the label
column in ``participants.tsv``. EDF holds whole 1-s data records: a recording whose length is not a whole number of
seconds is padded with its edge values to the next second (MNE's EDF export says so). It writes into a hidden
temporary folder beside the target and renames it at the end, so a failure leaves nothing behind. Signals are
re-quantised to 16-bit EDF (per channel range); headers are rebuilt from channel names and sampling rate only, so
no name, birthday or recording date travels into the tree.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import shutil
import uuid
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from eegprivacy.data._local import EdfHeaderError, read_edf_header, recording_meta
from eegprivacy.data.base import DataQualityWarning, EEGDataset, LeftOut, Recording
from eegprivacy.data.clinical_folder import RecordingReadError  # one error class for unreadable recordings
from eegprivacy.data.manifest import DataMissingError, hash_files, manifest_version
from eegprivacy.errors import InputDataError

PARTICIPANTS = "participants.tsv"
EXTENSIONS = (".edf", ".bdf", ".vhdr", ".set", ".fif")
_MISSING = {"", "n/a", "na", "nan"}


class BIDSLabelError(InputDataError, ValueError):
    """``participants.tsv`` does not give every participant a binary label in the named column."""


class _quiet(warnings.catch_warnings):
    """Silence mne-bids' and MNE's notes that do not concern us (no events.tsv for resting data, unset line
    frequency, EDF date defaults); errors still raise."""

    def __enter__(self):
        import mne

        out = super().__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)  # MNE/mne-bids notes; they name the caller's module
        self._level = mne.utils.use_log_level("error")  # "Unable to map column <label> to MNE", logged not warned
        self._level.__enter__()
        return out

    def __exit__(self, *exc):
        self._level.__exit__(*exc)
        return super().__exit__(*exc)


def _binary(value: str) -> int | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number in (0.0, 1.0) else None


def _listing(values, limit: int = 8) -> str:
    values = list(values)
    return ", ".join(map(str, values[:limit])) + (f" … ({len(values)} in all)" if len(values) > limit else "")


# ---------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------
def _read_bids(bids_path, *, check_header: bool = True):
    """``read_raw_bids`` (lazy, EEG channels only); an unreadable file is a :class:`RecordingReadError` naming it."""
    from mne_bids import read_raw_bids

    path = Path(bids_path.fpath)
    ext = path.suffix.lower()
    flags = []
    if not path.is_file():
        raise DataMissingError(f"recording {path} is listed by mne-bids but is not a file")
    if path.stat().st_size == 0:
        raise RecordingReadError(f"{path} is empty (0 bytes); export or copy the recording again, or remove it "
                                 "from the BIDS tree")
    if check_header and ext in (".edf", ".bdf"):
        try:
            header = read_edf_header(path, bytes_per_sample=3 if ext == ".bdf" else 2)
        except EdfHeaderError as err:
            raise RecordingReadError(f"{err}, or remove it from the BIDS tree") from None
        if header.truncated:
            flags.append("truncated")
    try:
        with _quiet():
            raw = read_raw_bids(bids_path, verbose="error")
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one clear error naming the file
        raise RecordingReadError(f"cannot read {path} with mne-bids ({type(err).__name__}: {err}). Export or copy "
                                 "the recording again, or remove it from the BIDS tree") from None
    eeg = [name for name, kind in zip(raw.ch_names, raw.get_channel_types()) if kind == "eeg"]
    if not eeg:
        raise RecordingReadError(f"{path} has no channel of type EEG (channels.tsv types: "
                                 f"{_listing(sorted(set(raw.get_channel_types())))}); mark the EEG channels as "
                                 "'EEG' in its channels.tsv")
    if len(eeg) < len(raw.ch_names):
        raw.pick(eeg)
    raw.verbose = "error"  # the signal is read later, lazily: keep MNE's per-file INFO lines out of a sweep's log
    return raw, flags


def _load(bids_path):
    raw, _ = _read_bids(bids_path, check_header=False)
    return raw


class BIDSDataset(EEGDataset):
    """A BIDS EEG dataset (see the module docstring for the layout and the label rule).

    ``root``: the BIDS root (holding ``participants.tsv``); ``label``: the ``participants.tsv`` column with the
    patient label; ``label_map``: value -> 0/1 where the column is not already 0/1; ``task``: read only this task
    (default: every task); ``session``: only this session; ``participants``: only these participant labels (with
    or without ``sub-``; BIDS Apps' ``--participant-label``), the others are neither read nor checked;
    ``datatype``: the BIDS data type folder (``eeg``); ``skip_unreadable``: a recording whose file cannot be
    opened (an unreadable header, a file cut inside its first data record) is left out of the listing, with one
    :class:`DataQualityWarning` naming the file and the reason and an entry in :attr:`left_out`, instead of
    stopping the listing with a :class:`RecordingReadError`.

    The dataset's ``name`` is the ``Name`` of the tree's ``dataset_description.json`` (``bids`` when it has none),
    so reports and MLflow tags say which cohort they are about; a tree :func:`to_bids` wrote from a synthetic
    dataset (``Name`` "SYNTHETIC …") reads back as synthetic.
    """

    name = "bids"
    synthetic = False
    description = "A BIDS EEG dataset read with mne-bids; label from a participants.tsv column"

    def __init__(self, root, label: str, label_map: Mapping[Any, int] | None = None, task: str | None = None,
                 datatype: str = "eeg", session: str | None = None, participants: list[str] | None = None,
                 skip_unreadable: bool = False):
        self.root = Path(root).expanduser().resolve()
        self.skip_unreadable = bool(skip_unreadable)
        self.left_out: list[LeftOut] = []  # filled while listing, with skip_unreadable
        self.session = None if session is None else str(session).removeprefix("ses-")
        self.selected = None if participants is None else sorted({str(p).removeprefix("sub-") for p in participants})
        if self.selected is not None and not self.selected:
            raise BIDSLabelError("an empty participant selection selects nobody; leave it out to read everyone")
        self.name = _dataset_name(self.root)
        # to_bids names a synthetic dataset's tree "SYNTHETIC <name>": read back, it stays labelled synthetic.
        self.synthetic = self.name.startswith("SYNTHETIC ")
        self.label = str(label)
        self.label_map = None if label_map is None else {str(k).strip(): v for k, v in dict(label_map).items()}
        if self.label_map is not None:
            bad = {k: v for k, v in self.label_map.items() if v not in (0, 1) or isinstance(v, bool)}
            if bad:
                raise BIDSLabelError(f"label_map for column {self.label!r} must map values to 0 or 1; got {bad}")
        self.task = task
        self.datatype = datatype

    @property
    def participants_tsv(self) -> Path:
        return self.root / PARTICIPANTS

    def label_names(self) -> dict[str, str]:
        """What 0 and 1 stand for: the values ``label_map`` sends to each (``--label-map SZ=1 HC=0``: SZ and HC;
        several are joined by "or"), else the label column's ``Levels`` in ``participants.json`` for the values 0
        and 1 (what :func:`to_bids` writes), else {}."""
        if self.label_map is not None:
            return {str(v): " or ".join(k for k, w in self.label_map.items() if w == v)
                    for v in sorted(set(self.label_map.values()))}
        sidecar = self.root / "participants.json"
        try:
            levels = json.loads(sidecar.read_text(encoding="utf-8")).get(self.label, {}).get("Levels") or {}
        except (OSError, ValueError, AttributeError):
            return {}
        # to_bids' generic text for a value whose meaning the source did not state says nothing more than the value
        return {value: str(levels[value]) for value in ("0", "1")
                if value in levels and str(levels[value]) != f"label value {value}"}

    def is_available(self) -> bool:
        return self.participants_tsv.is_file()

    # -- participants.tsv ----------------------------------------------------------------------------------
    def participants(self) -> pd.DataFrame:
        """``participants.tsv`` as strings, checked: ``participant_id`` plus a binary label for everyone."""
        return self._cached("_part", self._read_participants)

    def _read_participants(self) -> pd.DataFrame:
        """The table's rows for the selected participants (every row without a selection); an unknown selected
        label is an error naming it."""
        tsv = self.participants_tsv
        if not self.root.is_dir():
            raise DataMissingError(f"BIDS root {self.root} does not exist or is not a folder")
        if not tsv.is_file():
            raise DataMissingError(f"{tsv} not found: a BIDS dataset needs a participants.tsv at its root with a "
                                   f"participant_id column and the label column {self.label!r}")
        table = pd.read_csv(tsv, sep="\t", dtype=str, keep_default_na=False)
        table.columns = [c.strip() for c in table.columns]
        if "participant_id" not in table.columns:
            raise BIDSLabelError(f"{tsv} has no 'participant_id' column; columns present: {list(table.columns)}")
        if self.label not in table.columns:
            raise BIDSLabelError(f"{tsv} has no label column {self.label!r}; columns present: "
                                 f"{list(table.columns)}. Pass label= one of them")
        table = table.assign(participant_id=table["participant_id"].str.strip(),
                             **{self.label: table[self.label].str.strip()})
        if self.selected is not None:
            listed = set(table["participant_id"].str.removeprefix("sub-"))
            unknown = [p for p in self.selected if p not in listed]
            if unknown:
                raise BIDSLabelError(f"participant label(s) {_listing(unknown)} are not in {tsv} (it lists "
                                     f"{_listing(sorted(listed))})")
            table = table[table["participant_id"].str.removeprefix("sub-").isin(self.selected)]
        dupes = sorted(set(table["participant_id"][table["participant_id"].duplicated()]))
        if dupes:
            raise BIDSLabelError(f"{tsv}: participant_id repeats ({_listing(dupes)}); one row per participant")
        missing = table.loc[table[self.label].str.lower().isin(_MISSING), "participant_id"].tolist()
        if missing:
            raise BIDSLabelError(f"{tsv}: column {self.label!r} has no value (n/a or empty) for participant(s) "
                                 f"{_listing(missing)}; give them a label, or remove their rows and sub- folders "
                                 "(missing labels are not excluded silently)")
        if self.label_map is not None:
            labels = table[self.label].map(self.label_map)
            bad = table.loc[labels.isna()]
            allowed = f"label_map {self.label_map}"
        else:
            labels = table[self.label].map(_binary)
            bad = table.loc[labels.isna()]
            allowed = "0/1"
        if len(bad):
            values = sorted(set(bad[self.label]))
            who = _listing(bad["participant_id"])
            hint = (f"map them to 0/1 with label_map (e.g. label_map={{{values[0]!r}: 0, "
                    f"{values[-1]!r}: 1}})" if self.label_map is None and table[self.label].nunique() == 2
                    else "the label must be binary: fix or remove those rows, or choose another column")
            raise BIDSLabelError(f"{tsv}: column {self.label!r} has value(s) {_listing(map(repr, values))} outside "
                                 f"{allowed}, for participant(s) {who}; {hint}")
        return table.assign(_label=labels.astype(int))

    # -- the tree ------------------------------------------------------------------------------------------
    def _subject_labels(self) -> list[str]:
        """Every ``sub-<label>`` folder (of the selected participants), with or without files (an empty one is an
        error later, naming it)."""
        folders = sorted(p.name[4:] for p in self.root.glob("sub-*") if p.is_dir())
        return folders if self.selected is None else [f for f in folders if f in self.selected]

    def _recordings(self) -> list[Recording]:
        from mne_bids import find_matching_paths

        table = self.participants()
        tsv = self.participants_tsv
        listed = dict(zip(table["participant_id"], zip(table["_label"], table[self.label])))
        folders = self._subject_labels()
        without_folder = [pid for pid in listed if pid.removeprefix("sub-") not in folders]
        if without_folder:
            raise DataMissingError(f"participant(s) {_listing(without_folder)} in {tsv} have no folder under "
                                   f"{self.root} (expected {self.root / without_folder[0]}/); add their recordings "
                                   "or remove their rows")
        unlisted = [f"sub-{s}" for s in folders if f"sub-{s}" not in listed and s not in listed]
        if unlisted:
            raise BIDSLabelError(f"subject folder(s) {_listing(unlisted)} under {self.root} are not listed in {tsv}, "
                                 f"so they have no {self.label!r} label; add rows for them or remove the folders")
        out = []
        for subject in folders:
            with _quiet():
                paths = find_matching_paths(self.root, subjects=subject, tasks=self.task, datatypes=self.datatype,
                                            sessions=self.session, suffixes=self.datatype,
                                            extensions=list(EXTENSIONS))
            paths = sorted((p for p in paths if p.subject == subject and not p.split), key=lambda p: str(p.fpath))
            if not paths:
                what = (f"task {self.task!r}" if self.task else "any task") + (
                    f" in session {self.session!r}" if self.session else "")
                raise DataMissingError(f"subject folder {self.root / ('sub-' + subject)} holds no {self.datatype} "
                                       f"recording of {what} (looked for *_{self.datatype}"
                                       f"{{{','.join(EXTENSIONS)}}} under its {self.datatype}/ folders); add the "
                                       f"recording, or remove the folder and its row in {PARTICIPANTS}")
            label, value = listed.get(f"sub-{subject}", listed.get(subject))
            for bp in paths:
                try:
                    raw, flags = _read_bids(bp)
                except RecordingReadError as err:
                    if not self.skip_unreadable:
                        raise
                    self.left_out.append(LeftOut(f"sub-{subject}", str(bp.fpath), str(err)))
                    warnings.warn(f"{err}; left out", DataQualityWarning, stacklevel=4)
                    continue
                rec_id = bp.copy().update(suffix=None, extension=None, check=False).basename
                meta = recording_meta(value, label, raw.info["sfreq"], raw.ch_names, raw.n_times / raw.info["sfreq"],
                                      flags, session=bp.session, task=bp.task, run=bp.run,
                                      format=Path(bp.fpath).suffix.lower().lstrip("."))
                out.append(Recording(self.name, f"sub-{subject}", rec_id, partial(_load, bp), meta,
                                     source=str(bp.fpath)))
        for rec in out:  # one warning per file, naming it: the person who holds the tree can find and fix it
            if "truncated" in rec.meta["flags"].split(";"):
                warnings.warn(f"{rec.source}: truncated (the file holds fewer data records than its header "
                              "declares); reading the complete records and flagging the recording 'truncated'",
                              DataQualityWarning, stacklevel=4)
        return out

    def _version(self) -> str:
        """sha256 over (relative path, size, sha256) of every non-hidden file under the root but ``derivatives/``
        (results of tools, not raw data: an audit writing there leaves the version as it was), with a participant
        selection the root's own files and the selected participants' folders."""
        self.participants()
        rels = sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*")
                      if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.root).parts)
                      and p.relative_to(self.root).parts[0] != "derivatives"
                      and self._in_selection(p.relative_to(self.root)))
        return manifest_version([(rel, size, sha) for rel, (size, sha) in hash_files(self.root, rels).items()])


    def _in_selection(self, rel: Path) -> bool:
        top = rel.parts[0]
        if self.selected is None or len(rel.parts) == 1 or not top.startswith("sub-"):
            return True
        return top[4:] in self.selected


def _dataset_name(root: Path) -> str:
    """``Name`` from the tree's ``dataset_description.json``, else ``bids``; an unreadable file is an error naming
    it (a BIDS tree needs a valid one)."""
    path = root / "dataset_description.json"
    if not path.is_file():
        return BIDSDataset.name
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("Name")
    except (ValueError, UnicodeDecodeError) as err:
        raise BIDSLabelError(f"{path} is not valid JSON ({err}); fix or rewrite it (BIDS requires it)") from None
    name = " ".join(str(name or "").split())
    return name or BIDSDataset.name


# ---------------------------------------------------------------------------------------------------------
# Writing: any EEGDataset -> BIDS
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BIDSConversion:
    """What :func:`to_bids` wrote. ``subjects`` (source subject -> ``sub-XX``) and ``recordings`` ((source
    subject, source recording) -> BIDS recording id) exist only in memory: the tree never holds source ids
    (unless ``keep_subject_ids=True``)."""

    root: Path
    subjects: dict[str, str] = field(default_factory=dict)
    recordings: dict[tuple[str, str], str] = field(default_factory=dict)
    label_column: str = "label"
    label_counts: dict[str, int] = field(default_factory=dict)  # participants per label value, as written


def pseudonym_order(subjects: list[str], key: bytes) -> list[str]:
    """``subjects`` in the order :func:`to_bids` numbers them: by HMAC-SHA256 of each source id under ``key``.

    Under a secret (or fresh random) key the order is a uniformly random permutation that carries nothing about the
    source's listing (a folder of controls then patients, a sort by date or by name); the same key and ids give the
    same order whatever the listing, so a steward holding the key can convert again to the same numbers."""
    return sorted(subjects, key=lambda s: hmac.new(key, str(s).encode(), "sha256").digest())


def _alnum(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", str(text))


def _label_value(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _clean_raw(raw, line_freq: float | None = None):
    """A fresh RawArray of the EEG channels: channel names, rate, signal and annotations only (no patient name,
    birthday, recording date or file path travels into the BIDS tree), plus the dataset's ``line_freq``, which
    ``write_raw_bids`` writes as ``PowerLineFrequency`` (``n/a`` when None)."""
    import mne

    raw = raw.copy().load_data(verbose="error") if not raw.preload else raw.copy()
    picks = mne.pick_types(raw.info, eeg=True, exclude=[])
    if len(picks) == 0:
        picks = np.arange(len(raw.ch_names))
    names = [raw.ch_names[i] for i in picks]
    info = mne.create_info(names, raw.info["sfreq"], "eeg")
    info["line_freq"] = line_freq
    clean = mne.io.RawArray(raw.get_data(picks=picks), info, verbose="error")
    ann = raw.annotations
    if len(ann):
        onset = ann.onset - raw.first_time if ann.orig_time is not None else ann.onset
        clean.set_annotations(mne.Annotations(onset, ann.duration, ann.description))
    return clean


WRITE_FORMATS = ("EDF", "BrainVision")


def _line_freq(dataset: EEGDataset) -> float | None:
    """The dataset's mains frequency as a positive float, or None; anything else is the dataset's bug, refused
    before a byte is written."""
    value = getattr(dataset, "line_freq", None)
    if value is None:
        return None
    try:
        hz = float(value)
    except (TypeError, ValueError):
        hz = float("nan")
    if not (np.isfinite(hz) and hz > 0):
        raise ValueError(f"{dataset.name}: line_freq must be the mains frequency in Hz (e.g. 50 or 60) or None, "
                         f"not {value!r}")
    return hz


def _is_missing(column: pd.Series) -> bool:
    return bool(column.astype(str).str.strip().str.lower().isin(_MISSING).all())


def _write_participants(root: Path, labels: Mapping[str, str], label_column: str, dataset: EEGDataset) -> None:
    """Rewrite the ``participants.tsv``/``.json`` pair that ``write_raw_bids`` left in ``root``.

    ``labels`` maps ``sub-XX`` to its label value. mne-bids writes age, sex, hand, weight and height for every
    participant, ``n/a`` throughout when (as here) no subject info travels with the signal: a column that says
    nothing about anyone is dropped, and so is its ``participants.json`` entry, so the two files describe the
    same columns. The label column's entry gets ``Levels`` for the values present, with the dataset's own
    meaning where it states one (:attr:`EEGDataset.label_levels`), else a generic text.
    """
    tsv, sidecar = root / PARTICIPANTS, root / "participants.json"
    table = pd.read_csv(tsv, sep="\t", dtype=str, keep_default_na=False).sort_values("participant_id")
    table[label_column] = table["participant_id"].map(labels)
    keep = ["participant_id", label_column]
    table = table[[c for c in table.columns if c in keep or not _is_missing(table[c])]]
    table.to_csv(tsv, sep="\t", index=False)
    described = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    described = {column: entry for column, entry in described.items() if column in table.columns}
    meaning = dataset.label_levels.get(label_column, {})
    # integers in numeric order ("-1", "0", "1", "2", "10"), then any other text
    observed = sorted(set(table[label_column]), key=lambda v: (not v.lstrip("-").isdigit(), len(v), v))
    described[label_column] = {
        "Description": f"label {label_column!r} of {dataset.name}, one value per participant (written by "
                       "eegprivacy.data.bids.to_bids)",
        "Levels": {value: meaning.get(value, f"label value {value}") for value in observed},
    }
    sidecar.write_text(json.dumps(described, indent=4) + "\n")


def to_bids(dataset: EEGDataset, bids_root, *, label_column: str = "label", task: str | None = "rest",
            overwrite: bool = False, subjects: list[str] | None = None, keep_subject_ids: bool = False,
            format: str = "EDF", key: bytes | None = None) -> BIDSConversion:  # noqa: A002 - mne-bids' name
    """Write every recording of ``dataset`` as a BIDS-EEG tree at ``bids_root`` (``write_raw_bids``).

    ``format``: ``"EDF"`` (the most widely read; 16-bit samples scaled per channel, so values move by up to half
    a quantisation step) or ``"BrainVision"`` (32-bit floats: the signal as read, to float32 precision).

    ``label_column``: the recording-meta key holding the per-subject label (``rec.meta[label_column]``, the
    ``label`` column by default), written under that name to ``participants.tsv``; it must be one value per
    subject. ``task``: the BIDS task of every recording, or ``None`` to use each recording's ``condition``
    (e.g. eegmat's ``rest``/``arithmetic``). Subjects become ``sub-01``, ``sub-02``, ... in the order of
    :func:`pseudonym_order` under ``key`` (default: a fresh random key, used for this conversion only), so neither
    a number nor the order of ``participants.tsv`` rows or of the files' writing tells where a subject stood in the
    source (a source listing its controls first would otherwise name its patients by their numbers); or their
    alphanumeric source id with ``keep_subject_ids=True`` (only for public ids). ``key`` (bytes) is never
    written. Several recordings of one task get ``run-1``, ``run-2``, .... An existing ``bids_root`` is an error
    unless ``overwrite=True``; the tree is built in a hidden folder beside it and renamed into place only when
    complete. ``subjects``: convert only
    these source subjects (an id the dataset does not have is an error, not a smaller tree).

    What a reader of the tree learns about the dataset: ``participants.tsv`` holds ``participant_id``, the label
    column and only those other columns with a value for someone (mne-bids' all-``n/a`` age/sex/hand/weight/height
    are dropped, here and in ``participants.json``); ``participants.json`` gives the label column ``Levels`` for
    the values present, in the dataset's words where it states them (``dataset.label_levels``); every
    ``*_eeg.json`` has ``PowerLineFrequency`` from ``dataset.line_freq`` (``n/a`` where the site is unknown).
    """
    from mne_bids import BIDSPath, make_dataset_description, write_raw_bids

    if format not in WRITE_FORMATS:
        raise ValueError(f"format must be one of {WRITE_FORMATS}, not {format!r}")
    bids_root = Path(bids_root).expanduser().resolve()
    if bids_root.exists() and not overwrite:
        raise FileExistsError(f"{bids_root} already exists; pass overwrite=True to replace it, or choose a new folder")
    line_freq = _line_freq(dataset)
    if subjects is not None:
        unknown = sorted(set(map(str, subjects)) - set(dataset.subjects()))
        if unknown:  # a typo must not shrink the tree silently
            raise ValueError(f"{dataset.name} has no subject(s) {_listing(unknown)}; `eegprivacy datasets` counts "
                             "its subjects, and ids are matched exactly (case included)")
    recs = dataset.recordings(subjects)
    if not recs:
        raise ValueError(f"{dataset.name}: no recordings to convert"
                         + (f" for subjects {subjects}" if subjects else ""))

    # Plan everything (labels, names) before writing a byte.
    by_subject: dict[str, list[Recording]] = {}
    for rec in recs:
        by_subject.setdefault(rec.subject, []).append(rec)
    width = max(2, len(str(len(by_subject))))
    # Numbered (and written) in the keyed order: the numbers, the participants.tsv rows and the files' times carry
    # nothing about the source's listing.
    by_subject = {s: by_subject[s] for s in pseudonym_order(list(by_subject), key or secrets.token_bytes(32))}
    sub_labels, labels = {}, {}
    for i, (subject, group) in enumerate(by_subject.items(), start=1):
        absent = [r.describe() for r in group if label_column not in r.meta or pd.isna(r.meta[label_column])]
        if absent:
            raise ValueError(f"{absent[0]} has no {label_column!r} in its metadata; choose label_column among "
                             f"{sorted(group[0].meta)}")
        values = {_label_value(r.meta[label_column]) for r in group}
        if len(values) != 1:
            raise ValueError(f"{dataset.name}: the recordings of {group[0].describe()} and its siblings carry "
                             f"{label_column!r} values {sorted(values)}; participants.tsv holds one label per "
                             "participant. Pass label_column= a per-subject metadata column (e.g. eegmat's "
                             "'count_quality'); per-recording conditions can become BIDS tasks with task=None")
        labels[subject] = values.pop()
        sub_labels[subject] = _alnum(subject) if keep_subject_ids else f"{i:0{width}d}"
    if keep_subject_ids:
        clash = [s for s in sub_labels if not sub_labels[s] or list(sub_labels.values()).count(sub_labels[s]) > 1]
        if clash:
            raise ValueError(f"{dataset.name}: subject ids {clash} are empty or collide once reduced to letters and "
                             "digits (BIDS labels are alphanumeric); use keep_subject_ids=False")
    plan = []  # (recording, source subject, task, run or None)
    for subject, group in by_subject.items():
        tasks = [_alnum(task if task is not None else r.meta.get("condition", "")) for r in group]
        for k, (rec, t) in enumerate(zip(group, tasks)):
            if not t:
                raise ValueError(f"{rec.describe()}: task {task if task is not None else rec.meta.get('condition')!r} "
                                 "has no letters or digits; pass task= explicitly")
            plan.append((rec, subject, t, tasks[:k].count(t) + 1 if tasks.count(t) > 1 else None))

    tmp = bids_root.parent / f".{bids_root.name}.{uuid.uuid4().hex[:8]}.tmp"
    bids_root.parent.mkdir(parents=True, exist_ok=True)
    mapping: dict[tuple[str, str], str] = {}
    try:
        tmp.mkdir()
        for rec, subject, t, run in plan:
            bp = BIDSPath(subject=sub_labels[subject], task=t, run=run, datatype="eeg", root=tmp)
            try:
                raw = _clean_raw(rec.load(), line_freq)
            except Exception as err:
                raise RecordingReadError(f"converting {rec.describe()} to BIDS: {type(err).__name__}: {err}; "
                                         f"nothing was written to {bids_root}") from err
            with _quiet():
                write_raw_bids(raw, bp, format=format, allow_preload=True, overwrite=True, verbose="error",
                               **({"physical_range": "channelwise"} if format == "EDF" else {}))
            mapping[(rec.subject, rec.recording)] = bp.copy().update(suffix=None, extension=None).basename
        _write_participants(tmp, {f"sub-{sub_labels[s]}": labels[s] for s in by_subject}, label_column, dataset)
        make_dataset_description(path=tmp, name=("SYNTHETIC " if dataset.synthetic else "") + dataset.name,
                                 dataset_type="raw", overwrite=True, verbose=False)
        old = None
        if bids_root.exists():
            old = bids_root.parent / f".{bids_root.name}.{uuid.uuid4().hex[:8]}.old"
            os.replace(bids_root, old)
        os.replace(tmp, bids_root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    counts = {value: list(labels.values()).count(value) for value in sorted(set(labels.values()))}
    return BIDSConversion(bids_root, {s: f"sub-{sub_labels[s]}" for s in by_subject}, mapping, label_column, counts)


__all__ = ["EXTENSIONS", "WRITE_FORMATS", "BIDSConversion", "BIDSDataset", "BIDSLabelError", "RecordingReadError",
           "pseudonym_order", "to_bids"]
