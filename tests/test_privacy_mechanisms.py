"""Calibration reproduces the study-A paper's tables; sampling matches diffprivlib's own draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from diffprivlib.mechanisms import GaussianAnalytic as DPLGaussianAnalytic
from diffprivlib.mechanisms import Laplace as DPLLaplace
from scipy.stats import ks_2samp

from eegprivacy.privacy import (
    MECHANISMS,
    Calibration,
    GaussianAnalytic,
    l1_sensitivity_replace_one,
    l2_sensitivity_replace_one,
    make_mechanism,
)

D, C, DELTA = 363, 2.0, 1e-5
EPSILONS = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
PAPER_SIGMA = [28.1273, 14.9225, 7.9752, 3.5675, 1.9996, 1.1602]  # Table 3
PAPER_B_FORMAL = [152.42, 76.21, 38.10, 15.24, 7.62, 3.81]  # eq. 15
PAPER_B_IMPL = [8.0, 4.0, 2.0, 0.8, 0.4, 0.2]  # eq. 12


def test_sensitivities_are_derived_from_the_clip_norm():
    assert l2_sensitivity_replace_one(C) == 4.0
    assert l1_sensitivity_replace_one(C, D) == pytest.approx(2 * math.sqrt(363) * 2.0)
    assert round(l1_sensitivity_replace_one(C, D), 2) == 76.21
    assert l1_sensitivity_replace_one(C, 1) == l2_sensitivity_replace_one(C)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError):
            l2_sensitivity_replace_one(bad)
    with pytest.raises(ValueError):
        l1_sensitivity_replace_one(C, 0)


@pytest.mark.parametrize(("epsilon", "sigma"), zip(EPSILONS, PAPER_SIGMA))
def test_analytic_gaussian_reproduces_paper_table_3(epsilon, sigma):
    cal = make_mechanism("gaussian_analytic", epsilon, DELTA).calibrate(C, D)
    assert round(cal.noise_scale, 4) == sigma
    assert (cal.sensitivity, cal.sensitivity_norm, cal.formal_guarantee) == (4.0, "L2", True)
    assert cal.noise_scale == pytest.approx(DPLGaussianAnalytic(epsilon=epsilon, delta=DELTA, sensitivity=4.0)._scale,
                                            rel=1e-12)


@pytest.mark.parametrize(("epsilon", "b_formal", "b_impl"), zip(EPSILONS, PAPER_B_FORMAL, PAPER_B_IMPL))
def test_laplace_scales_reproduce_paper_equations_12_and_15(epsilon, b_formal, b_impl):
    formal = make_mechanism("laplace_formal", epsilon).calibrate(C, D)
    impl = make_mechanism("laplace_implemented", epsilon).calibrate(C, D)
    # The paper divides the rounded Δ1 = 76.21 by ε (hence 38.10 at ε = 2, where exact Δ1/2 = 38.105).
    assert round(round(formal.sensitivity, 2) / epsilon, 2) == pytest.approx(b_formal)
    assert formal.noise_scale == pytest.approx(b_formal, abs=0.006)
    assert formal.noise_scale == pytest.approx(l1_sensitivity_replace_one(C, D) / epsilon)
    assert (formal.sensitivity_norm, formal.formal_guarantee) == ("L1", True)
    assert impl.noise_scale == pytest.approx(b_impl)
    assert (impl.sensitivity, impl.formal_guarantee) == (4.0, False)
    assert "NOT a formal" in impl.note


def test_laplace_implemented_is_formal_only_in_one_dimension():
    assert make_mechanism("laplace_implemented", 1.0).calibrate(C, 1).formal_guarantee


def test_classic_gaussian_formula_and_its_validity_range():
    for epsilon in EPSILONS:
        cal = make_mechanism("gaussian_classic", epsilon, DELTA).calibrate(C, D)
        assert cal.noise_scale == pytest.approx(math.sqrt(2 * math.log(1.25 / DELTA)) * 4.0 / epsilon)
        assert cal.formal_guarantee is (epsilon < 1.0)
    # Where the classic theorem applies, analytic calibration needs less noise.
    assert (make_mechanism("gaussian_analytic", 0.5).calibrate(C, D).noise_scale
            < make_mechanism("gaussian_classic", 0.5).calibrate(C, D).noise_scale)


def test_registry_and_params():
    assert set(MECHANISMS) == {"gaussian_analytic", "gaussian_classic", "laplace_implemented", "laplace_formal"}
    for name in MECHANISMS:
        mech = make_mechanism(name, 2.0)
        assert mech.name == name and mech.epsilon == 2.0
        assert mech.to_dict() == {"mechanism": name, "epsilon": 2.0, "delta": mech.delta}
    assert make_mechanism("gaussian_analytic", 2.0).delta == DELTA
    assert make_mechanism("laplace_formal", 2.0, delta=1e-5).delta == 0.0  # pure ε-DP carries no δ
    with pytest.raises(ValueError, match="unknown mechanism"):
        make_mechanism("gaussian", 1.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            make_mechanism("gaussian_analytic", bad)
    with pytest.raises(ValueError):
        GaussianAnalytic(epsilon=1.0, delta=0.0)
    with pytest.raises(Exception):
        make_mechanism("laplace_formal", 1.0).epsilon = 2.0  # frozen: a mechanism is a value
    cal = make_mechanism("laplace_formal", 1.0).calibrate(C, D)
    assert isinstance(cal, Calibration) and cal.to_dict()["noise_scale"] == cal.noise_scale


def test_sample_refuses_another_mechanisms_calibration():
    cal = make_mechanism("laplace_formal", 1.0).calibrate(C, D)
    with pytest.raises(ValueError, match="calibration is for"):
        make_mechanism("gaussian_analytic", 1.0).sample((3, D), cal, np.random.default_rng(0))


def _diffprivlib_draws(mech, n):
    return np.array([mech.randomise(0.0) for _ in range(n)])


N = 20_000


def test_gaussian_sampler_matches_diffprivlib_draws():
    mech = make_mechanism("gaussian_analytic", 1.0)
    cal = mech.calibrate(C, D)
    ours = mech.sample((N,), cal, np.random.default_rng(1))
    theirs = _diffprivlib_draws(DPLGaussianAnalytic(epsilon=1.0, delta=DELTA, sensitivity=4.0, random_state=2), N)
    assert ks_2samp(ours, theirs).pvalue > 0.01
    assert np.std(ours) == pytest.approx(cal.noise_scale, rel=0.02)
    assert np.std(theirs) == pytest.approx(cal.noise_scale, rel=0.02)
    # The test has power: a 15% wrong scale is rejected.
    assert ks_2samp(1.15 * ours, theirs).pvalue < 1e-3


@pytest.mark.parametrize("name", ["laplace_implemented", "laplace_formal"])
def test_laplace_sampler_matches_diffprivlib_draws(name):
    mech = make_mechanism(name, 2.0)
    cal = mech.calibrate(C, D)
    ours = mech.sample((N,), cal, np.random.default_rng(3))
    theirs = _diffprivlib_draws(DPLLaplace(epsilon=2.0, delta=0.0, sensitivity=cal.sensitivity, random_state=4), N)
    assert ks_2samp(ours, theirs).pvalue > 0.01
    assert np.std(ours) == pytest.approx(math.sqrt(2) * cal.noise_scale, rel=0.02)
    assert ks_2samp(1.15 * ours, theirs).pvalue < 1e-3


def test_sampling_is_vectorised_and_seeded():
    mech = make_mechanism("gaussian_analytic", 1.0)
    cal = mech.calibrate(C, D)
    a = mech.sample((17, D), cal, np.random.default_rng(7))
    assert a.shape == (17, D)
    np.testing.assert_array_equal(a, mech.sample((17, D), cal, np.random.default_rng(7)))
    assert not np.array_equal(a, mech.sample((17, D), cal, np.random.default_rng(8)))
