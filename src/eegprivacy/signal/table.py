"""Window-feature tables: dataset -> one row per 2-s window, ``<channel>:<feature>`` columns.

Computed once per (dataset version, feature config) and stored as parquet whose schema metadata records both,
so every study reads the same table and a stale file is never reused silently.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import mne
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from eegprivacy.signal.features import FeatureConfig, feature_columns, window_features
from eegprivacy.signal.preprocess import PreprocessConfig, preprocess_raw
from eegprivacy.signal.windows import WindowConfig, sliding_windows

# Row-identifying columns that precede the feature columns.
INDEX_COLUMNS = ["dataset", "subject", "recording", "condition", "label", "window", "t_start", "sfreq", "flags"]


@dataclass(frozen=True)
class FeaturePipelineConfig:
    """Everything that determines the numbers in a window-feature table."""

    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    window: WindowConfig = field(default_factory=WindowConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)

    @classmethod
    def from_params(cls, params: dict) -> FeaturePipelineConfig:
        """Build from the ``features`` block of ``params/features.yaml``."""
        return cls(PreprocessConfig(**params.get("preprocess", {})), WindowConfig(**params.get("window", {})),
                   FeatureConfig(**params.get("welch", {})))

    def to_dict(self) -> dict:
        return {"preprocess": self.preprocess.to_dict(), "window": self.window.to_dict(),
                "features": self.features.to_dict()}

    def config_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]


def recording_features(raw, config: FeaturePipelineConfig) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """One recording -> (features (n_windows, n_channels*11), window starts (s), channel names, flags)."""
    sfreq = float(raw.info["sfreq"])
    channels = [raw.ch_names[i] for i in mne.pick_types(raw.info, eeg=True, exclude=())]  # preprocess_raw's picks
    data, flags = preprocess_raw(raw, config.preprocess)
    windows, starts = sliding_windows(data, sfreq, config.window)
    if len(windows) == 0:
        n_columns = len(channels) * len(config.features.feature_names)
        return np.empty((0, n_columns)), starts, channels, [*flags, "no_complete_window"]
    feats, feat_flags = window_features(windows, sfreq, config.features)
    return feats.reshape(len(feats), -1), starts, channels, sorted(set(flags) | set(feat_flags))


def dataset_window_features(dataset, config: FeaturePipelineConfig, progress: bool = True) -> pd.DataFrame:
    """All recordings of ``dataset`` -> tidy window-feature table (channels aligned to the first recording)."""
    recordings = dataset.recordings()
    frames = []
    columns: list[str] | None = None
    reference_channels: list[str] | None = None
    for rec in tqdm(recordings, desc=f"features {dataset.name}", unit="rec", disable=not progress):
        raw = rec.load()
        if reference_channels is None:
            reference_channels = list(raw.ch_names)
            columns = feature_columns(reference_channels, config.features)
        elif list(raw.ch_names) != reference_channels:
            missing = sorted(set(reference_channels) - set(raw.ch_names))
            if missing:
                raise ValueError(f"{rec.subject}/{rec.recording} lacks channels {missing}; a window-feature table "
                                 "needs one channel set per dataset")
            raw = raw.copy().pick(reference_channels)
        feats, starts, _, flags = recording_features(raw, config)
        meta_flags = [f for f in str(rec.meta.get("flags") or "").split(";") if f]
        frame = pd.DataFrame(feats, columns=columns)
        frame.insert(0, "dataset", dataset.name)
        frame.insert(1, "subject", rec.subject)
        frame.insert(2, "recording", rec.recording)
        frame.insert(3, "condition", rec.meta.get("condition"))
        frame.insert(4, "label", rec.meta.get("label"))
        frame.insert(5, "window", np.arange(len(feats)))
        frame.insert(6, "t_start", starts[: len(feats)])
        frame.insert(7, "sfreq", float(raw.info["sfreq"]))
        frame.insert(8, "flags", ";".join(sorted(set(meta_flags) | set(flags))))
        frames.append(frame)
    if not frames:
        raise ValueError(f"dataset {dataset.name} has no recordings")
    return pd.concat(frames, ignore_index=True)


def write_feature_table(table: pd.DataFrame, path: str | Path, *, dataset_version: str,
                        config: FeaturePipelineConfig, synthetic: bool) -> Path:
    """Write parquet atomically, stamping dataset version, config hash and the synthetic flag in its metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    meta = dict(arrow.schema.metadata or {})
    meta.update({b"eegprivacy.dataset_version": dataset_version.encode(),
                 b"eegprivacy.config_hash": config.config_hash().encode(),
                 b"eegprivacy.config": json.dumps(config.to_dict(), default=str).encode(),
                 b"eegprivacy.synthetic": str(bool(synthetic)).lower().encode()})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(arrow.replace_schema_metadata(meta), tmp)
    tmp.replace(path)
    return path


def table_stamp(path: str | Path) -> dict[str, str]:
    """The provenance stamp of a feature table, or {} when there is no file."""
    path = Path(path)
    if not path.exists():
        return {}
    meta = pq.read_schema(path).metadata or {}
    return {k.decode().removeprefix("eegprivacy."): v.decode() for k, v in meta.items()
            if k.startswith(b"eegprivacy.")}


def read_feature_table(path: str | Path, *, dataset_version: str | None = None,
                       config: FeaturePipelineConfig | None = None) -> pd.DataFrame:
    """Read a stored table, refusing one computed from another dataset version or feature config."""
    stamp = table_stamp(path)
    if not stamp:
        raise FileNotFoundError(f"no feature table at {path}; run `dvc repro features` or `eegprivacy features`")
    if dataset_version and stamp.get("dataset_version") != dataset_version:
        raise ValueError(f"{path} was computed from dataset version {stamp.get('dataset_version')[:12]}, "
                         f"not {dataset_version[:12]}; recompute it")
    if config and stamp.get("config_hash") != config.config_hash():
        raise ValueError(f"{path} was computed with another feature config; recompute it")
    return pd.read_parquet(path)


def is_current(path: str | Path, dataset_version: str, config: FeaturePipelineConfig) -> bool:
    stamp = table_stamp(path)
    return stamp.get("dataset_version") == dataset_version and stamp.get("config_hash") == config.config_hash()
