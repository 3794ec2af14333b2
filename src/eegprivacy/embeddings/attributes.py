"""The Study C spectral attribute: the centered PSD of each window (the spectral *shape*).

Precise form (protocol, ours): Welch PSD per channel with a Hann window, 1-s segments and 50 % overlap;
log10 of the band power in delta 1-4, theta 4-8, alpha 8-13, beta 13-30 and gamma 30-45 Hz; averaged over
channels to p in R^5; a = p - mean(p). Choices the protocol leaves open, fixed here **(ours)**:

- band power is the PSD summed over the frequency bins in [low, high) times the bin width (the last band
  includes its upper edge); with 1-s segments the bins are 1 Hz apart, so delta is {1, 2, 3} Hz;
- the log is taken per channel before averaging over channels (a geometric mean of channel powers), so one
  high-gain channel does not dominate the attribute;
- windows shorter than 1 s use one segment of the whole window.

Centering removes the overall gain: multiplying a window by a constant leaves ``a`` unchanged.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import welch

__all__ = ["BANDS", "band_log_power", "centered_psd"]

BANDS: dict[str, tuple[float, float]] = {
    "delta": (1.0, 4.0),
    "theta": (4.0, 8.0),
    "alpha": (8.0, 13.0),
    "beta": (13.0, 30.0),
    "gamma": (30.0, 45.0),
}

_TINY = 1e-30  # floor so flat (all-zero) channels give a finite, very low log power instead of -inf


def band_log_power(X, sfreq: float, bands: dict[str, tuple[float, float]] = BANDS) -> np.ndarray:
    """p: (n_windows, n_bands) channel-averaged log10 band power of windows X (n, channels, samples)."""
    X = np.asarray(X, dtype=float)
    if X.ndim == 2:
        X = X[:, None, :]
    if X.ndim != 3:
        raise ValueError(f"X must be (n_windows, n_channels, n_samples), got shape {X.shape}")
    if sfreq <= 0:
        raise ValueError(f"sfreq must be positive, got {sfreq}")
    nperseg = min(int(round(sfreq)), X.shape[-1])
    freqs, psd = welch(X, fs=sfreq, window="hann", nperseg=nperseg, noverlap=nperseg // 2, axis=-1)
    df = freqs[1] - freqs[0]
    names = list(bands)
    out = np.empty((X.shape[0], len(names)))
    for j, name in enumerate(names):
        lo, hi = bands[name]
        last = j == len(names) - 1
        mask = (freqs >= lo) & ((freqs <= hi) if last else (freqs < hi))
        if not mask.any():
            raise ValueError(f"band {name} {lo}-{hi} Hz holds no frequency bin at sfreq={sfreq}, "
                             f"resolution {df:.3g} Hz")
        power = psd[..., mask].sum(axis=-1) * df
        out[:, j] = np.log10(np.maximum(power, _TINY)).mean(axis=1)
    return out


def centered_psd(X, sfreq: float, bands: dict[str, tuple[float, float]] = BANDS) -> np.ndarray:
    """a: (n_windows, n_bands) log band powers minus their per-window mean (rows sum to zero)."""
    p = band_log_power(X, sfreq, bands)
    return p - p.mean(axis=1, keepdims=True)
