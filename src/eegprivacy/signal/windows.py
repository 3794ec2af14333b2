"""Fixed-length overlapping windows (study A: 2 s, 50 % overlap) as a zero-copy view of the recording."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class WindowConfig:
    length_s: float = 2.0
    overlap: float = 0.5  # fraction of a window shared with the next one, in [0, 1)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.length_s) and self.length_s > 0):
            raise ValueError(f"length_s must be positive, got {self.length_s!r}")
        if not (0.0 <= self.overlap < 1.0):
            raise ValueError(f"overlap must be in [0, 1), got {self.overlap!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def samples(self, sfreq: float) -> tuple[int, int]:
        """(window length, hop) in samples; rounded, because 2 s at e.g. 173.61 Hz is not a whole number."""
        n = int(round(self.length_s * sfreq))
        hop = int(round(n * (1.0 - self.overlap)))
        if n < 2 or hop < 1:
            raise ValueError(f"{self.length_s} s windows with overlap {self.overlap} at {sfreq} Hz give "
                             f"{n} samples and a hop of {hop}; need at least 2 samples and a hop of 1")
        return n, hop


def sliding_windows(data: np.ndarray, sfreq: float,
                    config: WindowConfig = WindowConfig()) -> tuple[np.ndarray, np.ndarray]:
    """(n_channels, n_times) -> windows (n_windows, n_channels, n_samples), start times (s).

    The windows are a read-only strided view of ``data`` (no copy: 50 % overlap would otherwise double the
    memory). Only complete windows are returned; a recording shorter than one window gives zero windows.
    Start time of window i is ``i * hop / sfreq`` seconds from the first sample.
    """
    if not (math.isfinite(sfreq) and sfreq > 0):
        raise ValueError(f"sfreq must be a positive number, got {sfreq!r}")
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise ValueError(f"data must be (n_channels, n_times), got shape {arr.shape}")
    n, hop = config.samples(sfreq)
    n_channels, n_times = arr.shape
    if n_times < n:
        return np.empty((0, n_channels, n), dtype=arr.dtype), np.empty(0)
    view = np.lib.stride_tricks.sliding_window_view(arr, n, axis=-1)[:, ::hop]  # (n_ch, n_win, n)
    windows = view.transpose(1, 0, 2)
    starts = np.arange(windows.shape[0]) * hop / sfreq
    return windows, starts
