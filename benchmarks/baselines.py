"""Plain reference implementations the benchmarks time the project's fast paths against.

They are written the obvious way (one window, one scalar at a time) from the documented definitions, not from
the project's vectorised code, so that "same numbers" is a real check: ``tests/test_benchmark_baselines.py``
compares them with the project on small inputs, and every benchmark repeats the comparison on what it timed.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import signal as sps

from eegprivacy.privacy.sensitivity import l1_sensitivity_replace_one, l2_sensitivity_replace_one
from eegprivacy.signal.features import FeatureConfig


def reference_window_features(window: np.ndarray, sfreq: float,
                              config: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """One window (n_channels, n_samples) in volts -> (n_channels, 11) features, by the definitions in
    ``eegprivacy.signal.features``: plain numpy per feature and one ``scipy.signal.welch`` call per window."""
    x = np.asarray(window, dtype=np.float64) * config.scale
    n = x.shape[-1]
    line_length = np.abs(np.diff(x, axis=-1)).sum(axis=-1)
    rms = np.sqrt(np.mean(x ** 2, axis=-1))
    variance = np.var(x, axis=-1)
    positive = (x - x.mean(axis=-1, keepdims=True)) >= 0  # a sample equal to the mean counts as positive
    zcr = np.count_nonzero(positive[:, 1:] != positive[:, :-1], axis=-1) / (n / sfreq)

    nperseg, noverlap, nfft = config.nperseg, config.noverlap, config.nfft
    if n < nperseg:
        nperseg, noverlap, nfft = n, n // 2, max(nfft, n)
    freqs, psd = sps.welch(x, fs=sfreq, window=config.window, nperseg=nperseg, noverlap=noverlap, nfft=nfft,
                           detrend="constant", scaling="density", axis=-1)
    df = sfreq / nfft
    nyquist = sfreq / 2
    top = max(hi for _, (_, hi) in config.bands)
    bands, kept = [], []
    for _, (lo, hi) in config.bands:
        if lo >= nyquist or hi > nyquist:  # a band reaching past Nyquist is dropped (NaN), never clipped
            bands.append(np.full(x.shape[0], np.nan))
            continue
        kept.append((lo, hi))
        inclusive = hi >= top  # only the top edge of the highest configured band is inclusive
        mask = (freqs >= lo) & ((freqs <= hi) if inclusive else (freqs < hi))
        bands.append(psd[:, mask].sum(axis=-1) * df if mask.any() else np.full(x.shape[0], np.nan))

    lo_range = min((lo for lo, _ in kept), default=math.nan)
    hi_range = max((hi for _, hi in kept), default=math.nan)  # the SEF range ends at the highest kept band
    inside = (freqs >= lo_range) & ((freqs <= hi_range) if hi_range >= top else (freqs < hi_range))
    f, p_all = freqs[inside], psd[:, inside]
    sef = np.full(x.shape[0], np.nan)
    for c in range(x.shape[0]):  # each bin's power spread evenly over [f - df/2, f + df/2]
        p = p_all[c]
        total = p.sum()
        if not (f.size and math.isfinite(total) and total > 0):
            continue
        target = config.sef_fraction * total
        cum = np.cumsum(p)
        k = int(np.searchsorted(cum, target, side="left"))  # first bin whose cumulative power reaches it
        below = cum[k - 1] if k else 0.0
        edge = f[k] - df / 2 + (target - below) / p[k] * df
        sef[c] = min(max(edge, lo_range), hi_range)
    return np.column_stack([line_length, rms, variance, zcr, *bands, sef])


def reference_features_loop(windows: np.ndarray, sfreq: float,
                            config: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """(n_windows, n_channels, n_samples) -> (n_windows, n_channels, 11), one window at a time."""
    out = np.empty((len(windows), windows.shape[1], len(config.feature_names)))
    for i, window in enumerate(windows):
        out[i] = reference_window_features(window, sfreq, config)
    return out


def diffprivlib_mechanism(name: str, epsilon: float, delta: float, clip_norm: float, dim: int, random_state=None):
    """diffprivlib's own mechanism at the calibration the project's ``name`` uses (Δ2 = 2C, Δ1 = 2·sqrt(d)·C)."""
    from diffprivlib.mechanisms import Gaussian, GaussianAnalytic, Laplace

    delta2 = l2_sensitivity_replace_one(clip_norm)
    if name == "gaussian_analytic":
        return GaussianAnalytic(epsilon=epsilon, delta=delta, sensitivity=delta2, random_state=random_state)
    if name == "gaussian_classic":  # diffprivlib only accepts ε ≤ 1 here, where the theorem holds
        return Gaussian(epsilon=epsilon, delta=delta, sensitivity=delta2, random_state=random_state)
    if name == "laplace_implemented":
        return Laplace(epsilon=epsilon, sensitivity=delta2, random_state=random_state)
    if name == "laplace_formal":
        return Laplace(epsilon=epsilon, sensitivity=l1_sensitivity_replace_one(clip_norm, dim),
                       random_state=random_state)
    raise ValueError(f"no diffprivlib counterpart for {name!r}")


def scalar_release(values, mechanism) -> np.ndarray:
    """diffprivlib's documented use: ``randomise`` once per scalar."""
    return np.array([mechanism.randomise(float(v)) for v in np.ravel(values)])
