"""Trials for study B: a *paradigm* turns any dataset into per-subject trials (MOABB-style: datasets know files,
paradigms know tasks).

Two paradigms, one output (:class:`Trials`: X ``(n_trials, n_channels, n_samples)`` float32 volts, y int, and a
metadata frame with ``subject, recording, trial, onset_s, event, label``):

- :class:`RecordingLabelParadigm` — the label belongs to the whole recording (eegmat: rest 0 vs mental
  arithmetic 1; the synthetic rest/task cohort). Each recording is cut into consecutive non-overlapping
  ``epoch_s`` epochs; only subjects with recordings of both labels are kept, so every client can fit a CSP.
- :class:`LeftRightImagery` — labels come from annotations: ``left_hand``/``right_hand`` (BNCI2014-001 through
  MOABB, the synthetic motor-imagery cohort) or eegmmidb's ``T1``/``T2``, which mean left/right fist *only* in
  runs 3, 4, 7, 8, 11, 12 (both fists/both feet in the others), so on eegmmidb only the imagery runs 4, 8, 12
  are read. One epoch of ``epoch_s`` from each cue onset (+``tmin``).

Signal path per recording: the channels every selected recording has (so all trials share one average
reference) → the project's preprocessing (:mod:`eegprivacy.signal.preprocess`: band-pass, notch, average
reference, at the recording's own rate) → optional resampling (polyphase FIR, which low-passes below the new
Nyquist first) → epochs. Resampling to 128 Hz keeps 23 eegmat clients × 60 epochs at ~27 MB and makes EEGNet's
default kernels (64 taps = 0.5 s at 128 Hz) mean what they were designed for.

Synthetic cohorts stay synthetic: :attr:`Trials.synthetic` and :meth:`Trials.tags` carry it to every run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from eegprivacy.data.base import DataQualityWarning
from eegprivacy.signal.preprocess import PreprocessConfig, RecordingTooShortError, preprocess_raw

__all__ = [
    "Trials",
    "RecordingLabelParadigm",
    "LeftRightImagery",
    "EEGMMIDB_CHANNELS",
    "SYNTHETIC_MI_SHAPES",
    "EEGMMIDB_IMAGERY_RUNS",
]

TRIAL_COLUMNS = ["subject", "recording", "trial", "onset_s", "event", "label"]
EEGMMIDB_IMAGERY_RUNS = (4, 8, 12)  # left/right fist imagery; T1 = left, T2 = right
# eegmmidb's 64 channels as ``mne.datasets.eegbci.standardize`` names them, in file order (all 10-05 positions),
# so a synthetic cohort can take MI2's montage.
EEGMMIDB_CHANNELS = (
    "FC5", "FC3", "FC1", "FCz", "FC2", "FC4", "FC6", "C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP5", "CP3",
    "CP1", "CPz", "CP2", "CP4", "CP6", "Fp1", "Fpz", "Fp2", "AF7", "AF3", "AFz", "AF4", "AF8", "F7", "F5", "F3",
    "F1", "Fz", "F2", "F4", "F6", "F8", "FT7", "FT8", "T7", "T8", "T9", "T10", "TP7", "TP8", "P7", "P5", "P3",
    "P1", "Pz", "P2", "P4", "P6", "P8", "PO7", "PO3", "POz", "PO4", "PO8", "O1", "Oz", "O2", "Iz",
)
# ``get_dataset("synthetic_mi", **SYNTHETIC_MI_SHAPES[name])`` gives a SYNTHETIC cohort at the paper's shapes.
# MI1 = BCI IV 2a: 9 subjects x 22 channels at 250 Hz, 144 left/right trials (6 runs x 12 per class, one session),
# 4-s trials = 1000 samples. MI2 = eegmmidb: 109 subjects x 64 channels at 160 Hz, runs 4/8/12 with ~7-8 cues per
# class each (the paper's "~250 trials" per subject is more than eegmmidb holds; this follows the real runs), and
# 750-sample epochs = 4.6875 s (trial_s is that long so whole epochs fit).
SYNTHETIC_MI_SHAPES: dict[str, dict] = {
    "MI1": {"n_subjects": 9, "sfreq": 250.0, "n_sessions": 1, "n_runs": 6, "n_trials_per_class": 12,
            "trial_s": 4.0},  # the cohort's default channels are BCI IV 2a's 22
    "MI2": {"n_subjects": 109, "channels": EEGMMIDB_CHANNELS, "sfreq": 160.0, "n_sessions": 1, "n_runs": 3,
            "n_trials_per_class": 8, "trial_s": 750 / 160.0},
}


@dataclass(frozen=True)
class Trials:
    """Trials of one dataset under one paradigm. Unpacks MOABB-style: ``X, y, metadata = trials``."""

    X: np.ndarray
    y: np.ndarray
    metadata: pd.DataFrame
    sfreq: float
    channels: tuple[str, ...]
    dataset: str
    synthetic: bool
    paradigm: Mapping = field(default_factory=dict)

    def __iter__(self) -> Iterator:
        return iter((self.X, self.y, self.metadata))

    def __len__(self) -> int:
        return int(self.y.size)

    def subjects(self) -> list[str]:
        return list(dict.fromkeys(self.metadata["subject"]))

    def select(self, mask) -> Trials:
        """The trials where `mask` (boolean or integer index) selects, metadata index reset."""
        idx = np.arange(len(self))[np.asarray(mask)]
        return Trials(self.X[idx], self.y[idx], self.metadata.iloc[idx].reset_index(drop=True), self.sfreq,
                      self.channels, self.dataset, self.synthetic, self.paradigm)

    def subject(self, subject: str) -> Trials:
        return self.select((self.metadata["subject"] == subject).to_numpy())

    def by_subject(self) -> dict[str, Trials]:
        """One entry per subject, in dataset order: the per-client data of a per-subject federation."""
        return {s: self.subject(s) for s in self.subjects()}

    def tags(self) -> dict[str, str]:
        return {"dataset": self.dataset, "synthetic": str(bool(self.synthetic)).lower()}


@dataclass(frozen=True)
class _Paradigm:
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    resample: float | None = 128.0  # Hz after preprocessing; None keeps the recording's own rate
    epoch_s: float = 4.0
    name = ""  # class attribute (no annotation): not a field

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epoch_s) and self.epoch_s > 0):
            raise ValueError(f"epoch_s must be a positive number of seconds, got {self.epoch_s!r}")
        if self.resample is not None and not (math.isfinite(self.resample) and self.resample > 0):
            raise ValueError(f"resample must be a positive rate in Hz or None, got {self.resample!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["paradigm"] = self.name
        return out

    # -- what subclasses decide -----------------------------------------------------------------------------
    def _select(self, dataset, recordings: list) -> list:
        return recordings

    def _events(self, rec, raw) -> list[tuple[float, int, str]]:
        """(onset in s from the first sample, label, event name) of each trial, before length checks."""
        raise NotImplementedError

    def _finish(self, X, y, meta) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
        return X, y, meta

    # -- shared ---------------------------------------------------------------------------------------------
    def get_data(self, dataset, subjects: Sequence[str] | None = None) -> Trials:
        """Trials of `dataset` (all subjects the paradigm can use, or those in `subjects`)."""
        recordings = self._select(dataset, dataset.recordings(None if subjects is None else list(subjects)))
        if not recordings:
            raise ValueError(f"{dataset.name}: no recording fits the {self.name} paradigm"
                             + (f" for subjects {list(subjects)}" if subjects is not None else ""))
        channels = self._channels(dataset, recordings)
        xs, ys, metas, rates = [], [], [], set()
        for rec in recordings:
            out = self._recording(rec, channels)
            if out is None:
                continue
            X, y, meta, sfreq = out
            rates.add(sfreq)
            xs.append(X)
            ys.append(y)
            metas.append(meta)
        if not xs:
            raise ValueError(f"{dataset.name}: no trial survived (recordings too short for the filter or for one "
                             f"{self.epoch_s:g}-s epoch)")
        if len(rates) > 1:
            raise ValueError(f"{dataset.name}: recordings at several rates {sorted(rates)} Hz cannot be stacked into "
                             "one trial array; set resample to a common rate")
        X, y = np.concatenate(xs), np.concatenate(ys)
        meta = pd.concat(metas, ignore_index=True)
        X, y, meta = self._finish(X, y, meta)
        return Trials(X, y, meta.reset_index(drop=True), rates.pop(), tuple(channels), dataset.name,
                      bool(getattr(dataset, "synthetic", False)), self.to_dict())

    def _channels(self, dataset, recordings) -> list[str]:
        """Channels every selected recording has, in the first one's order (metadata first, data if absent)."""
        sets = []
        for rec in recordings:
            listed = rec.meta.get("channels")
            if isinstance(listed, str) and listed:
                sets.append(listed.split(","))
            else:
                raw = rec.load()
                sets.append([raw.ch_names[i] for i in _eeg_picks(raw)])
        common = set(sets[0]).intersection(*sets[1:])
        kept = [c for c in sets[0] if c in common]
        if not kept:
            raise ValueError(f"{dataset.name}: no EEG channel is present in every selected recording")
        dropped = sorted(set().union(*sets) - common)
        if dropped:
            warnings.warn(f"{dataset.name}: channel(s) {', '.join(dropped[:12])} are missing from some recordings and "
                          f"are left out of all of them ({len(kept)} kept), so every trial shares one average "
                          "reference", DataQualityWarning, stacklevel=3)
        return kept

    def _recording(self, rec, channels):
        import mne

        raw = rec.load()
        eeg = [raw.ch_names[i] for i in _eeg_picks(raw)]
        if eeg != list(channels):
            raw = raw.copy().pick(list(channels))
        sfreq = float(raw.info["sfreq"])
        events = self._events(rec, raw)
        try:
            data, _ = preprocess_raw(raw, self.preprocess)
        except RecordingTooShortError as err:
            warnings.warn(f"{rec.locate()} skipped: {err}", DataQualityWarning, stacklevel=4)
            return None
        if self.resample is not None and self.resample != sfreq:
            data = mne.filter.resample(data, up=float(self.resample), down=sfreq, method="polyphase",
                                       verbose="error")
            sfreq = float(self.resample)
        n = int(round(self.epoch_s * sfreq))
        starts = [(int(round(onset * sfreq)), label, event, k) for k, (onset, label, event) in enumerate(events)]
        fit = [s for s in starts if 0 <= s[0] and s[0] + n <= data.shape[1]]
        if len(fit) < len(starts):
            warnings.warn(f"{rec.locate()}: {len(starts) - len(fit)} trial(s) do not fit a whole {self.epoch_s:g}-s "
                          "epoch inside the recording and are left out", DataQualityWarning, stacklevel=4)
        if not fit:
            return None
        X = np.stack([data[:, s:s + n] for s, *_ in fit]).astype(np.float32)
        y = np.array([label for _, label, _, _ in fit], dtype=np.int64)
        meta = pd.DataFrame({"subject": rec.subject, "recording": rec.recording,
                             "trial": [k for *_, k in fit], "onset_s": [s / sfreq for s, *_ in fit],
                             "event": [e for _, _, e, _ in fit], "label": y})
        return X, y, meta[TRIAL_COLUMNS], sfreq


def _eeg_picks(raw):
    import mne

    return mne.pick_types(raw.info, eeg=True, exclude=())


@dataclass(frozen=True)
class RecordingLabelParadigm(_Paradigm):
    """Whole-recording labels (eegmat rest 0 / arithmetic 1) cut into consecutive non-overlapping epochs.

    `balance`: eegmat holds 3 min of rest and 1 min of arithmetic per subject (45 vs 15 epochs); with
    ``balance=True`` each subject keeps as many epochs of its majority class as of its minority, chosen evenly
    spaced over the recording (deterministic, and still spanning the whole recording), so chance is 50 %.
    """

    balance: bool = False
    name = "recording_label"

    def _select(self, dataset, recordings):
        labelled = [r for r in recordings if _binary(r.meta.get("label"))]
        labels: dict[str, set] = {}
        for r in labelled:
            labels.setdefault(r.subject, set()).add(int(r.meta["label"]))
        both = {s for s, ls in labels.items() if ls == {0, 1}}
        return [r for r in labelled if r.subject in both]

    def _events(self, rec, raw):
        duration = raw.n_times / float(raw.info["sfreq"])
        n = int(math.floor(duration / self.epoch_s + 1e-9))
        event = str(rec.meta.get("condition") or rec.meta["label"])
        return [(k * self.epoch_s, int(rec.meta["label"]), event) for k in range(n)]

    def _finish(self, X, y, meta):
        if not self.balance:
            return X, y, meta
        keep = []
        for subject in dict.fromkeys(meta["subject"]):
            rows = np.flatnonzero((meta["subject"] == subject).to_numpy())
            per_class = [rows[y[rows] == c] for c in (0, 1)]
            k = min(len(p) for p in per_class)
            for p in per_class:
                keep.extend(p[np.round(np.linspace(0, len(p) - 1, k)).astype(int)] if k else [])
        keep = np.sort(np.asarray(keep, dtype=int))
        return X[keep], y[keep], meta.iloc[keep]


def _binary(label) -> bool:
    try:
        return int(label) in (0, 1)
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class LeftRightImagery(_Paradigm):
    """Left (0) vs right (1) hand imagery from annotations; one epoch from each cue onset + `tmin`.

    The default band is MOABB's motor-imagery 8-32 Hz (mu and beta, where the lateralised desynchronisation
    lives and what CSP is meant to see), then the project's notch and average reference. `events` overrides the
    annotation map; by default it is ``T1``/``T2`` on eegmmidb (imagery runs only) and ``left_hand``/
    ``right_hand`` elsewhere.
    """

    preprocess: PreprocessConfig = field(default_factory=lambda: PreprocessConfig(l_freq=8.0, h_freq=32.0))
    tmin: float = 0.0
    events: Mapping[str, int] | None = None
    name = "left_right_imagery"

    def _event_map(self, dataset_name: str) -> dict[str, int]:
        if self.events is not None:
            return dict(self.events)
        return {"T1": 0, "T2": 1} if dataset_name == "eegmmidb" else {"left_hand": 0, "right_hand": 1}

    def _select(self, dataset, recordings):
        if dataset.name != "eegmmidb":
            return recordings
        runs = [r for r in recordings if int(r.meta.get("run", -1)) in EEGMMIDB_IMAGERY_RUNS]
        if not runs:
            raise ValueError("eegmmidb: none of the left/right fist imagery runs 4, 8, 12 is loaded; build the "
                             "dataset with runs=(4, 8, 12)")
        return runs

    def _events(self, rec, raw):
        mapping = self._event_map(rec.dataset)
        ann = raw.annotations
        sfreq = float(raw.info["sfreq"])
        keep = [i for i, desc in enumerate(ann.description) if desc in mapping]
        if not keep:
            return []
        # Samples from the first one, whether the onsets count from meas_date (orig_time set) or from the start.
        index = raw.time_as_index(ann.onset[keep], use_rounding=True, origin=ann.orig_time)
        return [(int(i) / sfreq + self.tmin, int(mapping[ann.description[k]]), str(ann.description[k]))
                for i, k in zip(index, keep)]
