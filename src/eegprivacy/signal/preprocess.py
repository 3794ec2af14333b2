"""Study A's preprocessing: 0.5–70 Hz band-pass, 50 Hz notch (Q = 30), average reference.

Those are the defaults and the shared ``features.preprocess`` block of ``params/features.yaml``; a dataset whose
Nyquist frequency is below them gets its own edges there (``features.per_dataset.<dataset>.preprocess``, e.g.
0.5–60 Hz for the 128-Hz MSU cohort), so the project's own datasets never reach the fallback below.

Filters that the sampling rate cannot support are clipped or skipped and *flagged*, never applied silently
wrong, so a table built from 100-Hz data says so in its ``flags`` column. This fallback is for user cohorts
(``audit-cohort``) whose rate the params do not anticipate.

Design choices (the paper does not fix them):
- Band-pass: MNE's default zero-phase FIR (``firwin``, Hamming window, automatic length and transition bands).
  Its length is set by the 0.5-Hz high-pass edge (3.3 / 0.5 Hz = 6.6 s); a shorter recording raises.
- Notch: ``scipy.signal.iirnotch`` run forward and backward (``filtfilt``), so zero phase; the two passes square
  the magnitude response, which deepens the notch without widening its -3 dB band much.
- Average reference: the mean over the channels is removed from every sample, after filtering (the filters are
  the same for all channels, so the order does not change the result).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from scipy import signal as sps

from eegprivacy.errors import InputDataError

if TYPE_CHECKING:  # pragma: no cover
    import mne

# A low-pass edge at or above Nyquist is moved here (fraction of Nyquist), leaving MNE room for a transition band.
LOWPASS_NYQUIST_FRACTION = 0.95
# The notch's filtfilt padding, in time constants of its slowest pole: the start-up transient then decays
# inside the padding instead of inside the recording.
_NOTCH_PAD_TIME_CONSTANTS = 5.0


@dataclass(frozen=True)
class PreprocessConfig:
    """Declarative preprocessing; ``None`` for a frequency switches that filter off."""

    l_freq: float | None = 0.5
    h_freq: float | None = 70.0
    notch_freq: float | None = 50.0
    notch_q: float = 30.0
    average_reference: bool = True

    def __post_init__(self) -> None:
        for name in ("l_freq", "h_freq", "notch_freq"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive frequency or None, got {value!r}")
        if self.l_freq is not None and self.h_freq is not None and self.l_freq >= self.h_freq:
            raise ValueError(f"l_freq ({self.l_freq}) must be below h_freq ({self.h_freq})")
        if not (math.isfinite(self.notch_q) and self.notch_q > 0):
            raise ValueError(f"notch_q must be positive, got {self.notch_q!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def _fmt(value: float) -> str:
    return f"{value:g}"


def _check_data(data: np.ndarray, sfreq: float) -> np.ndarray:
    if not (math.isfinite(sfreq) and sfreq > 0):
        raise ValueError(f"sfreq must be a positive number, got {sfreq!r}")
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise ValueError(f"data must be (n_channels, n_times), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"data is empty: shape {arr.shape}")
    arr = np.array(arr, dtype=np.float64, order="C", copy=True)  # never filter the caller's array in place
    if not np.isfinite(arr).all():
        raise ValueError("data contains NaN or inf; interpolate or drop those samples before preprocessing")
    return arr


class RecordingTooShortError(InputDataError, ValueError):
    """The recording is shorter than the band-pass FIR filter (see :func:`min_samples`)."""


def _fir_length(sfreq: float, l_freq: float | None, h_freq: float | None) -> int:
    import mne  # heavy import: only where a filter is actually built

    return len(mne.filter.create_filter(None, sfreq, l_freq, h_freq, method="fir", phase="zero", verbose=False))


def _bandpass(data: np.ndarray, sfreq: float, l_freq: float | None, h_freq: float | None) -> np.ndarray:
    import mne

    n_times = data.shape[-1]
    n_kernel = _fir_length(sfreq, l_freq, h_freq)
    if n_times < n_kernel:
        band = f"{_fmt(l_freq) if l_freq else 'DC'}–{_fmt(h_freq) if h_freq else 'Nyquist'} Hz"
        raise RecordingTooShortError(
            f"recording too short for the {band} FIR filter: {n_times} samples ({n_times / sfreq:.2f} s) but the "
            f"filter needs at least {n_kernel} samples ({n_kernel / sfreq:.2f} s); use a longer recording "
            "or raise l_freq")
    return mne.filter.filter_data(data, sfreq, l_freq, h_freq, method="fir", phase="zero", copy=False,
                                  verbose=False)


def _notch(data: np.ndarray, sfreq: float, freq: float, q: float) -> np.ndarray:
    b, a = sps.iirnotch(freq, q, fs=sfreq)
    tau_samples = q / (math.pi * freq) * sfreq  # pole radius ~ 1 - pi*bandwidth/fs, bandwidth = freq / q
    padlen = min(data.shape[-1] - 1, int(math.ceil(_NOTCH_PAD_TIME_CONSTANTS * tau_samples)))
    return sps.filtfilt(b, a, data, axis=-1, padlen=padlen)


def _band_edges(sfreq: float, config: PreprocessConfig) -> tuple[float | None, float | None, list[str]]:
    """The band-pass edges usable at this rate (a low-pass at or above Nyquist is clipped and flagged)."""
    nyquist = sfreq / 2.0
    flags: list[str] = []
    l_freq, h_freq = config.l_freq, config.h_freq
    if l_freq is not None and l_freq >= nyquist:
        raise ValueError(f"high-pass edge {l_freq} Hz is at or above Nyquist ({nyquist} Hz)")
    if h_freq is not None and h_freq >= nyquist:
        h_freq = LOWPASS_NYQUIST_FRACTION * nyquist
        flags.append(f"lowpass_clipped:{_fmt(h_freq)}")
        if l_freq is not None and l_freq >= h_freq:
            raise ValueError(f"high-pass edge {l_freq} Hz is above the clipped low-pass edge {h_freq:g} Hz")
    return l_freq, h_freq, flags


@lru_cache(maxsize=64)
def min_samples(sfreq: float, config: PreprocessConfig = PreprocessConfig()) -> int:
    """The fewest samples :func:`preprocess` accepts at this rate: the band-pass FIR's length (1 without one), so a
    caller can set a short recording aside from its metadata, before loading or filtering it."""
    if not (math.isfinite(sfreq) and sfreq > 0):
        raise ValueError(f"sfreq must be a positive number, got {sfreq!r}")
    l_freq, h_freq, _ = _band_edges(sfreq, config)
    return 1 if l_freq is None and h_freq is None else _fir_length(sfreq, l_freq, h_freq)


def preprocess(data: np.ndarray, sfreq: float,
               config: PreprocessConfig = PreprocessConfig()) -> tuple[np.ndarray, list[str]]:
    """data (n_channels, n_times) in volts -> filtered data (float64, volts), flags.

    Flags: ``lowpass_clipped:<Hz>`` (h_freq at or above Nyquist, moved to 0.95 Nyquist), ``notch_skipped``
    (notch at or above Nyquist), ``average_reference_skipped:single_channel`` (referencing one channel to itself
    would zero it).
    """
    x = _check_data(data, sfreq)
    nyquist = sfreq / 2.0
    l_freq, h_freq, flags = _band_edges(sfreq, config)
    if l_freq is not None or h_freq is not None:
        x = _bandpass(x, sfreq, l_freq, h_freq)

    if config.notch_freq is not None:
        if config.notch_freq >= nyquist:
            flags.append("notch_skipped")
        else:
            x = _notch(x, sfreq, config.notch_freq, config.notch_q)

    if config.average_reference:
        if x.shape[0] < 2:
            flags.append("average_reference_skipped:single_channel")
        else:
            x -= x.mean(axis=0, keepdims=True)
    return x, flags


def preprocess_raw(raw: mne.io.BaseRaw,
                   config: PreprocessConfig = PreprocessConfig()) -> tuple[np.ndarray, list[str]]:
    """Preprocess the EEG channels of an MNE Raw (loads the data; volts in, volts out).

    All EEG channels are kept, bad ones included, in the Raw's channel order, so rows line up with
    ``[raw.ch_names[i] for i in mne.pick_types(raw.info, eeg=True, exclude=())]``.
    """
    import mne

    picks = mne.pick_types(raw.info, eeg=True, exclude=())
    if len(picks) == 0:
        raise ValueError("the recording has no EEG channels")
    data = raw.get_data(picks=picks)
    return preprocess(data, float(raw.info["sfreq"]), config)
