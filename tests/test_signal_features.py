"""Window features against analytic values and an independent (numpy-only) Welch estimate."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import eegprivacy.signal.features as feat_mod
from eegprivacy.signal import BANDS, FEATURE_NAMES, FeatureConfig, feature_columns, sliding_windows, window_features

IDX = {name: i for i, name in enumerate(FEATURE_NAMES)}
BAND_NAMES = list(BANDS)


def sine(freq, sfreq, n, amp=1.0, phase=0.3, n_channels=1):
    t = np.arange(n) / sfreq
    return np.tile(amp * np.sin(2 * np.pi * freq * t + phase), (n_channels, 1))


def as_windows(x):
    """(n_channels, n) -> a single window (1, n_channels, n)."""
    return x[None]


# --- an independent spectral estimate: plain numpy, explicit loops, no scipy -------------------------------------

def manual_welch(x, fs, nperseg=256, noverlap=128, nfft=256):
    n = np.arange(nperseg)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / nperseg)  # periodic Hann, as used for spectral analysis
    step = nperseg - noverlap
    starts = range(0, x.shape[-1] - nperseg + 1, step)
    acc = 0.0
    for s in starts:
        seg = x[..., s:s + nperseg]
        seg = seg - seg.mean(axis=-1, keepdims=True)
        acc = acc + np.abs(np.fft.rfft(seg * win, n=nfft)) ** 2
    psd = acc / len(starts) / (fs * np.sum(win ** 2))
    psd[..., 1:] *= 2  # one-sided: fold negative frequencies ...
    if nfft % 2 == 0:
        psd[..., -1] /= 2  # ... except the Nyquist bin, which has no mirror
    return np.arange(nfft // 2 + 1) * fs / nfft, psd


def manual_band_powers(freqs, psd, fs):
    df, nyq = freqs[1] - freqs[0], fs / 2
    out = []
    for name, (lo, hi) in BANDS.items():
        if lo >= nyq:
            out.append(np.full(psd.shape[:-1], np.nan))
            continue
        if hi > nyq:  # dropped, not clipped: the column would claim power the data cannot hold
            out.append(np.full(psd.shape[:-1], np.nan))
            continue
        top = name == "high_gamma"  # the top configured band's upper edge is inclusive
        sel = (freqs >= lo) & ((freqs <= hi) if top else (freqs < hi))
        out.append(psd[..., sel].sum(axis=-1) * df)
    return np.stack(out, axis=-1)


def brute_force_sef(freqs, psd, lo, hi, fraction=0.95, step=1e-3, inclusive=True):
    """First point of a fine grid where the cumulative (cell-spread) power reaches ``fraction`` of the total
    (over the bins in [lo, hi], or [lo, hi) when not ``inclusive``)."""
    df = freqs[1] - freqs[0]
    sel = (freqs >= lo) & ((freqs <= hi) if inclusive else (freqs < hi))
    f, p = freqs[sel], psd[..., sel]
    grid = np.arange(lo, hi + step, step)
    covered = np.clip((grid[:, None] - (f[None, :] - df / 2)) / df, 0, 1)  # (n_grid, n_bins)
    cum = p @ covered.T  # (..., n_grid)
    total = p.sum(axis=-1, keepdims=True)
    first = np.argmax(cum >= fraction * total, axis=-1)
    return grid[first]


# --- band powers ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("freq", "band"), [(2, "delta"), (6, "theta"), (10, "alpha"), (20, "beta"), (40, "gamma"),
                                            (60, "high_gamma")])
def test_sine_lands_in_its_band(freq, band):
    feats, flags = window_features(as_windows(sine(freq, 256.0, 512, amp=10e-6)), 256.0)
    powers = feats[0, 0, IDX["delta"]:IDX["high_gamma"] + 1]
    assert flags == []
    assert powers[BAND_NAMES.index(band)] / powers.sum() > 0.95
    assert np.argmax(powers) == BAND_NAMES.index(band)


@pytest.mark.parametrize(("sfreq", "freq", "band"), [(256.0, 10.0, "alpha"), (500.0, 20.0, "beta"),
                                                     (160.0, 21.3, "beta"), (500.0, 57.0, "high_gamma")])
def test_band_power_of_sine_is_half_amplitude_squared(sfreq, freq, band):
    amp_uv = 20.0
    x = sine(freq, sfreq, int(2 * sfreq), amp=amp_uv * 1e-6, n_channels=2)
    feats, _ = window_features(as_windows(x), sfreq)
    np.testing.assert_allclose(feats[0, :, IDX[band]], amp_uv ** 2 / 2, rtol=0.02)


def test_band_powers_and_psd_match_independent_welch():
    rng = np.random.default_rng(1)
    for sfreq in (256.0, 500.0, 160.0):
        x = rng.standard_normal((7, 3, int(2 * sfreq))) * 30e-6
        feats, _ = window_features(x, sfreq)
        freqs, psd = manual_welch(x * 1e6, sfreq)
        np.testing.assert_allclose(feats[..., IDX["delta"]:IDX["high_gamma"] + 1],
                                   manual_band_powers(freqs, psd, sfreq), rtol=1e-9)


def test_bands_add_up_to_the_power_in_the_band_range():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 2, 512)) * 1e-5
    feats, _ = window_features(x, 256.0)
    freqs, psd = manual_welch(x * 1e6, 256.0)
    sel = (freqs >= 0.5) & (freqs <= 70)
    np.testing.assert_allclose(feats[..., IDX["delta"]:IDX["high_gamma"] + 1].sum(-1),
                               psd[..., sel].sum(-1) * (freqs[1] - freqs[0]), rtol=1e-9)


# --- SEF95 ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("high_fraction", "expected"), [(0.20, 30.0), (0.08, 30.0), (0.03, 10.0)])
def test_sef_of_two_sines_sits_at_the_higher_one_once_it_carries_over_5_percent(high_fraction, expected):
    sfreq, n = 256.0, 512
    # powers A²/2: choose amplitudes so the 30-Hz sine carries `high_fraction` of the total
    a_low, a_high = np.sqrt(2 * (1 - high_fraction)), np.sqrt(2 * high_fraction)
    x = (sine(10, sfreq, n, a_low) + sine(30, sfreq, n, a_high, phase=1.1)) * 10e-6
    feats, _ = window_features(as_windows(x), sfreq)
    sef = feats[0, 0, IDX["sef95"]]
    assert abs(sef - expected) <= 1.5  # inside the sine's Hann main lobe (±1 bin of 1 Hz, ± half a cell)
    freqs, psd = manual_welch(x * 1e6, sfreq)
    assert sef == pytest.approx(brute_force_sef(freqs, psd, 0.5, 70.0)[0], abs=2e-3)


def test_sef_matches_brute_force_search_on_random_spectra():
    rng = np.random.default_rng(3)
    # at 100 Hz high gamma is dropped, so the range ends at gamma's (exclusive) 45-Hz edge
    for sfreq, hi, inclusive in ((256.0, 70.0, True), (500.0, 70.0, True), (100.0, 45.0, False)):
        x = np.cumsum(rng.standard_normal((6, 2, 512)), axis=-1) * 1e-6  # red noise: SEF well inside the range
        x += rng.standard_normal(x.shape) * 3e-6
        feats, _ = window_features(x, sfreq)
        freqs, psd = manual_welch(x * 1e6, sfreq)
        np.testing.assert_allclose(feats[..., IDX["sef95"]], brute_force_sef(freqs, psd, 0.5, hi, inclusive=inclusive),
                                   atol=2e-3)


def _band_limited_noise(rng, sfreq, n_times, f_hi):
    spec = np.fft.rfft(rng.standard_normal(n_times))
    f = np.fft.rfftfreq(n_times, 1 / sfreq)
    spec[(f < 0.5) | (f > f_hi)] = 0
    return np.fft.irfft(spec, n_times)


@pytest.mark.parametrize(("sfreq", "f_hi", "range_hi"), [(256.0, 40.0, 70.0), (256.0, 20.0, 70.0),
                                                         (500.0, 250.0, 70.0), (100.0, 50.0, 45.0)])
def test_sef_of_band_limited_white_noise(sfreq, f_hi, range_hi):
    rng = np.random.default_rng(4)
    x = _band_limited_noise(rng, sfreq, int(sfreq * 200), f_hi) * 1e-5
    windows, _ = sliding_windows(x[None], sfreq)
    feats, _ = window_features(windows, sfreq)
    top = min(f_hi, range_hi)  # the SEF only sees 0.5 Hz .. the highest band kept (70 Hz; 45 Hz at 100 Hz)
    expected = 0.5 + 0.95 * (top - 0.5)
    df = sfreq / 256
    assert abs(np.median(feats[:, 0, IDX["sef95"]]) - expected) < df


def test_zero_window_gives_nan_sef_and_a_flag():
    x = np.zeros((2, 3, 512))
    x[1] = sine(10, 256.0, 512, 1e-5, n_channels=3)
    feats, flags = window_features(x, 256.0)
    assert np.isnan(feats[0, :, IDX["sef95"]]).all() and np.isfinite(feats[1]).all()
    assert (feats[0, :, :IDX["sef95"]] == 0).all()
    assert "sef_undefined:zero_power" in flags


# --- time-domain features -------------------------------------------------------------------------------------------

def test_line_length_of_a_sawtooth():
    n, period, height_uv = 1000, 100, 40.0
    k = np.arange(n)
    x = (height_uv * (k % period) / period) * 1e-6
    feats, _ = window_features(x[None, None], 500.0)
    rises = (n - 1) - (n - 1) // period  # steps of height/period
    falls = (n - 1) // period  # drops of height*(period-1)/period
    expected = rises * height_uv / period + falls * height_uv * (period - 1) / period
    assert feats[0, 0, IDX["line_length"]] == pytest.approx(expected, rel=1e-9)


def test_line_length_of_a_ramp():
    x = np.linspace(0, 50e-6, 700)
    feats, _ = window_features(x[None, None], 350.0)
    assert feats[0, 0, IDX["line_length"]] == pytest.approx(50.0, rel=1e-9)


@pytest.mark.parametrize("freq", [1.0, 5.0, 10.0, 33.3, 60.0])
def test_zero_crossing_rate_of_a_sine_is_twice_its_frequency(freq):
    sfreq = 500.0
    x = sine(freq, sfreq, 1000, amp=5e-6, phase=0.37) + 2e-6  # offset: crossings are of the mean-removed window
    feats, _ = window_features(as_windows(x), sfreq)
    # over 2 s a sine crosses 4 f times, give or take one at the window edges -> 0.5 per second
    assert abs(feats[0, 0, IDX["zero_crossing_rate"]] - 2 * freq) <= 0.5 + 1e-9


def test_zero_crossing_rate_counts_sign_changes_per_window_duration():
    blocks = np.repeat(np.tile([1.0, -1.0], 5), 50) * 3e-6 + 1e-6  # 10 blocks, 9 sign changes about the mean
    feats, _ = window_features(blocks[None, None], 250.0)
    assert feats[0, 0, IDX["zero_crossing_rate"]] == pytest.approx(9 / (500 / 250.0), rel=1e-12)


def test_rms_variance_and_their_relation():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 1000)) * 10e-6
    x -= x.mean(axis=-1, keepdims=True)
    offset = np.array([0.0, 0.0, 7e-6])[None, :, None]
    feats, _ = window_features(x + offset, 500.0)
    xu = x * 1e6
    np.testing.assert_allclose(feats[..., IDX["variance"]], (xu ** 2).mean(-1), rtol=1e-10)
    rms2 = feats[..., IDX["rms"]] ** 2
    np.testing.assert_allclose(rms2[:, :2], feats[:, :2, IDX["variance"]], rtol=1e-10)  # zero mean: equal
    np.testing.assert_allclose(rms2[:, 2], feats[:, 2, IDX["variance"]] + 49.0, rtol=1e-10)  # + mean²


def test_units_follow_the_scale():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 2, 512)) * 1e-5
    uv, _ = window_features(x, 256.0)
    volts, _ = window_features(x, 256.0, FeatureConfig(scale=1.0))
    power = [IDX[n] for n in ("variance", *BAND_NAMES)]
    np.testing.assert_allclose(uv[..., IDX["line_length"]], volts[..., IDX["line_length"]] * 1e6, rtol=1e-10)
    np.testing.assert_allclose(uv[..., power], volts[..., power] * 1e12, rtol=1e-10)
    for name in ("zero_crossing_rate", "sef95"):
        np.testing.assert_allclose(uv[..., IDX[name]], volts[..., IDX[name]], rtol=1e-9)


# --- Nyquist, short windows, vectorisation -------------------------------------------------------------------------

def test_sfreq_100_drops_high_gamma_above_nyquist():
    """High gamma (45-70 Hz) does not fit under a 50-Hz Nyquist: its column is NaN and flagged, never a clipped
    45-50 Hz power under the 45-70 Hz name; the other features stay finite and SEF95 ends at gamma's 45 Hz."""
    sfreq = 100.0
    x = sine(47.0, sfreq, 400, 10e-6, n_channels=2) + sine(20.0, sfreq, 400, 10e-6, n_channels=2)
    feats, flags = window_features(as_windows(x), sfreq, FeatureConfig())
    assert "band_dropped:high_gamma" in flags and not any(f.startswith("band_clipped") for f in flags)
    assert not any(f.startswith("band_unavailable") for f in flags)
    assert np.isnan(feats[..., IDX["high_gamma"]]).all()
    assert np.isfinite(np.delete(feats, IDX["high_gamma"], axis=-1)).all()
    assert (feats[..., IDX["sef95"]] <= 45.0).all()


def test_a_band_renamed_for_its_edges_below_nyquist_is_kept():
    """The same 100-Hz data with high gamma given the edges it can have (45-50 Hz, its top at Nyquist): kept,
    unflagged, and it holds the 47-Hz sine's A²/2."""
    sfreq = 100.0
    bands = {**{n: e for n, e in BANDS.items() if n != "high_gamma"}, "high_gamma_45_50": (45, 50)}
    config = FeatureConfig(bands=bands)
    feats, flags = window_features(as_windows(sine(47.0, sfreq, 400, 10e-6)), sfreq, config)
    assert flags == [] and np.isfinite(feats).all()
    assert feats[0, 0, config.feature_names.index("high_gamma_45_50")] == pytest.approx(50.0, rel=0.02)


def test_sef_range_ends_at_the_highest_kept_band():
    """White noise at 100 Hz: with high gamma dropped, SEF95 is computed over 0.5-45 Hz (about 42.8 Hz for a flat
    spectrum), not up to Nyquist (about 47.5 Hz); it equals a brute-force SEF over the kept bands' bins."""
    sfreq = 100.0
    x = np.random.default_rng(11).standard_normal((1, 8, 400)) * 1e-5
    feats, flags = window_features(x, sfreq)
    assert flags == ["band_dropped:high_gamma"]
    freqs, psd = manual_welch(x[0] * 1e6, sfreq)
    # gamma's top edge is exclusive: high gamma, the top configured band, is the inclusive one
    expected = brute_force_sef(freqs, psd, 0.5, 45.0, inclusive=False)
    np.testing.assert_allclose(feats[0, :, IDX["sef95"]], expected, atol=2e-3)
    assert 40.0 < np.median(feats[0, :, IDX["sef95"]]) < 45.0


def test_every_band_above_nyquist_leaves_sef_undefined():
    feats, flags = window_features(np.ones((2, 1, 64)) * 1e-6 + np.arange(64) * 1e-7, 32.0,
                                   FeatureConfig(bands={"wide": (0.5, 20)}))
    assert flags == ["nperseg_reduced:64", "band_dropped:wide", "sef_undefined:no_bins"]
    assert np.isnan(feats[..., 4:]).all() and np.isfinite(feats[..., :4]).all()


def test_band_edges_must_be_a_pair():
    with pytest.raises(ValueError, match=r"band 'gamma' needs two edges in Hz, \[low, high\], got 30"):
        FeatureConfig(bands={"gamma": 30})


def test_sfreq_80_makes_high_gamma_unavailable_and_drops_gamma():
    sfreq = 80.0
    rng = np.random.default_rng(7)
    feats, flags = window_features(rng.standard_normal((4, 2, 160)) * 1e-5, sfreq)
    assert "band_unavailable:high_gamma" in flags and "band_dropped:gamma" in flags
    missing = [IDX["gamma"], IDX["high_gamma"]]
    assert np.isnan(feats[..., missing]).all()
    assert np.isfinite(np.delete(feats, missing, axis=-1)).all()
    assert (feats[..., IDX["sef95"]] <= 30.0).all()  # beta's top edge: the highest band kept at 80 Hz


def test_short_windows_reduce_nperseg_and_say_so():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 2, 200)) * 1e-5
    feats, flags = window_features(x, 100.0)
    assert "nperseg_reduced:200" in flags
    freqs, psd = manual_welch(x * 1e6, 100.0, nperseg=200, noverlap=100, nfft=256)
    np.testing.assert_allclose(feats[..., IDX["delta"]:IDX["high_gamma"] + 1],
                               manual_band_powers(freqs, psd, 100.0), rtol=1e-9)


def test_batched_chunked_and_per_window_results_agree(monkeypatch):
    rng = np.random.default_rng(9)
    data = rng.standard_normal((4, 256 * 20)) * 1e-5
    windows, _ = sliding_windows(data, 256.0)
    whole, _ = window_features(windows, 256.0)
    monkeypatch.setattr(feat_mod, "_CHUNK_SAMPLES", 3 * 4 * 512)  # 3 windows per chunk, ragged last chunk
    chunked, _ = window_features(windows, 256.0)
    single = np.stack([window_features(windows[i:i + 1], 256.0)[0][0] for i in range(len(windows))])
    np.testing.assert_allclose(chunked, whole, rtol=1e-12, atol=0)
    np.testing.assert_allclose(single, whole, rtol=1e-12, atol=0)


def test_feature_columns_match_the_reshape():
    rng = np.random.default_rng(10)
    channels = ["Fp1", "Cz", "O2"]
    feats, _ = window_features(rng.standard_normal((5, 3, 512)) * 1e-5, 256.0)
    flat = feats.reshape(len(feats), -1)
    columns = feature_columns(channels)
    assert len(columns) == flat.shape[1] == 3 * 11 and len(set(columns)) == len(columns)
    for j, col in enumerate(columns):
        ch, name = col.split(":")
        np.testing.assert_array_equal(flat[:, j], feats[:, channels.index(ch), IDX[name]])


def test_empty_input_and_bad_shapes():
    feats, _ = window_features(np.empty((0, 3, 512)), 256.0)
    assert feats.shape == (0, 3, 11)
    with pytest.raises(ValueError):
        window_features(np.zeros((3, 512)), 256.0)


def test_config_is_declarative_and_validated():
    cfg = FeatureConfig(bands={"alpha": (8, 13), "beta": (13, 30)})
    assert cfg.bands == (("alpha", (8.0, 13.0)), ("beta", (13.0, 30.0)))
    assert feature_columns(["C3"], cfg) == ["C3:line_length", "C3:rms", "C3:variance", "C3:zero_crossing_rate",
                                            "C3:alpha", "C3:beta", "C3:sef95"]
    d = FeatureConfig().to_dict()
    assert d["bands"]["high_gamma"] == [45.0, 70.0] and json.loads(json.dumps(d)) == d
    assert hash(FeatureConfig()) == hash(FeatureConfig())
    for bad in (dict(noverlap=256), dict(nfft=128), dict(sef_fraction=1.0), dict(bands={"x": (5, 4)})):
        with pytest.raises(ValueError):
            FeatureConfig(**bad)


def test_vectorised_speed():
    rng = np.random.default_rng(11)
    windows = rng.standard_normal((600, 19, 1000)) * 1e-5
    start = time.perf_counter()
    window_features(windows, 500.0)
    assert time.perf_counter() - start < 5.0  # ~0.15 s; a per-window Python loop takes far longer
