"""A user's own clinical EEG: a folder of recordings plus a metadata CSV (study A's hospital setting).

Layout::

    <folder>/
        metadata.csv            # one row per (recording file, report)
        P01/r01.edf             # any sub-folders; paths in the CSV are relative to <folder>
        P01/r02_raw.fif
        P02/r01.mat
        P02/r02.h5

``metadata.csv`` columns (required): ``patient_id``, ``hospital``, ``file``, ``report``. Optional:
``recording`` (an id unique within the patient; default ``r01``, ``r02``, ... in CSV order), ``age``,
``sex`` (passed through), ``synthetic`` (true/false; marks data written from a synthetic cohort so tables
keep saying so). A file may appear on several rows (several reports); the patient label is 1 when any of
the patient's reports is positive under the study-A keyword rules (:mod:`eegprivacy.data.labels`).

Recording formats, by extension:

- ``.edf``/``.bdf`` (MNE; "EEG Fp1"-style prefixes are parsed) and ``.fif`` (MNE);
- ``.mat`` (MATLAB v5/v7 via SciPy, v7.3 via h5py) and ``.h5``/``.hdf5``: an array of channels x samples
  (either orientation: the longer axis is time) under one of :data:`DATA_KEYS`, the sampling rate under one
  of :data:`SFREQ_KEYS`, optionally channel names under one of :data:`CHANNEL_KEYS` and the unit under one
  of :data:`UNIT_KEYS` ("V", "mV", "uV"/"µV"). In HDF5 each may be a dataset at the root or an attribute of
  the data set or of the file. Without a unit, data whose 95th-percentile magnitude exceeds 1 mV are taken
  to be microvolts (with a warning): hospital exports are usually in µV.

Channel names are normalised ("EEG FP1-REF" -> "Fp1", old T3/T4/T5/T6 -> T7/T8/P7/P8) and only 10-05
positions are kept, so ECG/EMG/photic channels drop out and montages work; a file with no standard name at
all keeps its EEG channels as they are and is flagged ``nonstandard_channel_names``.

Bad input (table in README.md, "Bad inputs"): an empty, corrupted or unreadable file is a
:class:`RecordingReadError` naming it; ids that differ only in formatting are refused; an EDF/BDF shorter than its
header says is read as far as it goes and flagged ``truncated``; a patient with no report text reads as label 0 and
is flagged ``no_report``. Each recovery is reported by one :class:`DataQualityWarning` per folder that names
``metadata.csv`` rows, never patient ids.

One idea over about 690 lines: one folder format, with its CSV schema, the recording readers it accepts and the
channel-name normalisation that turns them into one montage.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.data.base import DataQualityWarning, EEGDataset, Recording
from eegprivacy.data.labels import NEGATIVE_KEYWORDS, POSITIVE_KEYWORDS, patient_labels, report_is_positive
from eegprivacy.data.manifest import DataMissingError, file_sha256, hash_files, manifest_version
from eegprivacy.errors import InputDataError, InvalidInputError

REQUIRED_COLUMNS = ("patient_id", "hospital", "file", "report")
PASSTHROUGH_COLUMNS = ("age", "sex")
DATA_KEYS = ("data", "eeg", "signal", "signals", "x")
SFREQ_KEYS = ("fs", "sfreq", "srate", "sampling_rate", "sample_rate")
CHANNEL_KEYS = ("channels", "ch_names", "chan_names", "channel_names", "labels")
UNIT_KEYS = ("unit", "units")
FORMATS = {".edf": "edf", ".bdf": "edf", ".fif": "fif", ".mat": "mat", ".h5": "h5", ".hdf5": "h5"}
_UNIT_SCALE = {"v": 1.0, "mv": 1e-3, "uv": 1e-6, "µv": 1e-6, "μv": 1e-6, "microvolt": 1e-6, "microvolts": 1e-6}
_OLD_NAMES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}
_REFERENCE_SUFFIXES = {"REF", "LE", "RE", "AVG", "AV", "AR", "CAR", "A1", "A2", "M1", "M2", "A1A2", "LER"}
_TRUE = {"1", "true", "yes", "y", "t"}
_ID_SEPARATORS = set("-_./")


def _canonical_id(patient_id: str) -> str:
    """The formatting-free form the linkage GlobalID hashes (NFKC, casefold, no whitespace, no - _ . / or other
    dashes; eegprivacy.privacy.linkage.canonical_identifier, restated here because data may not import privacy)."""
    text = unicodedata.normalize("NFKC", patient_id).casefold()
    return "".join(ch for ch in text if not ch.isspace() and ch not in _ID_SEPARATORS
                   and unicodedata.category(ch) != "Pd")


def file_format(path: str | Path) -> str:
    """'edf' | 'fif' | 'mat' | 'h5' from the extension; a clear error for anything else."""
    name = str(path).lower()
    if name.endswith(".fif.gz"):
        return "fif"
    fmt = FORMATS.get(Path(name).suffix)
    if fmt is None:
        raise InvalidInputError(f"unsupported recording format {Path(path).suffix!r} for {path}; "
                         f"supported: {', '.join(sorted(FORMATS))}")
    return fmt


# ---------------------------------------------------------------------------------------------------------
# Channel names
# ---------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _standard_names() -> dict[str, str]:
    from eegprivacy.data.synthetic import standard_montage

    return {n.upper(): n for n in standard_montage().ch_names}


def normalise_channel_name(name: str) -> str | None:
    """Standard 10-05 spelling of a channel label, or None when it is not a 10-05 position."""
    label = re.sub(r"^(EEG)[\s_:-]+", "", str(name).strip(), flags=re.IGNORECASE).strip()
    label = label.rstrip(".")  # BCI2000/PhysioNet pad labels with dots to 4 characters: "Fc5.", "C3.."
    parts = re.split(r"[-_ ]", label)
    if len(parts) > 1 and parts[-1].upper() in _REFERENCE_SUFFIXES:
        label = "".join(parts[:-1]) if len(parts) > 2 else parts[0]
    std = _standard_names().get(label.upper())
    if std is None:
        return None
    return _OLD_NAMES.get(std, std)


def _channel_plan(names: Sequence[str]) -> tuple[list[int], list[str], list[str]]:
    """(indices to keep, their new names, flags): standard channels only, first of any duplicates."""
    keep, new, seen = [], [], set()
    for i, n in enumerate(names):
        std = normalise_channel_name(n)
        if std is not None and std not in seen:
            keep.append(i)
            new.append(std)
            seen.add(std)
    if not keep:
        return list(range(len(names))), [str(n) for n in names], ["nonstandard_channel_names"]
    flags = ["dropped_nonstandard_channels"] if len(keep) < len(names) else []
    return keep, new, flags


# ---------------------------------------------------------------------------------------------------------
# Array files (MAT, HDF5)
# ---------------------------------------------------------------------------------------------------------
def _pick_key(keys, wanted: Sequence[str]) -> str | None:
    lower = {k.lower(): k for k in keys}
    for w in wanted:
        if w in lower:
            return lower[w]
    return None


def _to_strings(value) -> list[str]:
    """Channel names from whatever MATLAB/HDF5 hands back (cellstr, char matrix, bytes, nested arrays)."""
    if isinstance(value, (str, bytes)):
        return [value.decode() if isinstance(value, bytes) else value]
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        return [(x.decode() if isinstance(x, bytes) else str(x)).strip() for x in arr.ravel()]
    if arr.dtype.kind == "O":
        out = []
        for x in arr.ravel():
            out.extend(_to_strings(x))
        return out
    raise InvalidInputError(f"cannot read channel names from an array of dtype {arr.dtype}")


def _scalar(value) -> float:
    arr = np.asarray(value, dtype=float).ravel()
    if arr.size != 1:
        raise InvalidInputError(f"sampling rate must be one number, got {arr.size} values")
    return float(arr[0])


def _unit_text(value) -> str:
    names = _to_strings(value)
    return names[0] if names else ""


class _ArrayFile:
    """Header (shape, sfreq, names, unit) and data of a MAT or HDF5 recording."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.fmt = path, fmt
        self._mat_v73 = False
        if fmt == "mat":
            try:
                self._read_mat_header()
            except NotImplementedError:  # MATLAB v7.3 files are HDF5
                self._mat_v73 = True
                self._read_h5_header()
        else:
            self._read_h5_header()
        if len(self.data_shape) != 2 or min(self.data_shape) < 1:
            raise InvalidInputError(f"{path}: the data array must be 2-D (channels x samples), got shape {self.data_shape}")
        n0, n1 = self.data_shape
        if self.names is not None and len(self.names) in (n0, n1) and n0 != n1:
            self.transpose = len(self.names) == n1
        else:
            self.transpose = n0 > n1  # the longer axis is time
        self.n_channels, self.n_times = (n1, n0) if self.transpose else (n0, n1)
        if self.names is not None and len(self.names) != self.n_channels:
            raise InvalidInputError(f"{path}: {len(self.names)} channel names for {self.n_channels} channels")

    def _missing(self, what: str, keys: Sequence[str], found) -> ValueError:
        return ValueError(f"{self.path}: no {what} found; looked for {', '.join(keys)} "
                          f"(case-insensitive); the file holds: {', '.join(sorted(found)) or 'nothing'}")

    def _read_mat_header(self) -> None:
        from scipy.io import loadmat, whosmat

        entries = whosmat(str(self.path))
        info = {name: shape for name, shape, _ in entries}
        classes = {name: cls for name, _, cls in entries}
        self.data_key = _pick_key(info, DATA_KEYS)
        if self.data_key is None:
            raise self._missing("data array", DATA_KEYS, info)
        if classes[self.data_key] in ("struct", "cell", "char", "object", "sparse", "function_handle"):
            raise InvalidInputError(f"{self.path}: {self.data_key!r} is a MATLAB {classes[self.data_key]}, not a numeric "
                             "channels x samples array (EEGLAB .set structs are not read here)")
        self.data_shape = tuple(info[self.data_key])
        sk, ck, uk = _pick_key(info, SFREQ_KEYS), _pick_key(info, CHANNEL_KEYS), _pick_key(info, UNIT_KEYS)
        if sk is None:
            raise self._missing("sampling rate", SFREQ_KEYS, info)
        small = loadmat(str(self.path), variable_names=[k for k in (sk, ck, uk) if k])
        self.sfreq = _scalar(small[sk])
        self.names = _to_strings(small[ck]) if ck else None
        self.unit = _unit_text(small[uk]) if uk else None

    def _read_h5_header(self) -> None:
        import h5py

        with h5py.File(self.path, "r") as f:
            keys = [k for k in f.keys() if isinstance(f[k], h5py.Dataset)]
            self.data_key = _pick_key(keys, DATA_KEYS)
            if self.data_key is None:
                raise self._missing("data array", DATA_KEYS, list(f.keys()))
            dset = f[self.data_key]
            if dset.dtype.kind not in "fiu":
                raise InvalidInputError(f"{self.path}: {self.data_key!r} holds {dset.dtype}, not a numeric array")
            self.data_shape = tuple(dset.shape)

            def lookup(wanted):
                k = _pick_key(keys, wanted)
                if k is not None:
                    return self._h5_value(f, f[k])
                for attrs in (dset.attrs, f.attrs):
                    k = _pick_key(list(attrs.keys()), wanted)
                    if k is not None:
                        return attrs[k]
                return None

            fs = lookup(SFREQ_KEYS)
            if fs is None:
                raise self._missing("sampling rate", SFREQ_KEYS, [*keys, *dset.attrs.keys(), *f.attrs.keys()])
            self.sfreq = _scalar(fs)
            names = lookup(CHANNEL_KEYS)
            self.names = _to_strings(names) if names is not None else None
            unit = lookup(UNIT_KEYS)
            self.unit = _unit_text(unit) if unit is not None else None

    @staticmethod
    def _h5_value(f, dset):
        import h5py

        value = dset[()]
        if h5py.check_dtype(ref=dset.dtype) is not None:  # MATLAB v7.3 cellstr: references to uint16 char arrays
            return [_matlab_chars(f[ref][()]) for ref in np.asarray(value).ravel()]
        if dset.attrs.get("MATLAB_class", b"") in (b"char", "char"):
            arr = np.asarray(value)
            return [_matlab_chars(row) for row in (arr.T if arr.ndim == 2 else arr[None])]
        return value

    def read(self) -> np.ndarray:
        if self.fmt == "mat" and not self._mat_v73:
            from scipy.io import loadmat

            data = loadmat(str(self.path), variable_names=[self.data_key])[self.data_key]
        else:
            import h5py

            with h5py.File(self.path, "r") as f:
                data = f[self.data_key][()]
        data = np.asarray(data, dtype=float)
        return data.T if self.transpose else data


def _matlab_chars(codes) -> str:
    return "".join(chr(int(c)) for c in np.asarray(codes).ravel() if int(c)).strip()


def _to_volts(data: np.ndarray, unit: str | None, path: Path) -> np.ndarray:
    if unit:
        scale = _UNIT_SCALE.get(unit.strip().lower())
        if scale is None:
            raise InvalidInputError(f"{path}: unknown unit {unit!r}; use one of V, mV, uV")
        return data * scale
    if data.size and np.percentile(np.abs(data), 95) > 1e-3:
        warnings.warn(f"{path}: no unit given and values look like microvolts (95th percentile > 1 mV if volts); "
                      "scaling by 1e-6. Store a 'unit' variable to silence this.", stacklevel=3)
        return data * 1e-6
    return data


# ---------------------------------------------------------------------------------------------------------
# Header and loading per format
# ---------------------------------------------------------------------------------------------------------
def _read_mne(path: Path, fmt: str, preload: bool):
    import mne

    if fmt == "fif":
        raw = mne.io.read_raw_fif(path, preload=preload, verbose="error")
    elif path.suffix.lower() == ".bdf":
        raw = mne.io.read_raw_bdf(path, preload=preload, infer_types=True, verbose="error")
    else:
        raw = mne.io.read_raw_edf(path, preload=preload, infer_types=True, verbose="error")
    eeg = [raw.ch_names[i] for i in mne.pick_types(raw.info, eeg=True, exclude=[])]
    return raw, eeg


class RecordingReadError(InputDataError, ValueError):
    """A listed recording cannot be read (empty, corrupted, not the format its extension says)."""


def _unreadable(path: Path, fmt: str, err: Exception) -> RecordingReadError:
    return RecordingReadError(f"cannot read {path} as {fmt.upper()}: {err}. Export the recording again from the "
                              "recording system, or remove its row from metadata.csv")


def _check_not_empty(path: Path, fmt: str) -> None:
    if path.stat().st_size == 0:
        raise RecordingReadError(f"{path} is empty (0 bytes); export the recording again from the recording system "
                                 "or remove its row from metadata.csv")


def _edf_truncated(path: Path) -> bool:
    """Whether an EDF/BDF holds fewer records than its header declares (MNE reads what is there, silently)."""
    from eegprivacy.data._local import EdfHeaderError, read_edf_header

    try:
        header = read_edf_header(path, bytes_per_sample=3 if path.suffix.lower() == ".bdf" else 2)
    except EdfHeaderError as err:
        raise RecordingReadError(f"{err}, or remove its row from metadata.csv") from None
    return header.truncated


def _array_file(path: Path, fmt: str) -> _ArrayFile:
    try:
        return _ArrayFile(path, fmt)
    except Exception as err:  # noqa: BLE001 - SciPy/h5py raise many types for a damaged file
        if isinstance(err, ValueError) and str(path) in str(err):
            raise  # our own message: already names the file and what is missing
        raise _unreadable(path, fmt, err) from err


def read_header(path: Path) -> dict:
    """sfreq, channels kept (normalised), duration and flags, without reading the signal.

    ``dropped`` lists the channel labels left out as non-10-05 (ECG, EMG, photic, unknown names), for the
    dataset's one warning about them. An empty or unreadable file raises :class:`RecordingReadError` naming it.
    """
    fmt = file_format(path)
    _check_not_empty(path, fmt)
    if fmt in ("edf", "fif"):
        truncated = fmt == "edf" and _edf_truncated(path)
        try:
            raw, eeg = _read_mne(path, fmt, preload=False)
        except Exception as err:  # noqa: BLE001 - MNE raises many types for a damaged file; say which file
            raise _unreadable(path, fmt, err) from err
        keep, names, flags = _channel_plan(eeg)
        if len(eeg) < len(raw.ch_names):
            flags = sorted({*flags, "dropped_nonstandard_channels"})
        if truncated:
            flags = sorted({*flags, "truncated"})
        kept = {eeg[i] for i in keep}
        dropped = [n for n in raw.ch_names if n not in kept and n != "EDF Annotations"]
        return {"sfreq": float(raw.info["sfreq"]), "channels": names, "n_times": int(raw.n_times),
                "flags": flags, "format": fmt, "dropped": dropped}
    arr = _array_file(path, fmt)
    names = arr.names or [f"EEG{i + 1:03d}" for i in range(arr.n_channels)]
    keep, new, flags = _channel_plan(names)
    dropped = [n for i, n in enumerate(names) if i not in set(keep)]
    return {"sfreq": arr.sfreq, "channels": new, "n_times": arr.n_times, "flags": flags, "format": fmt,
            "dropped": dropped}


def load_recording(path: Path, description: str = ""):
    """Any supported file -> de-identified EEG-only RawArray in volts, standard names, 10-05 positions."""
    import mne

    from eegprivacy.data.synthetic import standard_montage

    fmt = file_format(path)
    _check_not_empty(path, fmt)
    annotations = None
    if fmt in ("edf", "fif"):
        try:
            src, eeg = _read_mne(path, fmt, preload=True)
        except Exception as err:  # noqa: BLE001 - MNE raises many types for a damaged file; say which file
            raise _unreadable(path, fmt, err) from err
        keep, names, _ = _channel_plan(eeg)
        data = src.get_data(picks=[eeg[i] for i in keep])
        sfreq = float(src.info["sfreq"])
        ann = src.annotations
        if len(ann):  # onsets re-expressed from the first sample: meas_date is not carried over
            onset = ann.onset - (src.first_time if ann.orig_time is not None else 0.0)
            annotations = mne.Annotations(onset, ann.duration, ann.description)
    else:
        arr = _array_file(path, fmt)
        raw_names = arr.names or [f"EEG{i + 1:03d}" for i in range(arr.n_channels)]
        keep, names, _ = _channel_plan(raw_names)
        data = _to_volts(arr.read(), arr.unit, path)[keep]
        sfreq = arr.sfreq
    # A fresh Info on purpose: EDF/FIF headers carry patient name, birthday and recording date
    # (subject_info, meas_date) and the Raw would keep the file path; none of that may travel on.
    info = mne.create_info(names, sfreq, "eeg")
    if description:
        info["description"] = description
    raw = mne.io.RawArray(data, info, verbose="error")
    if annotations is not None:
        raw.set_annotations(annotations)
    raw.set_montage(standard_montage(), on_missing="ignore", verbose="error")
    return raw


# ---------------------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------------------
class ClinicalFolder(EEGDataset):
    """Hospital EEG from a folder + metadata CSV; see the module docstring for the layout.

    ``subject`` is the CSV's ``patient_id``: a pseudonym or hospital identifier that is for internal
    grouping only and must never be released or logged; later stages (linkage, feature release) drop it.
    No report text enters the metadata table (reports can carry names); only ``n_reports`` and
    ``report_positive`` do. The version is the sha256 manifest over the recordings and the CSV.
    A relative ``folder`` is resolved against ``root`` when given, else against the working directory.
    ``line_freq``: the hospital's mains frequency in Hz (50 or 60), when you know it; a BIDS tree written from the
    folder (``to_bids``) records it as ``PowerLineFrequency``, and says ``n/a`` without it. A string is accepted
    (``--dataset-arg line_freq=50``).
    """

    name = "clinical_folder"
    synthetic = False
    description = "Clinical EEG folder (EDF/FIF/MAT/HDF5 + metadata.csv), labels from report keywords"
    label_levels = {"label": {"0": "no report names a seizure-related phrase",
                              "1": "a report names a seizure-related phrase (epilepsy, study A's keyword rule)"}}

    def __init__(self, folder, metadata_csv=None, positive_keywords: Sequence[str] = POSITIVE_KEYWORDS,
                 negative_keywords: Sequence[str] = NEGATIVE_KEYWORDS, root=None, line_freq: float | str | None = None):
        if line_freq is not None:
            try:
                hz = float(line_freq)
            except ValueError:
                hz = float("nan")
            if not (hz > 0 and np.isfinite(hz)):
                raise InvalidInputError(f"line_freq must be the mains frequency in Hz (e.g. 50 or 60), not {line_freq!r}")
            self.line_freq = hz
        folder = Path(folder).expanduser()
        if not folder.is_absolute() and root is not None:
            folder = Path(root).expanduser() / folder
        self.folder = folder.resolve()
        self.metadata_csv = Path(metadata_csv).expanduser().resolve() if metadata_csv else self.folder / "metadata.csv"
        self.positive_keywords = tuple(positive_keywords)
        self.negative_keywords = tuple(negative_keywords)
        if self.metadata_csv.exists():
            table = self._table()
            if "synthetic" in table and table["synthetic"].str.strip().str.lower().isin(_TRUE).any():
                self.synthetic = True
                self.description = "SYNTHETIC data in clinical-folder layout: " + self.description

    def _table(self) -> pd.DataFrame:
        return self._cached("_tab", self._read_table)

    def _read_table(self) -> pd.DataFrame:
        if not self.metadata_csv.exists():
            raise DataMissingError(f"metadata CSV {self.metadata_csv} not found; a clinical folder needs one with "
                                   f"columns {', '.join(REQUIRED_COLUMNS)}")
        table = pd.read_csv(self.metadata_csv, dtype=str, keep_default_na=False)
        table.columns = [c.strip() for c in table.columns]
        missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
        if missing:
            raise InvalidInputError(f"{self.metadata_csv} lacks column(s) {missing}; required: {list(REQUIRED_COLUMNS)}, "
                             f"found: {list(table.columns)}")
        for col in ("patient_id", "file"):
            empty = table.index[table[col].str.strip() == ""].tolist()
            if empty:
                raise InvalidInputError(f"{self.metadata_csv}: empty {col!r} on data row(s) {[i + 1 for i in empty]}")
        self._check_patient_ids(table)
        return table

    def _check_patient_ids(self, table: pd.DataFrame) -> None:
        """Refuse ids that differ only in case, spaces or separators ("P01", "p-01"): the linkage GlobalID makes
        them one patient while grouping here would make them two. The message names rows, not the ids."""
        spellings: dict[str, dict[str, list[int]]] = {}
        for row, pid in enumerate(table["patient_id"].str.strip(), start=1):
            spellings.setdefault(_canonical_id(pid), {}).setdefault(pid, []).append(row)
        clashes = [sorted(rows[0] for rows in variants.values()) for variants in spellings.values()
                   if len(variants) > 1]
        if clashes:
            listed = "; ".join("data rows " + ", ".join(map(str, rows)) for rows in clashes[:5])
            raise InvalidInputError(f"{self.metadata_csv}: {len(clashes)} patient id(s) are spelled in more than one way "
                             f"that differ only in case, spaces or separators ({listed}); the linkage GlobalID "
                             "would merge them. Use one spelling if they are the same patient, or distinct ids if not")

    def _files(self) -> list[str]:
        return list(dict.fromkeys(self._table()["file"].str.strip()))

    def _check_files(self) -> None:
        table = self._table()
        for i, rel in enumerate(table["file"].str.strip()):
            file_format(rel)
            if not (self.folder / rel).is_file():
                raise DataMissingError(f"recording {rel!r} listed in {self.metadata_csv} (data row {i + 1}) does "
                                       f"not exist under {self.folder}")

    def is_available(self) -> bool:
        if not self.metadata_csv.exists():
            return False
        try:
            self._check_files()
        except (DataMissingError, ValueError):
            return False
        return True

    def _recordings(self) -> list[Recording]:
        self._check_files()
        table = self._table().copy()
        table["file"] = table["file"].str.strip()
        table["patient_id"] = table["patient_id"].str.strip()
        table["_row"] = np.arange(1, len(table) + 1)
        labels = patient_labels(zip(table["patient_id"], table["report"]),
                                self.positive_keywords, self.negative_keywords)
        reported = table.groupby("patient_id")["report"].agg(lambda r: any(str(x).strip() for x in r))
        out, ids = [], {}
        truncated, dropped, unreported = [], {}, []
        for rel, rows in table.groupby("file", sort=False):
            patients = rows["patient_id"].unique()
            if len(patients) != 1:
                raise InvalidInputError(f"{self.metadata_csv}: file {rel!r} is listed for several patients")
            patient = str(patients[0])
            count = ids.setdefault(patient, [])
            if "recording" in rows and rows["recording"].iloc[0].strip():
                rec_id = rows["recording"].iloc[0].strip()
            else:
                rec_id = f"r{len(count) + 1:02d}"
            if rec_id in count:
                raise InvalidInputError(f"{self.metadata_csv}: recording id {rec_id!r} repeats for one patient")
            count.append(rec_id)
            csv_rows = ", ".join(map(str, rows["_row"]))
            header = read_header(self.folder / rel)
            synthetic = "synthetic" in rows and rows["synthetic"].str.strip().str.lower().isin(_TRUE).any()
            flags = (["synthetic"] if synthetic else []) + header["flags"]
            if not reported[patient]:
                flags.append("no_report")
                unreported.append(csv_rows)
            if "truncated" in header["flags"]:
                truncated.append(csv_rows)
            for name in header["dropped"]:
                dropped.setdefault(name, []).append(csv_rows)
            label = labels[patient]
            meta = {
                "condition": "epilepsy" if label else "non_epilepsy", "label": label,
                "sfreq": header["sfreq"], "n_channels": len(header["channels"]),
                "channels": ",".join(header["channels"]), "duration_s": header["n_times"] / header["sfreq"],
                "flags": ";".join(flags), "hospital": rows["hospital"].iloc[0].strip(),
                "n_reports": len(rows),
                "report_positive": int(any(report_is_positive(r, self.positive_keywords, self.negative_keywords)
                                           for r in rows["report"])),
                "format": header["format"],
                "locator": f"{self.name} recording at {self.metadata_csv.name} data row(s) {csv_rows}",
            }
            if synthetic:
                meta["synthetic"] = True
            for col in PASSTHROUGH_COLUMNS:
                if col in rows:
                    value = rows[col].iloc[0].strip()
                    meta[col] = pd.to_numeric(value, errors="coerce") if col == "age" and value else (value or None)
            loader = partial(load_recording, self.folder / rel, self.description)
            out.append(Recording(self.name, patient, rec_id, loader, meta, source=str(self.folder / rel)))
        self._warn_recoveries(truncated, dropped, unreported)
        return out

    def _warn_recoveries(self, truncated: list[str], dropped: dict[str, list[str]], unreported: list[str]) -> None:
        """One warning per kind of recovered defect for the whole folder, naming metadata.csv rows (not ids)."""
        csv = self.metadata_csv.name
        if truncated:
            warnings.warn(f"{self.name}: {len(truncated)} EDF/BDF file(s) hold fewer records than their header "
                          f"declares ({csv} data rows {'; '.join(truncated)}); reading the complete records and "
                          "flagging them 'truncated'", DataQualityWarning, stacklevel=5)
        if dropped:
            names = sorted(dropped)
            n_recordings = len({r for rows in dropped.values() for r in rows})
            warnings.warn(f"{self.name}: channels that are not 10-05 EEG positions were left out "
                          f"({', '.join(names[:12])}{' …' if len(names) > 12 else ''}; in {n_recordings} "
                          "recording(s)); the recordings are flagged 'dropped_nonstandard_channels'. Rename a "
                          "channel to its 10-05 label to keep it", DataQualityWarning, stacklevel=5)
        if unreported:
            warnings.warn(f"{self.name}: {len(unreported)} recording(s) belong to patients with no report text "
                          f"({csv} data rows {'; '.join(unreported)}); the keyword rule reads them as label 0 "
                          "(negative) and they are flagged 'no_report'. Add the reports, or remove the rows, if "
                          "they should not count as negative", DataQualityWarning, stacklevel=5)

    def _version(self) -> str:
        self._check_files()
        files = self._files()
        lines = [(rel, size, sha) for rel, (size, sha) in hash_files(self.folder, files).items()]
        csv = self.metadata_csv
        try:
            csv_name = str(csv.relative_to(self.folder))
        except ValueError:
            csv_name = "<metadata>/" + csv.name
        lines.append((csv_name, csv.stat().st_size, file_sha256(csv)))
        return manifest_version(lines)


# ---------------------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------------------
_EXT = {"edf": ".edf", "fif": "_raw.fif", "mat": ".mat", "h5": ".h5"}


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(part)) or "_"


def write_recording(raw, path: Path, fmt: str) -> None:
    """One Raw -> one file in the given format (volts in MAT/HDF5, with unit and channel names)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "edf":
        import mne

        mne.export.export_raw(path, raw, fmt="edf", physical_range="channelwise", overwrite=True,
                              verbose="error")
    elif fmt == "fif":
        raw.save(path, overwrite=True, verbose="error")
    elif fmt == "mat":
        from scipy.io import savemat

        savemat(path, {"data": raw.get_data(), "fs": float(raw.info["sfreq"]),
                       "channels": np.array(raw.ch_names, dtype=object), "unit": "V"}, do_compression=True)
    elif fmt == "h5":
        import h5py

        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=raw.get_data().astype(np.float32), compression="gzip")
            f.create_dataset("fs", data=float(raw.info["sfreq"]))
            f.create_dataset("channels", data=np.array(raw.ch_names, dtype=object), dtype=h5py.string_dtype())
            f["data"].attrs["unit"] = "V"
    else:
        raise InvalidInputError(f"unknown format {fmt!r}; use one of {sorted(_EXT)}")


def write_clinical_folder(dataset: EEGDataset, folder, fmt_cycle: Sequence[str] = ("edf", "fif", "mat", "h5"),
                          subjects: Sequence[str] | None = None,
                          report: Callable[[Recording], str] | None = None) -> Path:
    """Write a dataset's recordings and ``metadata.csv`` in the clinical-folder layout; returns the CSV path.

    Formats rotate through ``fmt_cycle`` recording by recording. Reports come from ``report(rec)``, else
    the dataset's ``report_text`` (synthetic clinical cohort), else are empty (every patient then reads back
    as label 0, flagged ``no_report``). MAT/HDF5 drop annotations; EDF quantises to 16 bits per channel range.
    Synthetic datasets get a ``synthetic`` column so the folder still says what it is.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fmts = [f.lower() for f in fmt_cycle]
    for fmt in fmts:
        if fmt not in _EXT:
            raise InvalidInputError(f"unknown format {fmt!r}; use one of {sorted(_EXT)}")
    report = report or getattr(dataset, "report_text", None) or (lambda rec: "")
    rows = []
    for i, rec in enumerate(dataset.recordings(subjects)):
        fmt = fmts[i % len(fmts)]
        rel = f"{_safe(rec.subject)}/{_safe(rec.recording)}{_EXT[fmt]}"
        write_recording(rec.load(), folder / rel, fmt)
        row = {"patient_id": rec.subject, "hospital": rec.meta.get("hospital") or dataset.name, "file": rel,
               "report": report(rec), "recording": rec.recording}
        for col in PASSTHROUGH_COLUMNS:
            if col in rec.meta:
                row[col] = rec.meta[col]
        if dataset.synthetic:
            row["synthetic"] = "true"
        rows.append(row)
    csv = folder / "metadata.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    return csv


__all__ = [
    "CHANNEL_KEYS",
    "DATA_KEYS",
    "REQUIRED_COLUMNS",
    "SFREQ_KEYS",
    "UNIT_KEYS",
    "ClinicalFolder",
    "RecordingReadError",
    "file_format",
    "load_recording",
    "normalise_channel_name",
    "read_header",
    "write_clinical_folder",
    "write_recording",
]
