"""Shared machinery of the real public datasets: locating files under the data root, checking them against
published checksums before they are read, the version hash, EDF headers, and errors that say how to get data.

Every real loader goes through :class:`LocalDataset`, so "a missing or mismatching file is a clear error that
names the file and how to obtain it" is implemented exactly once.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

import numpy as np

from eegprivacy.data.base import DataQualityWarning, EEGDataset
from eegprivacy.data.manifest import (
    ChecksumMismatchError,
    DataMissingError,
    file_sha256,
    hash_files,
    load_manifest,
    manifest_version,
)
from eegprivacy.errors import InputDataError
from eegprivacy.paths import DATA_ENV, data_root


@dataclass(frozen=True)
class Expected:
    """Published size and sha256 of one file; ``None`` where the source publishes none."""

    size: int | None
    sha256: str | None


def manifest_expected(name: str, keep=lambda rel: True) -> dict[str, Expected]:
    """The shipped manifest ``manifests/<name>.tsv`` as ``{relative path: Expected}``."""
    return {e.path: Expected(e.size, e.sha256) for e in load_manifest(name) if keep(e.path)}


def present_or_all(base: Path, rels: Iterable[str]) -> list[str]:
    """Of ``rels`` (relative to ``base``), those present; all of them when none is.

    The rule of a loader that reads whatever part of a public file list a copy holds: a partial copy is normal,
    but an empty one is a setup error, and reading all of the list then fails on the first missing file with a
    :class:`DataMissingError` naming it, instead of listing an empty dataset.
    """
    rels = list(rels)
    return [rel for rel in rels if (base / rel).is_file()] or rels


def presence(dataset) -> dict[str, Any]:
    """How much of its listed recordings a dataset's copy holds, for datasets that read a partial copy and name
    the rest (they have ``absent()``): ``n_recordings_listed``, ``n_recordings_present`` and the ``absent`` file
    names (public dataset file names, not pseudonyms). Empty for every other dataset. Reads the listing."""
    if not callable(getattr(dataset, "absent", None)):
        return {}
    absent = sorted(dataset.absent())
    present = len(dataset.recordings())
    return {"n_recordings_listed": present + len(absent), "n_recordings_present": present, "absent": absent}


def recording_meta(condition: str, label: int, sfreq: float, channels: Iterable[str], duration_s: float,
                   flags: Iterable[str] = (), **extra: Any) -> dict[str, Any]:
    """The metadata every recording carries, in the column formats of ``METADATA_COLUMNS``."""
    channels = list(channels)
    return {
        "condition": str(condition),
        "label": int(label),
        "sfreq": float(sfreq),
        "n_channels": len(channels),
        "channels": ",".join(channels),
        "duration_s": float(duration_s),
        "flags": ";".join(flags),
        **extra,
    }


_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warn about a known data defect once per process, not once per load (sweeps load a file many times)."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def array_raw(data_uv: np.ndarray, ch_names: list[str], sfreq: float):
    """RawArray of EEG channels from samples in microvolts (stored in volts, as MNE expects)."""
    import mne

    data = np.atleast_2d(np.asarray(data_uv, dtype=np.float64)) * 1e-6
    info = mne.create_info(list(ch_names), float(sfreq), ch_types="eeg")
    return mne.io.RawArray(data, info, verbose="error")


# -- EDF ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EdfHeader:
    """The few EDF header fields needed for metadata and for telling a truncated file from a corrupted one."""

    labels: tuple[str, ...]
    samples_per_record: tuple[int, ...]
    n_records: int  # as declared in the header (-1 = unknown)
    record_s: float
    header_bytes: int
    file_bytes: int
    bytes_per_sample: int = 2  # 2 in EDF, 3 in BDF

    @property
    def record_bytes(self) -> int:
        return self.bytes_per_sample * sum(self.samples_per_record)

    @property
    def complete_records(self) -> int:
        return max(0, (self.file_bytes - self.header_bytes) // self.record_bytes)

    @property
    def truncated(self) -> bool:
        """Shorter than the header promises: the tail of the last record(s) is missing."""
        return self.n_records >= 0 and self.file_bytes < self.header_bytes + self.n_records * self.record_bytes

    @property
    def records_present(self) -> int:
        return self.complete_records if self.n_records < 0 else min(self.n_records, self.complete_records)

    @property
    def duration_s(self) -> float:
        return self.records_present * self.record_s

    def sfreq(self, label: str) -> float:
        return self.samples_per_record[self.labels.index(label)] / self.record_s


class EdfHeaderError(InputDataError, ValueError):
    """The file is not a readable EDF/BDF: empty, cut inside its header, or with fields that are not numbers."""


def read_edf_header(path: Path, bytes_per_sample: int = 2) -> EdfHeader:
    """Parse the fixed-width EDF header only (a few hundred bytes), never the signal.

    Anything unreadable raises :class:`EdfHeaderError` naming the file, not a bare ``int()`` error from deep
    inside, so a zero-byte or corrupted file is reported as what it is. ``bytes_per_sample`` is 3 for BDF.
    """
    path = Path(path)
    file_bytes = path.stat().st_size
    if file_bytes == 0:
        raise EdfHeaderError(f"{path} is empty (0 bytes); copy or export the recording again")

    def number(raw: bytes, what: str, kind=int):
        text = raw.decode("latin-1").strip()
        try:
            return kind(text)
        except ValueError:
            raise EdfHeaderError(f"{path}: EDF header field '{what}' is {text!r}, not a number; the header is "
                                 "corrupted — copy or export the recording again") from None

    with open(path, "rb") as fh:
        fixed = fh.read(256)
        if len(fixed) < 256:
            raise EdfHeaderError(f"{path}: {file_bytes} bytes, shorter than the 256-byte EDF header; the file is "
                                 "cut or not an EDF — copy or export the recording again")
        n_signals = number(fixed[252:256], "number of signals")
        header_bytes = number(fixed[184:192], "header bytes")
        if n_signals < 1 or header_bytes != 256 * (n_signals + 1):
            raise EdfHeaderError(f"{path}: EDF header declares {n_signals} signals and {header_bytes} header bytes "
                                 f"(expected 256 x (signals + 1)); the header is corrupted — copy or export the "
                                 "recording again")
        per_signal = fh.read(256 * n_signals)
    if len(per_signal) < 256 * n_signals:
        raise EdfHeaderError(f"{path}: the file ends inside its EDF header ({file_bytes} bytes, header needs "
                             f"{header_bytes}); copy or export the recording again")

    def field(offset: int, width: int) -> list[str]:
        start = offset * n_signals
        return [per_signal[start + i * width:start + (i + 1) * width].decode("latin-1").strip()
                for i in range(n_signals)]

    # per-signal fields, each for all signals in turn: label 16, transducer 80, dimension 8, phys min/max 8+8,
    # digital min/max 8+8, prefiltering 80, samples per record 8, reserved 32
    labels = field(0, 16)
    samples = [number(s.encode("latin-1"), "samples per record") for s in field(216, 8)]
    record_s = number(fixed[244:252], "record duration", float)
    if any(n < 1 for n in samples) or not record_s > 0:
        raise EdfHeaderError(f"{path}: EDF header declares records of {record_s} s with {samples[:4]}... samples; "
                             "the header is corrupted — copy or export the recording again")
    return EdfHeader(
        labels=tuple(labels),
        samples_per_record=tuple(samples),
        n_records=number(fixed[236:244], "number of records"),
        record_s=record_s,
        header_bytes=header_bytes,
        file_bytes=file_bytes,
        bytes_per_sample=bytes_per_sample,
    )


def read_edf(path: Path, exclude: Iterable[str] = ()):
    """Lazy ``mne.io.read_raw_edf`` (signal read on access). MNE's own warnings are silenced: the file was
    verified first, and the known defects (truncation) are reported once by the loader."""
    import mne

    return mne.io.read_raw_edf(path, preload=False, exclude=list(exclude), verbose="error")


# -- the dataset base ---------------------------------------------------------------------------------------


class LocalDataset(EEGDataset):
    """A real dataset read from ``<data root>/<folder>/``: verification, availability and version live here."""

    folder: str = ""  # the dataset's folder inside the data root, as the public source lays it out
    source: str = ""  # where a user gets the data; named in every missing-file error
    download_url: str = ""  # prefix for single-file downloads (``download_url + relative path``), if any
    can_download: bool = False  # whether allow_download=True can fetch missing files

    def __init__(self, root: str | Path | None = None, allow_download: bool = False):
        self.root = Path(root).expanduser().resolve() if root is not None else data_root()
        self.allow_download = bool(allow_download)

    @property
    def base(self) -> Path:
        return self.root / self.folder

    # -- to implement ------------------------------------------------------------------------------------
    @abstractmethod
    def _expected(self) -> dict[str, Expected]:
        """Every file this instance reads, relative to :attr:`base`, with its published size and sha256."""

    def _accept_mismatch(self, rel: str, path: Path) -> bool:
        """Hook for a known, explained defect (eegmmidb's truncated runs); the default accepts nothing."""
        return False

    # -- shared ------------------------------------------------------------------------------------------
    @property
    def expected(self) -> dict[str, Expected]:
        return self._cached("_exp", self._expected)

    def is_available(self) -> bool:
        try:
            return all((self.base / rel).is_file() for rel in self.expected)
        except DataMissingError:
            return False

    def missing_error(self, rel: str, hint: str = "") -> DataMissingError:
        return DataMissingError(
            f"{self.name}: file {rel!r} is missing; expected it at {self.base / rel}. "
            f"The data root comes from the environment variable {DATA_ENV} (now resolving to {self.root}); "
            f"point it at the folder that holds '{self.folder}/'. Obtain the data from {self.source}"
            + (f" ({hint})" if hint else "")
            + (". Or pass allow_download=True to fetch it." if self.can_download and not self.allow_download
               else ".")
        )

    def _download(self, rel: str) -> None:
        """Fetch one file from the public source, checked against its published sha256 by pooch."""
        if not self.download_url:
            raise self.missing_error(rel, "this source offers no single-file download")
        import pooch

        sha = self.expected[rel].sha256
        target = self.base / rel
        pooch.retrieve(url=self.download_url + quote(rel), known_hash=f"sha256:{sha}" if sha else None,
                       fname=target.name, path=target.parent, progressbar=False)

    def require(self, rel: str) -> Path:
        """The local path of a file: present, downloaded when allowed, or a :class:`DataMissingError`."""
        path = self.base / rel
        if not path.is_file() and self.allow_download:
            self._download(rel)
        if not path.is_file():
            raise self.missing_error(rel)
        return path

    def verify(self, rel: str) -> Path:
        """Check one file's size and sha256 against the published ones before reading it."""
        path = self.require(rel)
        exp = self.expected.get(rel, Expected(None, None))
        size = path.stat().st_size
        problem = None
        if size == 0:
            problem = "the file is empty (0 bytes)"
        elif exp.size is not None and size != exp.size:
            problem = f"size {size} bytes, published {exp.size}"
        elif exp.sha256 is not None:
            sha = file_sha256(path)
            if sha != exp.sha256:
                problem = f"sha256 {sha}, published {exp.sha256}"
        if problem and not self._accept_mismatch(rel, path):
            raise ChecksumMismatchError(
                f"{self.name}: {path} differs from the published file ({problem}). Replace it with a fresh "
                f"copy from {self.source}."
            )
        return path

    def edf_header(self, rel: str) -> EdfHeader:
        """A listed EDF's header. An unreadable one (empty, corrupted) is first checked against the published
        checksum, so the error says the file differs from the published one and where to get a fresh copy."""
        path = self.require(rel)
        try:
            return read_edf_header(path)
        except EdfHeaderError:
            self.verify(rel)  # raises ChecksumMismatchError for a damaged copy of a published file
            raise

    def _version(self) -> str:
        """sha256 over (path, size, sha256) of the bytes actually on disk, so a changed byte changes it."""
        rels = sorted(self.expected)
        for rel in rels:
            self.require(rel)
        hashed = hash_files(self.base, rels)
        return manifest_version([(rel, size, sha) for rel, (size, sha) in hashed.items()])
