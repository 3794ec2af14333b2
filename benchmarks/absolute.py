"""The earlier absolute-time targets on 2 cores, kept as extra information beside the ratios.

Absolute seconds on a shared machine are noise, so these report a time against a generous target rather than a
comparison; the ratio benchmarks are the ones to trust.
"""

from __future__ import annotations

import numpy as np

from benchmarks._common import best_of

NAME = "absolute"
DESCRIPTION = "absolute seconds of the signal path on 2 cores (extra information; ratios are the benchmarks)"


def _window_features(repeats: int) -> float:
    from eegprivacy.signal.features import window_features

    windows = np.random.default_rng(0).standard_normal((6000, 19, 1000)) * 20e-6
    return best_of(lambda: window_features(windows, 500.0), repeats=repeats)[0]


def _preprocess_and_window(repeats: int) -> float:
    from eegprivacy.signal.preprocess import preprocess
    from eegprivacy.signal.windows import sliding_windows

    data = np.random.default_rng(0).standard_normal((19, 500 * 600)) * 20e-6  # 10 min, 19 ch, 500 Hz
    return best_of(lambda: sliding_windows(preprocess(data, 500.0)[0], 500.0), repeats=repeats)[0]


def _eegmat_features(repeats: int) -> float | None:
    import mne

    from eegprivacy.data import get_dataset
    from eegprivacy.signal.table import FeaturePipelineConfig, dataset_window_features

    mne.set_log_level("WARNING")
    dataset = get_dataset("eegmat")
    if not dataset.is_available():
        return None
    return best_of(lambda: dataset_window_features(dataset, FeaturePipelineConfig(), progress=False),
                   repeats=repeats, warmup=False)[0]


CASES = {  # name: (function, target seconds on 2 cores)
    "window_features 6000x19x1000": (_window_features, 3.0),
    "preprocess+window 10 min 19ch 500Hz": (_preprocess_and_window, 2.0),
    "eegmat features, 59 recordings (load, filter, window, features)": (_eegmat_features, 15.0),
}


def run(quick: bool = False) -> dict:
    cases = []
    for name, (fn, target) in CASES.items():
        seconds = fn(1 if quick else 3)
        cases.append({"case": name, "seconds": None if seconds is None else round(seconds, 3), "target_s": target,
                      "passed": None if seconds is None else seconds <= target})
    measured = [c for c in cases if c["seconds"] is not None]
    return {"project_s": round(sum(c["seconds"] for c in measured), 3), "baseline_s": None, "ratio": None,
            "target_ratio": None, "passed": all(c["passed"] for c in measured), "cases": cases}
