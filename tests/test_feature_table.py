"""Window-feature tables: shape, column naming, provenance stamp, and refusal of stale tables."""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest

from eegprivacy.data.base import EEGDataset, Recording, config_version
from eegprivacy.signal.table import (
    INDEX_COLUMNS,
    FeaturePipelineConfig,
    dataset_window_features,
    is_current,
    read_feature_table,
    table_stamp,
    write_feature_table,
)

CHANNELS = ["C3", "Cz", "C4"]


class TwoSines(EEGDataset):
    """A tiny in-test dataset: subject s has an alpha sine at 9+s Hz on every channel (synthetic)."""

    name = "two_sines"
    synthetic = True

    def _recordings(self):
        recs = []
        for s in range(2):
            def load(s=s):
                t = np.arange(0, 10.0, 1 / 250)
                rng = np.random.default_rng(s)
                data = 20e-6 * np.sin(2 * np.pi * (9 + s) * t)[None] * np.array([[1.0], [0.6], [0.3]])
                data = data + 1e-6 * rng.standard_normal(data.shape)
                return mne.io.RawArray(data, mne.create_info(CHANNELS, 250.0, "eeg"), verbose="error")
            recs.append(Recording(self.name, f"s{s}", "r0", load,
                                  {"condition": "rest", "label": s, "flags": "synthetic"}))
        return recs

    def _version(self):
        return "synthetic-" + config_version({"name": self.name})


def test_table_shape_columns_and_content(tmp_path):
    config = FeaturePipelineConfig()
    table = dataset_window_features(TwoSines(), config, progress=False)
    features = [c for c in table.columns if c not in INDEX_COLUMNS]
    assert len(features) == len(CHANNELS) * 11
    assert features[:2] == ["C3:line_length", "C3:rms"] and features[-1] == "C4:sef95"
    # 10 s at 2-s windows with 50% overlap -> 9 windows per recording
    assert table.groupby("subject").size().tolist() == [9, 9]
    assert np.isfinite(table[features].to_numpy()).all()
    # the alpha sine dominates: alpha power > every other band on C3, and follows the channel gains
    bands = ["delta", "theta", "beta", "gamma", "high_gamma"]
    assert (table["C3:alpha"] > table[[f"C3:{b}" for b in bands]].max(axis=1)).all()
    assert (table["C3:alpha"] > table["C4:alpha"]).all()
    assert set(table["flags"]) == {"synthetic"}


def test_stamp_round_trip_and_stale_tables_are_refused(tmp_path):
    dataset, config = TwoSines(), FeaturePipelineConfig()
    table = dataset_window_features(dataset, config, progress=False)
    path = write_feature_table(table, tmp_path / "f.parquet", dataset_version=dataset.version(), config=config,
                               synthetic=True)
    stamp = table_stamp(path)
    assert stamp["dataset_version"] == dataset.version() and stamp["synthetic"] == "true"
    assert is_current(path, dataset.version(), config)
    back = read_feature_table(path, dataset_version=dataset.version(), config=config)
    assert back.equals(table)

    other = FeaturePipelineConfig.from_params({"window": {"length_s": 4.0, "overlap": 0.5}})
    assert not is_current(path, dataset.version(), other)
    with pytest.raises(ValueError, match="another feature config"):
        read_feature_table(path, config=other)
    with pytest.raises(ValueError, match="dataset version"):
        read_feature_table(path, dataset_version="0" * 64)
    with pytest.raises(FileNotFoundError):
        read_feature_table(tmp_path / "missing.parquet")


def test_config_from_params_matches_defaults_and_hash_changes():
    from eegprivacy.params import load_params

    params = load_params(Path(__file__).resolve().parents[1] / "params" / "features.yaml", "features")
    assert FeaturePipelineConfig.from_params(params).config_hash() == FeaturePipelineConfig().config_hash()
    changed = FeaturePipelineConfig.from_params({**params, "preprocess": {**params["preprocess"], "notch_freq": 60}})
    assert changed.config_hash() != FeaturePipelineConfig().config_hash()


# --- per-dataset feature settings -----------------------------------------------------------------------------

PROJECT_PARAMS = Path(__file__).resolve().parents[1] / "params" / "features.yaml"
SECTION = """
preprocess: {l_freq: 0.5, h_freq: 70.0}
welch: {nperseg: 256, noverlap: 128}
datasets: {slow: {}, fast: {}}
per_dataset:
  slow:
    preprocess: {h_freq: 60.0}
    welch:
      bands:
        delta: [0.5, 4]
        high_gamma_45_60: [45, 60]
"""


def _features_params(text: str):
    import yaml

    from eegprivacy.signal.table import FeaturesParams

    return FeaturesParams.from_mapping(yaml.safe_load(text), "features.yaml", "features.")


def test_per_dataset_overrides_merge_over_the_shared_blocks():
    params = _features_params(SECTION)
    shared, slow, fast = params.pipeline(), params.pipeline("slow"), params.pipeline("fast")
    # a dataset without an entry gets the shared config, hash and all; so does an unknown name
    assert fast == shared and fast.config_hash() == shared.config_hash()
    assert params.pipeline("not_listed").config_hash() == shared.config_hash()
    # the override replaces the keys it names and keeps the rest; bands (a YAML mapping) are replaced whole
    assert (slow.preprocess.l_freq, slow.preprocess.h_freq) == (0.5, 60.0)
    assert (slow.features.nperseg, slow.features.noverlap) == (256, 128)
    assert slow.features.bands == (("delta", (0.5, 4.0)), ("high_gamma_45_60", (45.0, 60.0)))
    assert slow.features.feature_names[4:] == ("delta", "high_gamma_45_60", "sef95")
    assert slow.config_hash() != shared.config_hash()


def test_project_params_keep_the_shared_config_where_a_dataset_has_no_override():
    from eegprivacy.signal.table import FeaturesParams

    params = FeaturesParams.load(PROJECT_PARAMS, "features")
    today = FeaturePipelineConfig().config_hash()  # the code defaults: what eegmat and synthetic tables use
    for name in params.datasets:
        if name not in params.per_dataset:
            assert params.pipeline(name).config_hash() == today, name
    assert params.per_dataset and all(params.pipeline(n).config_hash() != today for n in params.per_dataset)


def test_project_params_fit_every_listed_dataset_below_nyquist(data_root):
    """At each sampling rate of each dataset the project lists, its config runs as written: no low-pass moved, no
    notch skipped, no band dropped, unavailable or empty (the fallbacks are for user cohorts only)."""
    from eegprivacy.data import get_dataset
    from eegprivacy.signal import preprocess, sliding_windows, window_features
    from eegprivacy.signal.table import FeaturesParams

    params = FeaturesParams.load(PROJECT_PARAMS, "features")
    assert "msu_schizophrenia" in params.datasets
    rng = np.random.default_rng(0)
    for name in params.datasets:
        config = params.pipeline(name)
        rates = {float(r.meta["sfreq"]) for r in get_dataset(name, **params.dataset_kwargs(name)).recordings()}
        assert rates, name
        for sfreq in rates:
            data, flags = preprocess(rng.standard_normal((2, int(30 * sfreq))) * 1e-5, sfreq, config.preprocess)
            _, feat_flags = window_features(sliding_windows(data, sfreq, config.window)[0], sfreq, config.features)
            assert flags == [] and feat_flags == [], (name, sfreq, flags, feat_flags)
    # the check can fail: MSU's rate under the shared config drops high gamma and moves the low-pass
    data, flags = preprocess(rng.standard_normal((2, 30 * 128)) * 1e-5, 128.0, params.pipeline().preprocess)
    _, feat_flags = window_features(sliding_windows(data, 128.0)[0], 128.0, params.pipeline().features)
    assert flags == ["lowpass_clipped:60.8"] and feat_flags == ["band_dropped:high_gamma"]


@pytest.mark.parametrize(("edit", "message"), [
    ("per_dataset: {slwo: {preprocess: {h_freq: 60.0}}}",
     r"features.per_dataset.slwo: 'slwo' is not a dataset of features.datasets \(fast, slow\)"),
    ("per_dataset: {slow: {bands: {delta: [0.5, 4]}}}",
     r"unknown block features.per_dataset.slow.bands; a dataset overrides preprocess, window, welch \(bands go in "
     r"welch\)"),
    ("per_dataset: {slow: [60]}", r"features.per_dataset.slow must be a mapping of blocks"),
    ("per_dataset: {slow: {welch: 256}}", r"features.per_dataset.slow.welch must be a mapping of settings"),
    ("per_dataset: {slow: {preprocess: {h_freq: 0.2}}}",
     r"features.per_dataset.slow: l_freq \(0.5\) must be below h_freq \(0.2\)"),
    ("per_dataset: {slow: {welch: {bands: {high_gamma: 45}}}}",
     r"features.per_dataset.slow: band 'high_gamma' needs two edges in Hz, \[low, high\], got 45"),
    ("per_dataset: {slow: {window: {lenght_s: 4}}}", r"features.per_dataset.slow: .*lenght_s"),
    ("per_dataset: [slow]", r"features.per_dataset = \['slow'\] is invalid; it must be a mapping"),
])
def test_bad_per_dataset_settings_are_named(edit, message):
    from eegprivacy.params import ParamsError

    base = SECTION[:SECTION.index("per_dataset:")]
    with pytest.raises(ParamsError, match=message):
        _features_params(base + edit)
