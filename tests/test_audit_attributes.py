"""Centered-PSD attribute: the dominant band of a sinusoid wins, rows sum to 0, gain is irrelevant."""

from __future__ import annotations

import numpy as np
import pytest

from eegprivacy.embeddings.attributes import BANDS, band_log_power, centered_psd

SFREQ = 128.0


def _windows(freqs, n_channels=3, seconds=4.0, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SFREQ)) / SFREQ
    out = []
    for f in freqs:
        phase = rng.uniform(0, 2 * np.pi, (n_channels, 1))
        out.append(np.sin(2 * np.pi * f * t + phase) + noise * rng.standard_normal((n_channels, t.size)))
    return np.stack(out)


@pytest.mark.parametrize("freq, band", [(2.5, "delta"), (6.0, "theta"), (10.0, "alpha"), (20.0, "beta"),
                                        (38.0, "gamma")])
def test_dominant_band_is_highest(freq, band):
    a = centered_psd(_windows([freq]), SFREQ)
    assert a.shape == (1, 5)
    assert list(BANDS)[int(np.argmax(a[0]))] == band


def test_rows_sum_to_zero_and_gain_invariant():
    X = _windows([10.0, 20.0, 6.0])
    a = centered_psd(X, SFREQ)
    np.testing.assert_allclose(a.sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(centered_psd(1000.0 * X, SFREQ), a, atol=1e-10)
    p = band_log_power(X, SFREQ)
    np.testing.assert_allclose(band_log_power(10.0 * X, SFREQ), p + 2.0, atol=1e-10)  # log10(100) = 2


def test_averaged_over_channels_of_logs():
    X = _windows([10.0], n_channels=2)
    X[0, 1] *= 10.0  # one channel 100x the power: log-average moves by log10(100) / 2 = 1
    p_one = band_log_power(_windows([10.0], n_channels=2), SFREQ)
    np.testing.assert_allclose(band_log_power(X, SFREQ), p_one + 1.0, atol=1e-10)


def test_rejects_bad_shapes_and_rates():
    with pytest.raises(ValueError):
        centered_psd(np.zeros((2, 2, 2, 2)), SFREQ)
    with pytest.raises(ValueError):
        centered_psd(np.zeros((1, 1, 256)), -1.0)
    with pytest.raises(ValueError):  # 50 Hz sampling cannot resolve gamma 30-45 Hz
        centered_psd(np.random.default_rng(0).standard_normal((1, 1, 200)), 50.0)
