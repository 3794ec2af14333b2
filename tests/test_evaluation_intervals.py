"""Wilson, t and bootstrap intervals: the paper's published Wilson bounds and independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from eegprivacy.evaluation import bootstrap_ci, mean_ci, wilson_interval

# (successes, n, low, high) as printed in study A, section 4.3 (3 decimals).
PAPER_WILSON = [
    (12, 17, 0.469, 0.867),  # original features, accuracy
    (3, 5, 0.231, 0.882),  # original, recall
    (9, 12, 0.468, 0.911),  # original, specificity
    (5, 17, 0.133, 0.531),  # Gaussian, accuracy
    (5, 5, 0.566, 1.000),  # Gaussian, recall
    (0, 12, 0.000, 0.242),  # Gaussian, specificity
    (4, 17, 0.096, 0.473),  # Laplace, accuracy
    (1, 12, 0.015, 0.354),  # Laplace, specificity
]


@pytest.mark.parametrize(("k", "n", "low", "high"), PAPER_WILSON)
def test_wilson_reproduces_paper(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert (round(lo, 3), round(hi, 3)) == (low, high)


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels(confidence):
    for n in (1, 2, 5, 12, 17, 36, 101):
        for k in range(n + 1):
            ref = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
            np.testing.assert_allclose(wilson_interval(k, n, confidence), ref, rtol=0, atol=1e-12)


def test_wilson_edges_are_exact():
    assert wilson_interval(0, 12)[0] == 0.0
    assert wilson_interval(5, 5)[1] == 1.0
    lo, hi = wilson_interval(0, 0)
    assert math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError):
        wilson_interval(6, 5)
    with pytest.raises(ValueError):
        wilson_interval(1, 5, confidence=1.0)


def test_mean_ci_matches_scipy_t_interval():
    values = np.random.default_rng(3).normal(0.7, 0.05, size=20)
    mean, lo, hi = mean_ci(values, confidence=0.9)
    ref = stats.t.interval(0.9, df=19, loc=values.mean(), scale=stats.sem(values))
    assert mean == pytest.approx(values.mean())
    np.testing.assert_allclose((lo, hi), ref, rtol=1e-12)


def test_mean_ci_degenerate_sizes():
    mean, lo, hi = mean_ci([0.42])
    assert mean == 0.42 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in mean_ci([]))
    assert mean_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert math.isnan(mean_ci([0.5, float("nan")])[0])  # a failed seed stays visible


def test_bootstrap_ci_is_seeded_and_agrees_with_scipy():
    values = np.random.default_rng(7).normal(1.0, 0.3, size=25)
    a = bootstrap_ci(values, n_resamples=4000, random_state=11)
    assert a == bootstrap_ci(values, n_resamples=4000, random_state=11)
    assert a != bootstrap_ci(values, n_resamples=4000, random_state=12)
    ref = stats.bootstrap(
        (values,), np.mean, n_resamples=4000, confidence_level=0.95, method="percentile", rng=5
    ).confidence_interval
    np.testing.assert_allclose(a, (ref.low, ref.high), atol=0.02)  # Monte Carlo error only
    assert a[0] < values.mean() < a[1]


def test_bootstrap_ci_non_vectorised_statistic_and_small_inputs():
    values = np.arange(10.0)
    lo, hi = bootstrap_ci(values, statistic=lambda v: float(np.percentile(v, 90)), n_resamples=500)
    assert 0.0 <= lo <= hi <= 9.0
    assert bootstrap_ci(values, statistic=np.median, n_resamples=500) == bootstrap_ci(
        values, statistic=lambda v: float(np.median(v)), n_resamples=500
    )
    assert all(math.isnan(v) for v in bootstrap_ci([1.0]))
