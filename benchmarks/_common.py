"""Timing helpers shared by the benchmark modules."""

from __future__ import annotations

import time
from collections.abc import Callable

# Memory budget per stage and per benchmark (the "no stage needs more than 8 GB").
MEMORY_LIMIT_MB = 8192.0


def timed(fn: Callable):
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(fn: Callable, repeats: int = 3, warmup: bool = True):
    """(fastest of ``repeats`` calls, last result): on a shared machine the minimum is the least noisy estimate
    of what the code costs; the warm-up call keeps first-touch costs (imports, scratch memory) out of it."""
    if warmup:
        fn()
    best, result = float("inf"), None
    for _ in range(max(1, repeats)):
        seconds, result = timed(fn)
        best = min(best, seconds)
    return best, result


def ratio_entry(project_s: float, baseline_s: float, target_ratio: float | None, checks_ok: bool, **extra) -> dict:
    """The fields every ratio benchmark reports; ``passed`` (the module's verdict, which ``run.py`` reads as whether
    the goal is met) needs the target met *and* the same numbers."""
    ratio = baseline_s / project_s if project_s > 0 else float("inf")
    met = target_ratio is None or ratio >= target_ratio
    return {"project_s": round(project_s, 4), "baseline_s": round(baseline_s, 4), "ratio": round(ratio, 2),
            "target_ratio": target_ratio, "passed": bool(met and checks_ok), "same_numbers": bool(checks_ok),
            **extra}
