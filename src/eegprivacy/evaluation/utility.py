"""Intrinsic utility of a release: how far the output is from the mechanism's input, without training anything.

The reference is what went into the mechanism (scaled and clipped), so these numbers measure the noise alone;
``clipping_distortion`` measures what clipping did before it, so the two losses are reported apart.
"""

from __future__ import annotations

import numpy as np


def _pair(reference, released) -> tuple[np.ndarray, np.ndarray]:
    reference = np.asarray(reference, dtype=np.float64)
    released = np.asarray(released, dtype=np.float64)
    if reference.shape != released.shape:
        raise ValueError(f"shape mismatch: reference {reference.shape} vs released {released.shape}")
    if reference.size == 0:
        raise ValueError("empty arrays have no utility to measure")
    return reference.ravel(), released.ravel()


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Flattened Pearson r; NaN when either side is constant, where r is undefined."""
    a = a - a.mean()
    b = b - b.mean()
    denom = np.sqrt(np.dot(a, a) * np.dot(b, b))
    return float(np.dot(a, b) / denom) if denom > 0 else float("nan")


def _snr_db(signal: np.ndarray, error: np.ndarray) -> float:
    """10·log10(mean signal² / mean error²); +inf for an exact copy, NaN when both powers are zero."""
    p_signal = float(np.mean(signal ** 2))
    p_noise = float(np.mean(error ** 2))
    if p_noise == 0.0:
        return float("inf") if p_signal > 0 else float("nan")
    if p_signal == 0.0:
        return float("-inf")
    return 10.0 * float(np.log10(p_signal / p_noise))


def intrinsic_utility(reference, released) -> dict[str, float]:
    """RMSE, MAE, Pearson correlation (over all entries) and SNR in dB of ``released`` against ``reference``."""
    ref, rel = _pair(reference, released)
    error = rel - ref
    return {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(np.abs(error))),
            "correlation": _pearson(ref, rel), "snr_db": _snr_db(ref, error)}


def clipping_distortion(scaled, clipped) -> dict[str, float]:
    """The same metrics for clipping alone, plus the share of rows (patients) clipping changed."""
    scaled_arr = np.asarray(scaled, dtype=np.float64)
    clipped_arr = np.asarray(clipped, dtype=np.float64)
    metrics = intrinsic_utility(scaled_arr, clipped_arr)
    rows_changed = np.any(scaled_arr != clipped_arr, axis=-1) if scaled_arr.ndim > 1 else scaled_arr != clipped_arr
    metrics["fraction_rows_clipped"] = float(np.mean(rows_changed))
    return metrics
