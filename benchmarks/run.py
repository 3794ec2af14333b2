"""Speed targets, run on demand (`make benchmarks`), never inside the timed test suite.

Each benchmark reports the best of a few repeats and its target on a 2-core machine; the exit status is 1 when a
target is missed, so a slowdown is visible without making `make test` flaky.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from eegprivacy.signal.features import window_features
from eegprivacy.signal.preprocess import preprocess
from eegprivacy.signal.windows import sliding_windows


def best_of(fn, repeats: int = 3) -> float:
    fn()  # warm-up: first touch of scipy's scratch memory is slower
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_window_features() -> float:
    windows = np.random.default_rng(0).standard_normal((6000, 19, 1000)) * 20e-6
    return best_of(lambda: window_features(windows, 500.0))


def bench_preprocess_and_window() -> float:
    data = np.random.default_rng(0).standard_normal((19, 500 * 600)) * 20e-6  # 10 min, 19 ch, 500 Hz
    return best_of(lambda: sliding_windows(preprocess(data, 500.0)[0], 500.0))


def bench_eegmat_features() -> float | None:
    from eegprivacy.data import get_dataset
    from eegprivacy.signal.table import FeaturePipelineConfig, dataset_window_features

    dataset = get_dataset("eegmat")
    if not dataset.is_available():
        return None
    return best_of(lambda: dataset_window_features(dataset, FeaturePipelineConfig(), progress=False), repeats=1)


BENCHMARKS = {
    # name: (function, target seconds on 2 cores)
    "window_features 6000x19x1000": (bench_window_features, 3.0),
    "preprocess+window 10 min 19ch 500Hz": (bench_preprocess_and_window, 2.0),
    "eegmat features, 59 recordings": (bench_eegmat_features, 15.0),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    results, missed = [], 0
    for name, (fn, target) in BENCHMARKS.items():
        seconds = fn()
        ok = seconds is None or seconds <= target
        missed += not ok
        results.append({"benchmark": name, "seconds": None if seconds is None else round(seconds, 3),
                        "target_s": target, "status": "skipped (no data)" if seconds is None else
                        ("ok" if ok else "MISSED")})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            shown = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
            print(f"{r['benchmark']:<40} {shown:>8} s  (target {r['target_s']:.1f} s)  {r['status']}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
