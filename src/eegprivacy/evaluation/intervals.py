"""Uncertainty intervals: Wilson for patient-level proportions, bootstrap and t intervals over seeds.

Small cohorts (17-36 patients) make every point estimate shaky, so every reported proportion carries an
interval; repeated-seed sweeps summarise the spread over seeds with `mean_ci` (or `bootstrap_ci` when the
statistic is not a mean or the seed count is large enough to trust resampling).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats

__all__ = ["wilson_interval", "bootstrap_ci", "mean_ci", "interval_p_value"]


def _two_sided_z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(stats.norm.ppf(0.5 + confidence / 2.0))


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for a binomial proportion.

    Wilson rather than Wald because Wald collapses to a zero-width interval at 0/n and n/n, which the
    paper's degenerate classifiers (specificity 0/12, recall 5/5) produce. The bounds at 0 and n successes
    are set exactly to 0 and 1 so round-off never shows as -1e-17. n = 0 has no information: (nan, nan).
    """
    successes, n = int(successes), int(n)
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (float("nan"), float("nan"))
    z = _two_sided_z(confidence)
    p = successes / n
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * np.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (float(low), float(high))


def _apply_statistic(statistic: Callable, samples: np.ndarray) -> np.ndarray:
    """Call `statistic` on all resamples at once when it takes `axis` (numpy reductions do), else per row."""
    try:
        out = np.asarray(statistic(samples, axis=-1), dtype=float)
        if out.shape == samples.shape[:-1]:
            return out
    except TypeError:
        pass
    return np.array([statistic(row) for row in samples], dtype=float)


def bootstrap_ci(
    values,
    statistic: Callable = np.mean,
    n_resamples: int = 9999,
    confidence: float = 0.95,
    random_state: int | np.random.Generator | None = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval (low, high) of `statistic` over `values` (typically one value per seed).

    Seeded by default so that re-running an aggregation stage gives byte-identical tables. Fewer than two
    values cannot be resampled meaningfully, so they give (nan, nan). Resamples are drawn in chunks to keep
    memory bounded for long value lists.
    """
    values = np.asarray(values, dtype=float).ravel()
    _two_sided_z(confidence)  # validates confidence
    if values.size < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(random_state)
    n = values.size
    chunk = max(1, min(n_resamples, 4_000_000 // n))
    estimates = np.empty(n_resamples, dtype=float)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        estimates[start:stop] = _apply_statistic(statistic, values[idx])
    alpha = 1.0 - confidence
    low, high = np.quantile(estimates, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (float(low), float(high))


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean over seeds.

    t rather than normal because seed counts are small (5-20). One value has no spread estimate, so its
    bounds are nan rather than a misleading zero-width interval; no values give (nan, nan, nan). NaN values
    propagate on purpose: a failed cell should be visible, not silently dropped.
    """
    values = np.asarray(values, dtype=float).ravel()
    _two_sided_z(confidence)
    n = values.size
    if n == 0:
        return (float("nan"), float("nan"), float("nan"))
    mean = float(values.mean())
    if n == 1:
        return (mean, float("nan"), float("nan"))
    sem = float(values.std(ddof=1)) / np.sqrt(n)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, df=n - 1)) * sem
    return (mean, mean - half, mean + half)


def interval_p_value(mean: float, low: float, high: float, chance: float, n_seeds: float = np.nan,
                     t_interval: bool = False, confidence: float = 0.95) -> float:
    """One-sided p-value of "the score is above ``chance``", recovered from a logged mean and its interval.

    Used by the reports that read MLflow (``reporting/study_runs.py``) and by study C's claims decided from an
    interval. A parent run logs the mean and a ``confidence`` interval (0.95: the level of every interval the
    sweeps log), not the per-seed values. For a Student-t interval
    over ``n_seeds`` seeds (``t_interval``) the half-width is t(n−1)·SD/√n, so the one-sample t statistic is
    exact: ``(mean − chance) · t_crit / half``, referred to t(n−1) — the test ``studies/federated/report.py`` runs
    on the per-seed means. Any other interval (a bootstrap) gives a normal approximation (the half-width read as
    z·SE). NaN where the interval, the chance level, or (for a t-interval) the seed count is missing, or the
    interval has no width: a cell without a test is printed untested, never called significant.
    """
    values = np.array([mean, low, high, chance], dtype=float)
    half = (high - low) / 2.0
    if not np.all(np.isfinite(values)) or half <= 0:
        return float("nan")
    level = 0.5 + confidence / 2.0
    if t_interval:
        if not np.isfinite(n_seeds) or n_seeds < 2:
            return float("nan")
        df = float(n_seeds) - 1.0
        return float(stats.t.sf((mean - chance) * stats.t.ppf(level, df) / half, df))
    return float(stats.norm.sf((mean - chance) * stats.norm.ppf(level) / half))
