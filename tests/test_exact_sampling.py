"""Idealised vs exact sampling (issue 20): every formal guarantee says it holds under idealised sampling, and a
release of real data can draw its noise with OpenDP's exact samplers, whose distribution matches the fast path's."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from eegprivacy.privacy import SAMPLING, DPFeatureReleaser, guarantee_label, make_mechanism, release_table

pytest.importorskip("opendp")


@pytest.mark.parametrize("name", ["gaussian_analytic", "laplace_formal"])
def test_calibration_says_idealised_sampling(name):
    calib = make_mechanism(name, 1.0).calibrate(2.0, 8)
    assert calib.formal_guarantee and calib.sampling == "idealised"
    assert calib.to_dict()["sampling"] == "idealised"
    assert guarantee_label(calib) == "yes (idealised sampling)"
    assert guarantee_label(calib.to_dict()) == "yes (idealised sampling)"
    assert "not for releasing real data" in SAMPLING["idealised"]


def test_informal_calibration_is_labelled_no():
    calib = make_mechanism("laplace_implemented", 1.0).calibrate(2.0, 8)
    assert guarantee_label(calib) == "NO"


@pytest.mark.parametrize("name", ["gaussian_analytic", "laplace_formal", "laplace_implemented"])
def test_opendp_noise_matches_numpy_distribution(name):
    """Two-sample KS test between OpenDP's exact draws and the seeded numpy draws at the same calibration, on a
    constant input (the noise alone), plus a test that a wrong scale is told apart (the test has power)."""
    mech = make_mechanism(name, 1.0)
    calib = mech.calibrate(1.0, 4)
    X = np.full((1000, 4), 0.25)
    exact = mech.privatise(X, calib, sampler="opendp") - X
    fast = mech.privatise(X, calib, np.random.default_rng(0), sampler="numpy") - X
    assert stats.ks_2samp(exact.ravel(), fast.ravel()).pvalue > 1e-3
    wrong = mech.privatise(X, replace(calib, noise_scale=1.3 * calib.noise_scale), np.random.default_rng(1)) - X
    assert stats.ks_2samp(exact.ravel(), wrong.ravel()).pvalue < 1e-3


def test_numpy_path_is_the_old_sample():
    """The seeded path is bit-identical to clipped + sample(), so every simulated number stays as it was."""
    mech = make_mechanism("gaussian_analytic", 2.0)
    calib = mech.calibrate(2.0, 3)
    X = np.arange(15, dtype=float).reshape(5, 3)
    a = mech.privatise(X, calib, np.random.default_rng(7))
    b = X + mech.sample(X.shape, calib, np.random.default_rng(7))
    assert np.array_equal(a, b)


def test_releaser_with_opendp_says_exact_and_refuses_unknown_sampler():
    X = np.random.default_rng(0).normal(size=(30, 5))
    released, releaser = release_table(X, "laplace_formal", 1.0, 0.0, 2.0, sampler="opendp")
    assert released.shape == X.shape and np.isfinite(released).all()
    assert releaser.calibration_.sampling == "exact" and releaser.release_info()["sampling"] == "exact"
    assert guarantee_label(releaser.calibration_) == "yes (exact sampling)"
    with pytest.raises(ValueError, match="sampler must be one of"):
        DPFeatureReleaser(make_mechanism("laplace_formal", 1.0), sampler="secure").fit(X)
