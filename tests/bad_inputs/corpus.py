"""Builders of the bad-input corpus, each from real files of the local mirror.

Clinical-folder inputs start from three eegmat task recordings (19 channels, 500 Hz, cut to 20 s, read through
the checksum-verified loader) written as one patient each, then break one thing: a copied truncated eegmmidb
EDF, an empty file, an EDF whose header field is garbage, NaN or infinite samples, a flat channel, a channel
missing in one patient, a recording at 250 Hz, a recording shorter than one window, a patient without a report,
two spellings of one patient id, channels with unknown names. eegmmidb inputs are temporary roots of symlinks
into the mirror with one run replaced by a damaged copy.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import h5py
import mne
import numpy as np
import pandas as pd
from scipy.io import savemat

from eegprivacy.data.clinical_folder import write_recording

EEGMMIDB_S001 = "MNE-eegbci-data/files/eegmmidb/1.0.0/S001"
TRUNCATED_EDF = f"{EEGMMIDB_S001}/S001R01.edf"  # really truncated: 60 of the 61 declared records
COMPLETE_EDF = f"{EEGMMIDB_S001}/S001R03.edf"
EEGMAT_EDF = "eegmat/Subject03_2.edf"
SECONDS = 20.0
REPORT = "Routine EEG: normal background activity."


@lru_cache(maxsize=1)
def _eegmat_segments(root: str) -> tuple:
    """Four eegmat task recordings, the first SECONDS each, as plain RawArrays (no file path or dates)."""
    from eegprivacy.data.eegmat import EEGMAT

    recs = [r for r in EEGMAT(root=root).recordings() if r.recording.endswith("_2")][:4]
    out = []
    for rec in recs:
        raw = rec.load().crop(0, SECONDS, include_tmax=False).load_data()
        out.append(mne.io.RawArray(raw.get_data(), mne.create_info(raw.ch_names, raw.info["sfreq"], "eeg"),
                                   verbose="error"))
    return tuple(out)


def segments(data_root: Path) -> list:
    """Fresh copies of the four real segments (index 3 is kept for a fourth patient)."""
    return [raw.copy() for raw in _eegmat_segments(str(data_root))]


@dataclass
class Entry:
    """One row of metadata.csv and how its file is written."""

    patient: str
    file: str
    write: Callable[[Path], None]
    report: str = REPORT


def raw_file(raw, fmt: str = "fif") -> Callable[[Path], None]:
    return lambda path: write_recording(raw, path, fmt)


def copied(src: Path) -> Callable[[Path], None]:
    return lambda path: shutil.copyfile(src, path)


def write_folder(folder: Path, entries: list[Entry]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        (folder / entry.file).parent.mkdir(parents=True, exist_ok=True)
        entry.write(folder / entry.file)
    pd.DataFrame([{"patient_id": e.patient, "hospital": "h1", "file": e.file, "report": e.report}
                  for e in entries]).to_csv(folder / "metadata.csv", index=False)
    return folder


def clean_entries(data_root: Path) -> list[Entry]:
    """Three patients, one real 20-s recording each: the folder every clinical case breaks one thing in."""
    return [Entry(f"P0{i + 1}", f"P0{i + 1}/r01_raw.fif", raw_file(raw)) for i, raw in
            enumerate(segments(data_root)[:3])]


def _replace(entries: list[Entry], who: str, **changes) -> list[Entry]:
    """The entries with patient ``who``'s entry changed (file, writer, report or the id itself)."""
    return [Entry(**{**e.__dict__, **changes}) if e.patient == who else e for e in entries]


# ---------------------------------------------------------------------------------------------------------
# Clinical folders, one defect each (the defect is in patient P02 unless said otherwise)
# ---------------------------------------------------------------------------------------------------------
def truncated_edf(folder: Path, data_root: Path) -> Path:
    """The real truncated S001R01.edf (61 records declared, 60 present) beside the complete S001R03.edf."""
    return write_folder(folder, [Entry("P01", "P01/run01.edf", copied(data_root / TRUNCATED_EDF)),
                                 Entry("P02", "P02/run03.edf", copied(data_root / COMPLETE_EDF))])


def zero_byte_edf(folder: Path, data_root: Path) -> Path:
    return write_folder(folder, clean_entries(data_root) + [Entry("P04", "P04/r01.edf", lambda p: p.write_bytes(b""))])


def corrupt_edf_header(folder: Path, data_root: Path) -> Path:
    """A real eegmat EDF whose 'number of signals' header field is overwritten with letters."""
    def write(path: Path) -> None:
        data = bytearray((data_root / EEGMAT_EDF).read_bytes())
        data[252:256] = b"x9  "
        path.write_bytes(bytes(data))

    return write_folder(folder, clean_entries(data_root) + [Entry("P04", "P04/r01.edf", write)])


def nan_samples(folder: Path, data_root: Path) -> Path:
    """P02 as a MATLAB file with a 0.1-s gap of NaN in Cz (as some exports mark lost samples)."""
    raw = segments(data_root)[1]
    data = raw.get_data()
    data[raw.ch_names.index("Cz"), 1000:1050] = np.nan

    def write(path: Path) -> None:
        savemat(path, {"data": data, "fs": raw.info["sfreq"], "channels": np.array(raw.ch_names, dtype=object),
                       "unit": "V"})

    return write_folder(folder, _replace(clean_entries(data_root), "P02", file="P02/r01.mat", write=write))


def inf_samples(folder: Path, data_root: Path) -> Path:
    """P02 as HDF5 with one +inf and one -inf sample (an overflowed conversion)."""
    raw = segments(data_root)[1]
    data = raw.get_data()
    data[0, 10], data[3, 20] = np.inf, -np.inf

    def write(path: Path) -> None:
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=data)
            f.create_dataset("fs", data=raw.info["sfreq"])
            f.create_dataset("channels", data=np.array(raw.ch_names, dtype=object), dtype=h5py.string_dtype())
            f["data"].attrs["unit"] = "V"

    return write_folder(folder, _replace(clean_entries(data_root), "P02", file="P02/r01.h5", write=write))


def flat_channel(folder: Path, data_root: Path) -> Path:
    """P02's Cz held at a constant 5 µV: a disconnected electrode."""
    raw = segments(data_root)[1]
    raw._data[raw.ch_names.index("Cz")] = 5e-6
    return write_folder(folder, _replace(clean_entries(data_root), "P02", write=raw_file(raw)))


def missing_channel(folder: Path, data_root: Path) -> Path:
    """P02 was recorded without Pz."""
    raw = segments(data_root)[1].drop_channels(["Pz"])
    return write_folder(folder, _replace(clean_entries(data_root), "P02", write=raw_file(raw)))


def mixed_sampling_rates(folder: Path, data_root: Path) -> Path:
    """P02 at 250 Hz (resampled from the real 500 Hz), the others at 500 Hz."""
    raw = segments(data_root)[1].resample(250.0, verbose="error")
    return write_folder(folder, _replace(clean_entries(data_root), "P02", write=raw_file(raw)))


def shorter_than_window(folder: Path, data_root: Path) -> Path:
    """A fourth patient whose only recording is 1.5 s long (one 2-s window does not fit)."""
    raw = segments(data_root)[3].crop(0, 1.5, include_tmax=False)
    return write_folder(folder, clean_entries(data_root) + [Entry("P04", "P04/r01_raw.fif", raw_file(raw))])


def patient_without_label(folder: Path, data_root: Path) -> Path:
    """P02's report cell is empty: nothing to read a label from."""
    return write_folder(folder, _replace(clean_entries(data_root), "P02", report=""))


def duplicate_patient_ids(folder: Path, data_root: Path) -> Path:
    """P02's rows say "p-01": the same id as P01 up to case and separators."""
    entries = _replace(clean_entries(data_root), "P02", patient="p-01")
    return write_folder(folder, entries)


def unknown_channel_names(folder: Path, data_root: Path) -> Path:
    """P02 carries two extra channels with no 10-05 name (a photic marker and an unlabelled input)."""
    raw = segments(data_root)[1]
    extra = mne.io.RawArray(np.zeros((2, raw.n_times)) + 1e-6,
                            mne.create_info(["Photic", "X1"], raw.info["sfreq"], "eeg"), verbose="error")
    raw.add_channels([extra], force_update_info=True)
    return write_folder(folder, _replace(clean_entries(data_root), "P02", write=raw_file(raw)))


def only_unknown_channel_names(folder: Path, data_root: Path) -> Path:
    """P02's channels are all named Ch01..Ch19: nothing in common with the other recordings."""
    raw = segments(data_root)[1]
    raw.rename_channels({name: f"Ch{i + 1:02d}" for i, name in enumerate(raw.ch_names)})
    return write_folder(folder, _replace(clean_entries(data_root), "P02", write=raw_file(raw)))


CLINICAL = {builder.__name__: builder for builder in (
    truncated_edf, zero_byte_edf, corrupt_edf_header, nan_samples, inf_samples, flat_channel, missing_channel,
    mixed_sampling_rates, shorter_than_window, patient_without_label, duplicate_patient_ids, unknown_channel_names,
    only_unknown_channel_names,
)}


# ---------------------------------------------------------------------------------------------------------
# eegmmidb roots with one damaged run
# ---------------------------------------------------------------------------------------------------------
def eegmmidb_root(root: Path, data_root: Path, damage: Callable[[bytearray], bytes]) -> Path:
    """A data root of symlinks into the mirror's S001 whose run 3 is a damaged real copy."""
    for src in sorted((data_root / EEGMMIDB_S001).iterdir()):
        target = root / EEGMMIDB_S001 / src.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.name == "S001R03.edf":
            target.write_bytes(damage(bytearray(src.read_bytes())))
        else:
            os.symlink(src, target)
    return root


def _emptied(data: bytearray) -> bytes:
    return b""


def _header_garbled(data: bytearray) -> bytes:
    data[236:244] = b"sixty   "  # the number-of-records field
    return bytes(data)


EEGMMIDB_DAMAGE = {"zero_byte_edf": _emptied, "corrupt_edf_header": _header_garbled}
