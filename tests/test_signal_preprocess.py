"""Preprocessing and windowing against least-squares amplitude fits and analytic window counts."""

from __future__ import annotations

import numpy as np
import pytest

from eegprivacy.signal import (
    FEATURE_NAMES,
    PreprocessConfig,
    WindowConfig,
    preprocess,
    preprocess_raw,
    sliding_windows,
    window_features,
)

NO_REF = PreprocessConfig(average_reference=False)


def amplitude(x, freq, sfreq, trim_s=2.0):
    """Least-squares amplitude of a ``freq`` sinusoid in ``x``, ignoring filter edge transients."""
    k = int(trim_s * sfreq)
    t = np.arange(x.shape[-1])[k:-k] / sfreq
    basis = np.stack([np.sin(2 * np.pi * freq * t), np.cos(2 * np.pi * freq * t), np.ones_like(t)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, x[k:-k], rcond=None)
    return np.hypot(coef[0], coef[1])


def db(ratio):
    return 20 * np.log10(ratio)


def test_notch_removes_50hz_and_keeps_10hz():
    sfreq, n = 500.0, 20 * 500
    t = np.arange(n) / sfreq
    x = 10e-6 * np.sin(2 * np.pi * 10 * t) + 20e-6 * np.sin(2 * np.pi * 50 * t + 0.4)
    y, flags = preprocess(np.stack([x, -0.5 * x]), sfreq, NO_REF)
    assert flags == []
    assert db(amplitude(y[0], 50, sfreq) / 20e-6) < -20
    assert abs(db(amplitude(y[0], 10, sfreq) / 10e-6)) < 1
    # the band-pass alone (no notch) would leave 50 Hz in place: the attenuation comes from the notch
    y_no_notch, _ = preprocess(x[None], sfreq, PreprocessConfig(notch_freq=None, average_reference=False))
    assert abs(db(amplitude(y_no_notch[0], 50, sfreq) / 20e-6)) < 1


def test_band_pass_removes_dc_drift_and_high_frequencies():
    sfreq, n = 500.0, 30 * 500
    t = np.arange(n) / sfreq
    x = 10e-6 * np.sin(2 * np.pi * 10 * t) + 1e-3 + 1e-4 * t + 10e-6 * np.sin(2 * np.pi * 120 * t)
    y, _ = preprocess(x[None], sfreq, NO_REF)
    k = int(2 * sfreq)
    core, tc = y[0, k:-k], t[k:-k]
    slope, intercept = np.polyfit(tc, core, 1)
    assert abs(slope) < 1e-4 * 1e-3 and abs(core.mean()) < 1e-3 * 1e-3  # drift and offset down by > 60 dB
    assert db(amplitude(y[0], 120, sfreq) / 10e-6) < -20
    assert abs(db(amplitude(y[0], 10, sfreq) / 10e-6)) < 1


def test_average_reference_zeroes_the_channel_mean():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 5000)) * 20e-6 + rng.standard_normal((5, 1)) * 1e-3
    y, flags = preprocess(x, 250.0)
    assert flags == []
    assert np.abs(y.mean(axis=0)).max() < 1e-12 * np.abs(y).max()
    y_no_ref, _ = preprocess(x, 250.0, NO_REF)
    np.testing.assert_allclose(y, y_no_ref - y_no_ref.mean(axis=0), atol=1e-18)
    assert np.abs(y_no_ref.mean(axis=0)).max() > 1e-7  # without the reference the mean is not zero


def test_input_is_not_modified_and_output_is_float64():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4000)) * 1e-5).astype(np.float32)
    before = x.copy()
    y, _ = preprocess(x, 250.0)
    np.testing.assert_array_equal(x, before)
    assert y.dtype == np.float64 and y.shape == x.shape


def test_sfreq_100_clips_lowpass_and_skips_notch_then_drops_high_gamma():
    sfreq = 100.0
    rng = np.random.default_rng(2)
    y, flags = preprocess(rng.standard_normal((4, 60 * 100)) * 1e-5, sfreq)
    assert "lowpass_clipped:47.5" in flags and "notch_skipped" in flags
    windows, _ = sliding_windows(y, sfreq)
    feats, feat_flags = window_features(windows, sfreq)
    assert [f for f in feat_flags if f.startswith("band_")] == ["band_dropped:high_gamma"]
    hg = FEATURE_NAMES.index("high_gamma")
    assert np.isnan(feats[..., hg]).all() and np.isfinite(np.delete(feats, hg, axis=-1)).all()


def test_sfreq_80_skips_notch_and_high_gamma_is_unavailable():
    sfreq = 80.0
    rng = np.random.default_rng(3)
    y, flags = preprocess(rng.standard_normal((3, 60 * 80)) * 1e-5, sfreq)
    assert "notch_skipped" in flags and "lowpass_clipped:38" in flags
    feats, feat_flags = window_features(sliding_windows(y, sfreq)[0], sfreq)
    assert [f for f in feat_flags if f.startswith("band_")] == ["band_dropped:gamma", "band_unavailable:high_gamma"]
    missing = [FEATURE_NAMES.index("gamma"), FEATURE_NAMES.index("high_gamma")]
    assert np.isnan(feats[..., missing]).all() and np.isfinite(np.delete(feats, missing, axis=-1)).all()


def test_lowpass_below_nyquist_is_not_flagged():
    y, flags = preprocess(np.random.default_rng(4).standard_normal((2, 160 * 20)) * 1e-5, 160.0)
    assert flags == []  # 70 Hz < 80 Hz Nyquist, 50 Hz notch applies


def test_too_short_recordings_raise_a_clear_error():
    with pytest.raises(ValueError, match="too short"):
        preprocess(np.zeros((2, 1000)), 500.0)  # 2 s < the 6.6-s FIR of the 0.5-Hz high-pass
    y, _ = preprocess(np.zeros((2, 1000)), 500.0, PreprocessConfig(l_freq=5.0))  # a shorter FIR fits
    assert y.shape == (2, 1000)


def test_bad_inputs_raise():
    x = np.zeros((2, 5000))
    x[0, 10] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        preprocess(x, 250.0)
    with pytest.raises(ValueError):
        preprocess(np.zeros(5000), 250.0)
    with pytest.raises(ValueError):
        PreprocessConfig(l_freq=80.0, h_freq=70.0)
    with pytest.raises(ValueError):
        preprocess(np.zeros((2, 5000)), 0.8)  # high-pass edge at Nyquist


def test_single_channel_is_not_referenced_to_itself():
    sfreq = 250.0
    x = np.sin(2 * np.pi * 10 * np.arange(5000) / sfreq)[None] * 1e-5
    y, flags = preprocess(x, sfreq)
    assert "average_reference_skipped:single_channel" in flags and np.abs(y).max() > 5e-6


def test_preprocess_raw_keeps_eeg_channels_only():
    mne = pytest.importorskip("mne")
    rng = np.random.default_rng(5)
    sfreq = 250.0
    data = rng.standard_normal((4, 5000)) * 1e-5
    info = mne.create_info(["C3", "EOG1", "Cz", "STI"], sfreq, ["eeg", "eog", "eeg", "stim"])
    raw = mne.io.RawArray(data, info, verbose=False)
    raw.info["bads"] = ["Cz"]  # bad channels are kept: dropping them is the data layer's decision
    y, flags = preprocess_raw(raw)
    expected, expected_flags = preprocess(data[[0, 2]], sfreq)
    np.testing.assert_allclose(y, expected)
    assert flags == expected_flags


def test_preprocess_config_to_dict():
    assert PreprocessConfig().to_dict() == {"l_freq": 0.5, "h_freq": 70.0, "notch_freq": 50.0, "notch_q": 30.0,
                                            "average_reference": True}


# --- windows --------------------------------------------------------------------------------------------------------

def test_window_count_and_start_times():
    sfreq = 500.0
    data = np.arange(3 * 62 * 500, dtype=float).reshape(3, -1)
    windows, starts = sliding_windows(data, sfreq)
    assert windows.shape == (61, 3, 1000)
    np.testing.assert_allclose(starts, np.arange(61) * 1.0)
    np.testing.assert_array_equal(windows[7, 2], data[2, 3500:4500])
    np.testing.assert_array_equal(windows[-1], data[:, 30000:31000])


def test_windows_are_a_zero_copy_view():
    data = np.random.default_rng(6).standard_normal((4, 10_000))
    windows, _ = sliding_windows(data, 250.0)
    assert np.shares_memory(windows, data)
    assert not windows.flags.writeable  # a write would show up in every overlapping window


@pytest.mark.parametrize(("seconds", "config", "expected"), [
    (62.0, WindowConfig(), 61), (10.0, WindowConfig(overlap=0.0), 5), (10.9, WindowConfig(overlap=0.0), 5),
    (1.5, WindowConfig(), 0), (2.0, WindowConfig(), 1), (12.0, WindowConfig(length_s=4.0, overlap=0.75), 9)])
def test_window_counts(seconds, config, expected):
    sfreq = 200.0
    windows, starts = sliding_windows(np.zeros((2, int(seconds * sfreq))), sfreq, config)
    assert len(windows) == len(starts) == expected
    assert windows.shape[1:] == (2, int(config.length_s * sfreq))


def test_non_integer_sampling_rate_rounds_window_length():
    sfreq = 173.61
    windows, starts = sliding_windows(np.zeros((1, 4097)), sfreq)
    assert windows.shape[-1] == 347 and starts[1] == pytest.approx(174 / sfreq)
    assert len(windows) == (4097 - 347) // 174 + 1


def test_window_config_validation():
    for bad in (dict(length_s=0.0), dict(overlap=1.0), dict(overlap=-0.1)):
        with pytest.raises(ValueError):
            WindowConfig(**bad)
    assert WindowConfig().to_dict() == {"length_s": 2.0, "overlap": 0.5}
