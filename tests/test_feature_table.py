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
