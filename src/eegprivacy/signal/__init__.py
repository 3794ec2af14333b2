"""signal layer: preprocessing, windowing and the 11 window features; pure functions on numpy arrays."""

from eegprivacy.signal.features import BANDS, FEATURE_NAMES, FeatureConfig, feature_columns, window_features
from eegprivacy.signal.preprocess import PreprocessConfig, preprocess, preprocess_raw
from eegprivacy.signal.windows import WindowConfig, sliding_windows

__all__ = [
    "BANDS",
    "FEATURE_NAMES",
    "FeatureConfig",
    "PreprocessConfig",
    "WindowConfig",
    "feature_columns",
    "preprocess",
    "preprocess_raw",
    "sliding_windows",
    "window_features",
]
