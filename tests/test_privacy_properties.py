"""Privacy correctness as properties: clipping and the replace-one sensitivity bounds the mechanisms are calibrated
with hold for arbitrary finite tables (hypothesis), and every mechanism draws exactly the noise distribution its
calibration promises (Kolmogorov–Smirnov). Hypothesis runs derandomized (profile in conftest.py): no flakes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from eegprivacy.privacy import (
    MECHANISMS,
    DPFeatureReleaser,
    l1_sensitivity_replace_one,
    l2_sensitivity_replace_one,
    make_mechanism,
)
from eegprivacy.privacy.release import clip_rows_l2
from eegprivacy.privacy.scaling import PublicReferenceScaler

# Float rounding of the clip (one division, one multiplication per coordinate) and of the norms measured here.
RTOL = 1e-12
MAX_DIM = 40

# any finite double, from subnormals to 1.8e308: the bounds must hold whatever a feature computes
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# clipping norms a study can choose; far below 1e-3 the clipped coordinates become subnormal and rounding, not
# clipping, sets their size
clip_norms = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
dims = st.integers(min_value=1, max_value=MAX_DIM)


@st.composite
def neighbours(draw, elements=finite):
    """(X, X', i): a table and its replace-one neighbour, which differs from it in row i only."""
    n, d = draw(st.integers(1, 6)), draw(dims)
    X = draw(arrays(np.float64, (n, d), elements=elements))
    i = draw(st.integers(0, n - 1))
    other = X.copy()
    other[i] = draw(arrays(np.float64, d, elements=elements))
    return X, other, i


def _norms(X: np.ndarray) -> np.ndarray:
    """Row L2 norms without overflow (scaled by the largest coordinate), so the check itself is exact enough."""
    top = np.max(np.abs(X), axis=1, keepdims=True)
    safe = np.where(top > 0, top, 1.0)
    return top[:, 0] * np.linalg.norm(X / safe, axis=1)


# ---- clipping ------------------------------------------------------------------------------------------------

@given(X=st.integers(1, 6).flatmap(lambda n: dims.flatmap(lambda d: arrays(np.float64, (n, d), elements=finite))),
       C=clip_norms)
def test_clipped_rows_lie_in_the_c_ball_for_any_finite_table(X, C):
    with np.errstate(over="ignore"):  # |x| > 1e154 overflows ‖x‖²: such a row becomes 0, still inside the ball
        clipped = clip_rows_l2(X, C)
    assert clipped.shape == X.shape and np.isfinite(clipped).all()
    assert (_norms(clipped) <= C * (1 + RTOL)).all()


moderate = st.floats(min_value=-1e100, max_value=1e100, allow_nan=False, allow_infinity=False)


@given(X=st.integers(1, 6).flatmap(lambda n: dims.flatmap(lambda d: arrays(np.float64, (n, d), elements=moderate))),
       C=clip_norms)
def test_clipping_keeps_rows_inside_and_only_shrinks_the_others(X, C):
    """Where the squared norm does not overflow (|x| < 1e154), clipping is x·min(1, C/‖x‖): rows inside the
    ball are untouched, rows outside keep their direction and land on the sphere."""
    clipped = clip_rows_l2(X, C)
    norms = np.linalg.norm(X, axis=1)
    inside = norms <= C
    np.testing.assert_array_equal(clipped[inside], X[inside])
    outside = ~inside
    np.testing.assert_allclose(_norms(clipped[outside]), C, rtol=1e-9)
    expected = X[outside] * (C / norms[outside])[:, None]
    np.testing.assert_allclose(clipped[outside], expected, rtol=1e-9, atol=0)


# ---- the replace-one sensitivity bounds ----------------------------------------------------------------------

@given(pair=neighbours(), C=clip_norms)
def test_clipped_replace_one_neighbours_respect_the_l2_and_l1_bounds(pair, C):
    X, other, i = pair
    d = X.shape[1]
    with np.errstate(over="ignore"):
        delta = clip_rows_l2(X, C) - clip_rows_l2(other, C)
    untouched = np.arange(len(X)) != i
    assert not delta[untouched].any()  # only the replaced patient's row can move
    change = delta[i]
    top = np.max(np.abs(change))
    l2 = top * np.linalg.norm(change / top) if top > 0 else 0.0
    assert l2 <= l2_sensitivity_replace_one(C) * (1 + RTOL)
    assert math.fsum(np.abs(change)) <= l1_sensitivity_replace_one(C, d) * (1 + RTOL)


@given(pair=neighbours(elements=st.floats(-1e6, 1e6)), C=clip_norms,
       public=arrays(np.float64, (5, MAX_DIM), elements=st.floats(-1e3, 1e3)))
def test_the_mechanism_input_of_neighbouring_tables_respects_the_calibrated_sensitivity(pair, C, public):
    """End to end up to the noise: with scaling statistics fixed (a public reference cohort), the rows two
    neighbouring tables hand the mechanism differ by at most the sensitivity each mechanism calibrates with."""
    X, other, i = pair
    d = X.shape[1]
    scaler = PublicReferenceScaler().fit(public[:, :d])
    for name in MECHANISMS:
        mechanism = make_mechanism(name, 1.0)
        a = DPFeatureReleaser(mechanism, clip_norm=C, scaler=scaler).fit(X)
        b = DPFeatureReleaser(mechanism, clip_norm=C, scaler=scaler).fit(other)
        change = a.clipped_ - b.clipped_
        assert not np.delete(change, i, axis=0).any()
        calibration = a.calibration_
        size = (np.linalg.norm(change[i]) if calibration.sensitivity_norm == "L2"
                else math.fsum(np.abs(change[i])))
        assert size <= calibration.sensitivity * (1 + RTOL), name
        expected = (l2_sensitivity_replace_one(C) if calibration.sensitivity_norm == "L2"
                    else l1_sensitivity_replace_one(C, d))
        assert calibration.sensitivity == expected


@given(C=clip_norms, d=dims)
def test_the_bounds_are_reached_so_the_calibration_is_not_loose(C, d):
    """±C·e1 attains Δ2 = 2C; ±(C/√d)·1 attains Δ1 = 2·√d·C (the pairs the DP audit uses)."""
    axis = np.zeros((1, d))
    axis[0, 0] = C
    assert np.linalg.norm(clip_rows_l2(axis, C) - clip_rows_l2(-axis, C)) == pytest.approx(
        l2_sensitivity_replace_one(C), rel=1e-12)
    diagonal = np.full((1, d), C / math.sqrt(d))
    assert math.fsum(np.abs(clip_rows_l2(diagonal, C) - clip_rows_l2(-diagonal, C))[0]) == pytest.approx(
        l1_sensitivity_replace_one(C, d), rel=1e-9)
    assert l1_sensitivity_replace_one(C, d) >= l2_sensitivity_replace_one(C)


# ---- noise distributions -------------------------------------------------------------------------------------

FAMILY = {"gaussian_analytic": "norm", "gaussian_classic": "norm", "laplace_implemented": "laplace",
          "laplace_formal": "laplace"}
SETTINGS = [(0.5, 2.0, 363), (1.0, 2.0, 209), (10.0, 0.5, 1)]
N_DRAWS = 40_000


def test_every_registered_mechanism_has_a_distribution_test():
    assert set(FAMILY) == set(MECHANISMS)


def _analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """δ of the Gaussian mechanism with noise σ at ε (Balle & Wang 2018, Theorem 8): exact, not a bound."""
    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b)


@pytest.mark.parametrize("name", sorted(FAMILY))
@pytest.mark.parametrize(("epsilon", "clip_norm", "dim"), SETTINGS)
def test_noise_scale_follows_the_mechanisms_formula(name, epsilon, clip_norm, dim):
    delta = 1e-5
    calibration = make_mechanism(name, epsilon, delta).calibrate(clip_norm, dim)
    l2, l1 = 2 * clip_norm, 2 * math.sqrt(dim) * clip_norm
    scale = calibration.noise_scale
    if name == "gaussian_classic":
        assert scale == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) * l2 / epsilon, rel=1e-12)
    elif name == "laplace_implemented":
        assert scale == pytest.approx(l2 / epsilon, rel=1e-12)
    elif name == "laplace_formal":
        assert scale == pytest.approx(l1 / epsilon, rel=1e-12)
    else:  # analytic: the smallest σ whose exact δ is at most the target
        assert _analytic_gaussian_delta(scale, epsilon, l2) <= delta * (1 + 1e-6)
        assert _analytic_gaussian_delta(0.99 * scale, epsilon, l2) > delta


@pytest.mark.parametrize("name", sorted(FAMILY))
@pytest.mark.parametrize(("epsilon", "clip_norm", "dim"), SETTINGS)
def test_sampled_noise_has_the_calibrated_distribution(name, epsilon, clip_norm, dim):
    mechanism = make_mechanism(name, epsilon, 1e-5)
    calibration = mechanism.calibrate(clip_norm, dim)
    rows = -(-N_DRAWS // dim)
    noise = mechanism.sample((rows, dim), calibration, np.random.default_rng([7, dim, int(epsilon * 10)]))
    assert noise.shape == (rows, dim)
    draws = noise.ravel()
    family, scale = FAMILY[name], calibration.noise_scale
    assert stats.kstest(draws, family, args=(0.0, scale)).pvalue > 0.001
    # the test has power: 10 % too little noise, or the other family at the same variance, is rejected
    assert stats.kstest(draws, family, args=(0.0, 0.9 * scale)).pvalue < 1e-6
    other, other_scale = (("laplace", scale / math.sqrt(2)) if family == "norm" else ("norm", scale * math.sqrt(2)))
    assert stats.kstest(draws, other, args=(0.0, other_scale)).pvalue < 1e-6
    # coordinates are independent: no correlation between neighbouring features
    if dim > 1:
        assert abs(np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]) < 5 / math.sqrt(rows)


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_noise_is_seeded(name):
    mechanism = make_mechanism(name, 1.0, 1e-5)
    calibration = mechanism.calibrate(2.0, 20)
    first = mechanism.sample((3, 20), calibration, 5)
    np.testing.assert_array_equal(first, mechanism.sample((3, 20), calibration, 5))
    assert not np.array_equal(first, mechanism.sample((3, 20), calibration, 6))
