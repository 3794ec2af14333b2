"""Study A's 11 per-channel window features, vectorised over windows and channels.

Definitions (the paper names the features; where it leaves a choice open, this is the choice):
- Units: windows are multiplied by ``config.scale`` first (volts -> µV by default), so line length and RMS are in
  µV, variance and band powers in µV², the zero-crossing rate in 1/s and SEF95 in Hz.
- ``line_length``: sum of |x[t+1] - x[t]| over the window (not divided by its duration).
- ``rms``: sqrt(mean(x²)) of the window as is; ``variance``: mean((x - mean)²) (ddof = 0). For a zero-mean window
  rms² == variance.
- ``zero_crossing_rate``: sign changes of the mean-removed window per second, i.e. count / (n_samples / sfreq);
  a sample equal to the mean counts as positive. A sine of f Hz gives about 2 f.
- PSD: ``scipy.signal.welch`` (config window, nperseg, noverlap, nfft; ``scaling="density"``; per-segment
  mean removal, ``detrend="constant"``), one-sided, in µV²/Hz.
- Bands: ``config.bands`` (study A's six by default, :data:`BANDS`; set per dataset in ``params/features.yaml``,
  ``features.per_dataset.<dataset>.welch.bands``). A column is named after its band, whose edges are the same at
  every sampling rate.
- Band power: rectangle rule, sum of the PSD bins whose centre lies in the band times the bin width
  df = sfreq / nfft. Edges: lower inclusive, upper exclusive, except the top edge of the highest configured band,
  which is inclusive. Adjacent bands therefore never share a bin, and the band powers add up to the power over
  the whole band range. A sine of amplitude A whose leakage stays in one band gives A²/2 there.
- Nyquist: a band whose upper edge exceeds Nyquist is *dropped*: its column is NaN. Clipping it to Nyquist would
  keep a column whose name promises power the data cannot hold (``high_gamma`` 45–70 Hz at 128 Hz measures
  45–64 Hz), and two tables would then disagree on what one column means. To measure the part below Nyquist,
  give that dataset a band with honest edges in params (e.g. ``high_gamma_45_60: [45, 60]``).
- ``sef95``: the frequency below which ``sef_fraction`` of the power in the SEF range lies. The range runs from
  the lowest lower edge to the highest upper edge of the bands kept at this rate (not dropped, not unavailable;
  so never past Nyquist), with the same edge rule as the bands: 0.5–70 Hz by default. Consistent with the
  rectangle rule, each bin's power is spread evenly over its cell [f - df/2, f + df/2]; the cumulative power is
  interpolated linearly inside the cell where it crosses the fraction, and the result is clipped to the range.
  Windows with no power there give NaN.

Flags (returned, never silent): ``nperseg_reduced:<n>`` (windows shorter than nperseg: nperseg = n_samples,
noverlap = nperseg // 2), ``band_dropped:<name>`` (upper edge above Nyquist: NaN, see above),
``band_unavailable:<name>`` (lower edge at or above Nyquist: NaN), ``band_empty:<name>`` (no PSD bin inside the
band at this resolution: NaN), ``sef_undefined:no_bins`` (no band is kept at this rate: NaN),
``sef_undefined:zero_power`` (some window had no power in the SEF range: NaN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import signal as sps

TIME_FEATURES = ("line_length", "rms", "variance", "zero_crossing_rate")
FEATURE_NAMES = ("line_length", "rms", "variance", "zero_crossing_rate", "delta", "theta", "alpha", "beta", "gamma",
                 "high_gamma", "sef95")
BANDS = {"delta": (0.5, 4), "theta": (4, 8), "alpha": (8, 13), "beta": (13, 30), "gamma": (30, 45),
         "high_gamma": (45, 70)}

# Windows are processed in chunks of about this many samples: bounds the float64 temporaries (~2 MB each) and
# keeps them in cache (measured ~2x faster than 16-MB chunks); the work inside a chunk is fully vectorised.
_CHUNK_SAMPLES = 1 << 18


def _normalise_bands(bands) -> tuple[tuple[str, tuple[float, float]], ...]:
    items = bands.items() if isinstance(bands, Mapping) else bands
    out = []
    for name, edges in items:
        try:
            lo, hi = (float(e) for e in edges)
        except (TypeError, ValueError):
            raise ValueError(f"band {name!r} needs two edges in Hz, [low, high], got {edges!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
            raise ValueError(f"band {name!r} needs 0 <= low < high, got {edges!r}")
        out.append((str(name), (lo, hi)))
    names = [n for n, _ in out]
    if not out or len(set(names)) != len(names):
        raise ValueError(f"bands need at least one band and unique names, got {names}")
    if set(names) & {*TIME_FEATURES, "sef95"}:
        raise ValueError(f"band names must not reuse the other feature names: {names}")
    return tuple(out)


@dataclass(frozen=True)
class FeatureConfig:
    nperseg: int = 256
    noverlap: int = 128
    nfft: int = 256
    window: str = "hann"
    bands: tuple = tuple(BANDS.items())  # ((name, (low, high)), ...); a mapping is accepted and converted
    sef_fraction: float = 0.95
    scale: float = 1e6  # volts -> µV before any feature

    def __post_init__(self) -> None:
        object.__setattr__(self, "bands", _normalise_bands(self.bands))
        if self.nperseg < 2 or not (0 <= self.noverlap < self.nperseg) or self.nfft < self.nperseg:
            raise ValueError(f"need nperseg >= 2, 0 <= noverlap < nperseg, nfft >= nperseg; got nperseg="
                             f"{self.nperseg}, noverlap={self.noverlap}, nfft={self.nfft}")
        if not (0 < self.sef_fraction < 1):
            raise ValueError(f"sef_fraction must be in (0, 1), got {self.sef_fraction}")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be positive, got {self.scale}")

    @property
    def feature_names(self) -> tuple[str, ...]:
        return (*TIME_FEATURES, *(name for name, _ in self.bands), "sef95")

    def to_dict(self) -> dict:
        return {"nperseg": self.nperseg, "noverlap": self.noverlap, "nfft": self.nfft, "window": self.window,
                "bands": {name: [lo, hi] for name, (lo, hi) in self.bands},
                "sef_fraction": self.sef_fraction, "scale": self.scale}


def feature_columns(channels: list[str], config: FeatureConfig | None = None) -> list[str]:
    """``<channel>:<feature>``, channel-major: the columns of ``window_features(...)[0].reshape(n_windows, -1)``."""
    names = FEATURE_NAMES if config is None else config.feature_names
    return [f"{ch}:{feat}" for ch in channels for feat in names]


@dataclass(frozen=True)
class _SpectralPlan:
    nperseg: int
    noverlap: int
    nfft: int
    band_weights: np.ndarray  # (n_freqs, n_bands): df where a bin belongs to a band, else 0
    band_missing: np.ndarray  # (n_bands,) bool: NaN for these bands
    sef_bins: slice  # contiguous bins of the SEF range
    sef_left: float  # left edge of the first SEF cell
    sef_range: tuple[float, float]
    df: float


def _plan(n_samples: int, sfreq: float, config: FeatureConfig, flags: list[str]) -> _SpectralPlan:
    nperseg, noverlap, nfft = config.nperseg, config.noverlap, config.nfft
    if n_samples < nperseg:
        nperseg, noverlap, nfft = n_samples, n_samples // 2, max(nfft, n_samples)
        flags.append(f"nperseg_reduced:{nperseg}")
    df = sfreq / nfft
    freqs = np.arange(nfft // 2 + 1) * df  # same grid as welch's; built from sfreq / nfft so edges hit exactly
    tol = 1e-9 * df
    nyquist = sfreq / 2.0
    top = max(hi for _, (_, hi) in config.bands)  # of every configured band: a band's edges never depend on sfreq
    weights = np.zeros((freqs.size, len(config.bands)))
    missing = np.zeros(len(config.bands), dtype=bool)
    kept = []
    for j, (name, (lo, hi)) in enumerate(config.bands):
        if lo >= nyquist:
            missing[j] = True
            flags.append(f"band_unavailable:{name}")
            continue
        if hi > nyquist:
            missing[j] = True
            flags.append(f"band_dropped:{name}")
            continue
        kept.append((lo, hi))
        upper = freqs <= hi + tol if hi >= top else freqs < hi - tol
        mask = (freqs >= lo - tol) & upper
        if not mask.any():
            missing[j] = True
            flags.append(f"band_empty:{name}")
            continue
        weights[mask, j] = df
    lo_range = min((lo for lo, _ in kept), default=math.nan)
    hi_range = max((hi for _, hi in kept), default=math.nan)
    # the bins of the kept bands: the top edge is inclusive only where it is the top configured band's
    below = freqs <= hi_range + tol if hi_range >= top else freqs < hi_range - tol
    idx = np.flatnonzero((freqs >= lo_range - tol) & below)
    sef_bins = slice(int(idx[0]), int(idx[-1]) + 1) if idx.size else slice(0, 0)
    sef_left = float(freqs[idx[0]] - df / 2) if idx.size else math.nan
    return _SpectralPlan(nperseg, noverlap, nfft, weights, missing, sef_bins, sef_left, (lo_range, hi_range), df)


def _spectral_edge(psd: np.ndarray, plan: _SpectralPlan, fraction: float) -> np.ndarray:
    """Interpolated spectral edge frequency over the last axis of ``psd`` restricted to the SEF bins."""
    p = psd[..., plan.sef_bins]
    if p.shape[-1] == 0:
        return np.full(p.shape[:-1], np.nan)
    cum = np.cumsum(p, axis=-1)
    total = cum[..., -1]
    target = fraction * total
    k = np.argmax(cum >= target[..., None], axis=-1)[..., None]  # first cell reaching the target
    below = np.where(k > 0, np.take_along_axis(cum, np.maximum(k - 1, 0), axis=-1), 0.0)[..., 0]
    in_cell = np.take_along_axis(p, k, axis=-1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = (target - below) / in_cell
        sef = plan.sef_left + (k[..., 0] + frac) * plan.df
    sef = np.clip(sef, *plan.sef_range)
    return np.where(np.isfinite(total) & (total > 0), sef, np.nan)


def _chunk_features(w: np.ndarray, sfreq: float, config: FeatureConfig, plan: _SpectralPlan,
                    out: np.ndarray) -> bool:
    """Fill ``out`` (n, n_channels, n_features) for one chunk; returns whether some SEF was undefined."""
    n = w.shape[-1]
    x = np.multiply(w, config.scale, dtype=np.float64)
    d = np.diff(x, axis=-1)
    out[..., 0] = np.abs(d, out=d).sum(axis=-1)
    del d
    out[..., 1] = np.sqrt(np.vecdot(x, x) / n)
    # Removing the window mean leaves welch unchanged (it removes each segment's mean anyway).
    x -= x.mean(axis=-1, keepdims=True)
    out[..., 2] = np.vecdot(x, x) / n
    neg = np.signbit(x)
    out[..., 3] = np.count_nonzero(neg[..., 1:] != neg[..., :-1], axis=-1) * (sfreq / n)
    del neg
    _, psd = sps.welch(x, fs=sfreq, window=config.window, nperseg=plan.nperseg, noverlap=plan.noverlap,
                       nfft=plan.nfft, detrend="constant", scaling="density", axis=-1)
    del x
    n_bands = plan.band_weights.shape[1]
    bands = psd @ plan.band_weights
    bands[..., plan.band_missing] = np.nan
    out[..., 4:4 + n_bands] = bands
    sef = _spectral_edge(psd, plan, config.sef_fraction)
    out[..., 4 + n_bands] = sef
    return bool(np.isnan(sef).any()) and plan.sef_bins.stop > plan.sef_bins.start


def window_features(windows: np.ndarray, sfreq: float,
                    config: FeatureConfig = FeatureConfig()) -> tuple[np.ndarray, list[str]]:
    """(n_windows, n_channels, n_samples) in volts -> (n_windows, n_channels, n_features) in
    ``config.feature_names`` order (FEATURE_NAMES, 11, with the default bands), flags."""
    if not (math.isfinite(sfreq) and sfreq > 0):
        raise ValueError(f"sfreq must be a positive number, got {sfreq!r}")
    w = np.asarray(windows)
    if w.ndim != 3:
        raise ValueError(f"windows must be (n_windows, n_channels, n_samples), got shape {w.shape}")
    n_windows, n_channels, n_samples = w.shape
    if n_samples < 2:
        raise ValueError(f"windows need at least 2 samples, got {n_samples}")
    flags: list[str] = []
    plan = _plan(n_samples, sfreq, config, flags)
    if plan.sef_bins.stop == plan.sef_bins.start:
        flags.append("sef_undefined:no_bins")
    out = np.empty((n_windows, n_channels, len(config.feature_names)))
    step = max(1, _CHUNK_SAMPLES // max(1, n_channels * n_samples))
    undefined = False
    for start in range(0, n_windows, step):
        undefined |= _chunk_features(w[start:start + step], sfreq, config, plan, out[start:start + step])
    if undefined:
        flags.append("sef_undefined:zero_power")
    return out, flags
