"""One small interface for every dataset, real or synthetic (MOABB-style: the dataset knows files, not tasks).

A dataset lists subjects, hands out lazy recordings (an ``mne.io.Raw`` is only read when asked for), describes
itself as a tidy metadata table, and has a version: the sha256 over the manifest of the files it reads (or over
the generating config, for synthetic cohorts).
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd

# Columns every metadata table has, in this order; datasets may append their own (age, sex, hospital, ...).
METADATA_COLUMNS = [
    "dataset",
    "subject",
    "recording",
    "condition",
    "label",
    "sfreq",
    "n_channels",
    "channels",
    "duration_s",
    "flags",
    "synthetic",
]


class DataQualityWarning(UserWarning):
    """A defect in the input that was recovered from (channel dropped, recording skipped, file truncated): the
    run goes on, the affected rows carry a flag, and this warning says what was done."""


@dataclass(frozen=True)
class Recording:
    """A lazily loaded recording: metadata now, signal on ``load()``."""

    dataset: str
    subject: str
    recording: str
    loader: Callable[[], Any] = field(repr=False, compare=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)  # the file it is read from, so errors can name it

    def load(self):
        """Return the ``mne.io.Raw`` (EEG channels only, volts)."""
        return self.loader()

    def describe(self) -> str:
        """How errors name the recording: dataset, subject/recording and, where known, the file."""
        return f"{self.dataset} recording {self.subject}/{self.recording}" + (f" ({self.source})" if self.source
                                                                              else "")

    def locate(self) -> str:
        """How warnings name the recording: an identifier-free locator where the dataset's subject ids are private
        (a clinical folder's ``metadata.csv`` row, in ``meta["locator"]``), else :meth:`describe`. Warnings reach
        logs; errors stop the run and must name the file to fix."""
        return str(self.meta.get("locator") or self.describe())


@dataclass(frozen=True)
class LeftOut:
    """A recording an analysis left out: its subject, its file (or, without one, how errors describe it) and why, in
    one line that names the file; ``unusable``: it could not be used at all (unreadable, NaN samples: left out only
    when the analysis is told to skip such recordings, else an error), not merely too short for one window.
    Private: it names subjects and files."""

    subject: str
    source: str
    reason: str
    unusable: bool = True


class EEGDataset(ABC):
    """Base class: subclasses implement ``_recordings`` and ``_version``; the rest is shared."""

    name: str = ""
    synthetic: bool = False
    description: str = ""
    #: Recordings the listing itself left out (:class:`LeftOut`), for a dataset told to skip files it cannot open
    #: (``BIDSDataset(skip_unreadable=True)``); empty for the others.
    left_out: list[LeftOut] | tuple = ()
    #: Mains (power-line) frequency of the recording site in Hz: 50 in Europe and most of Asia, 60 in the Americas.
    #: BIDS asks for it (``PowerLineFrequency`` in every ``*_eeg.json``) because it tells a reader where line
    #: noise sits; :func:`~eegprivacy.data.bids.to_bids` writes it. ``None`` when the site is not known: the tree
    #: then says ``n/a`` (BIDS allows it) rather than a guess.
    line_freq: float | None = None
    #: What each value of a label column means, keyed by column, e.g. ``{"label": {"0": "healthy control",
    #: "1": "schizophrenia"}}`` (values as strings, as in ``participants.tsv``). ``to_bids`` writes it as that
    #: column's ``Levels`` in ``participants.json``, so the tree says what 0 and 1 stand for; a value not listed
    #: gets a generic text. Set only where the source documents the meaning.
    label_levels: Mapping[str, Mapping[str, str]] = {}

    # -- to implement -------------------------------------------------------------------------------------
    @abstractmethod
    def _recordings(self) -> list[Recording]:
        """All recordings, with ``meta`` holding at least the METADATA_COLUMNS not derivable from the Recording."""

    @abstractmethod
    def _version(self) -> str:
        """sha256 of the file manifest (real data) or of the generating config (synthetic)."""

    def is_available(self) -> bool:
        """Whether everything needed to load the dataset is on this machine."""
        return True

    # -- shared ---------------------------------------------------------------------------------------------
    def recordings(self, subjects: list[str] | None = None) -> list[Recording]:
        recs = self._cached("_recs", self._recordings)
        if subjects is None:
            return list(recs)
        wanted = set(map(str, subjects))
        return [r for r in recs if r.subject in wanted]

    def subjects(self) -> list[str]:
        seen: dict[str, None] = {}
        for rec in self.recordings():
            seen.setdefault(rec.subject, None)
        return list(seen)

    def metadata(self) -> pd.DataFrame:
        """Tidy table: one row per recording, METADATA_COLUMNS first."""
        rows = []
        for rec in self.recordings():
            row = {"dataset": self.name, "subject": rec.subject, "recording": rec.recording,
                   "synthetic": self.synthetic}
            row.update(rec.meta)
            rows.append(row)
        frame = pd.DataFrame(rows)
        for col in METADATA_COLUMNS:
            if col not in frame:
                frame[col] = pd.NA
        extra = [c for c in frame.columns if c not in METADATA_COLUMNS]
        return frame[METADATA_COLUMNS + extra]

    def version(self) -> str:
        return self._cached("_ver", self._version)

    def label_names(self) -> dict[str, str]:
        """What the 0/1 values of ``meta["label"]`` stand for, in the dataset's words (``label_levels["label"]``,
        e.g. ``{"0": "healthy control", "1": "schizophrenia"}``); {} where it does not say."""
        return dict(self.label_levels.get("label", {}))

    def summary(self) -> dict:
        """What ``eegprivacy datasets`` prints: presence, version, subject count."""
        available = self.is_available()
        out = {"dataset": self.name, "synthetic": self.synthetic, "present": available,
               "version": None, "subjects": None, "recordings": None, "description": self.description}
        if available:
            out.update(version=self.version(), subjects=len(self.subjects()), recordings=len(self.recordings()))
        return out

    def _cached(self, attr: str, compute: Callable[[], Any]) -> Any:
        if not hasattr(self, attr):
            setattr(self, attr, compute())
        return getattr(self, attr)


def config_version(config: Mapping[str, Any]) -> str:
    """Version of a synthetic cohort: sha256 over its canonical JSON config (seed included)."""
    blob = json.dumps(dict(config), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()
