"""Release-side defenses, the Wiener attacker and the closes-the-channel rule, on constructed embeddings."""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas, synth  # noqa: F401
from sklearn.base import clone

from eegprivacy.embeddings.defenses import (
    NOISE_SIGMAS,
    CoordinateDropout,
    GaussianNoiseDefense,
    PCABottleneck,
    WienerAttacker,
    closes_channel,
    utility_balanced_accuracy,
)
from eegprivacy.embeddings.endpoints.attribute import attribute_leakage
from eegprivacy.embeddings.endpoints.decoder import AttributeDecoder
from eegprivacy.embeddings.splits import SubjectDisjointSplit

SPLIT = SubjectDisjointSplit(4, random_state=0)


def test_noise_is_scaled_per_dimension_and_seeded():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((4000, 3)) * np.array([1.0, 10.0, 100.0])
    d = GaussianNoiseDefense(sigma=0.5, random_state=3)
    assert d.fit(Z) is d
    noise = d.transform(Z) - Z
    np.testing.assert_allclose(noise.std(axis=0) / Z.std(axis=0), 0.5, rtol=0.05)
    again = GaussianNoiseDefense(sigma=0.5, random_state=3).fit(Z).transform(Z) - Z
    np.testing.assert_array_equal(noise, again)
    assert NOISE_SIGMAS == (0.1, 0.3, 1.0, 3.0)
    with pytest.raises(ValueError):
        GaussianNoiseDefense(sigma=-1).fit(Z)


def test_noise_reduces_leakage_monotonically():
    Z, A, groups, _ = synth(leak=1.0, noise=0.5)
    scores = []
    for sigma in (0.0, 1.0, 3.0, 10.0):
        released = GaussianNoiseDefense(sigma, random_state=0).fit_transform(Z)
        scores.append(attribute_leakage(released, A, groups, SPLIT, n_permutations=0).gain)
    assert scores[0] > 0.9
    assert all(a > b for a, b in zip(scores, scores[1:]))
    assert scores[-1] < 0.3


def test_pca_bottleneck_and_dropout_shapes_and_effect():
    Z, A, groups, _ = synth(leak=1.0, dim=16)
    pca = PCABottleneck(n_components=3, random_state=0).fit(Z)
    assert pca.transform(Z).shape == (Z.shape[0], 3)
    drop = CoordinateDropout(rate=0.75, random_state=0).fit(Z)
    assert drop.kept_.size == 4 and drop.transform(Z).shape == (Z.shape[0], 4)
    np.testing.assert_array_equal(drop.transform(Z), Z[:, drop.kept_])
    assert CoordinateDropout(rate=0.99).fit(Z).kept_.size == 1
    with pytest.raises(ValueError):
        CoordinateDropout(rate=1.0).fit(Z)
    # the attribute lives in a 5-dim subspace: a 1-dim bottleneck loses most of it
    full = attribute_leakage(Z, A, groups, SPLIT, n_permutations=0).gain
    one = attribute_leakage(PCABottleneck(1).fit_transform(Z), A, groups, SPLIT, n_permutations=0).gain
    assert one < full - 0.2


def test_wiener_gain_limits():
    Z, A, groups, _ = synth(leak=1.0)
    clean = WienerAttacker(sigma=0.0).fit(Z, A, groups)
    np.testing.assert_allclose(clean.shrink(Z), Z, atol=1e-8)  # no noise: identity
    heavy = WienerAttacker(sigma=100.0).fit(Z, A, groups)
    assert np.abs(heavy.shrink(Z) - heavy.mean_).max() < 0.01 * np.abs(Z - heavy.mean_).max()
    noisy_shadow = WienerAttacker(sigma=1.0, shadow_is_clean=False).fit(Z, A, groups)
    eig = np.linalg.eigvals(noisy_shadow.gain_)  # W = C_s C_y^-1 is similar to a PSD contraction
    assert np.abs(eig.imag).max() < 1e-8 and eig.real.min() > -1e-8 and eig.real.max() < 1 + 1e-8
    assert clone(clean).get_params()["sigma"] == 0.0


def test_wiener_attacker_beats_non_adaptive_attackers_on_noisy_release():
    """Released embeddings noised at sigma = 3. The adaptive attacker (clean shadow, Wiener shrinkage) must
    recover more than the same decoder applied to the noisy release directly, and more than a decoder
    trained on the noisy release itself."""
    Z, A, groups, _ = synth(n_subjects=16, leak=1.0, noise=0.3, dim=64, seed=4)
    sigma = 3.0
    released = GaussianNoiseDefense(sigma, random_state=0).fit_transform(Z)
    fixed = AttributeDecoder(alphas=[1e-3])
    naive = attribute_leakage(released, A, groups, SPLIT, decoder=fixed, Z_fit=Z, n_permutations=0)
    on_release = attribute_leakage(released, A, groups, SPLIT, n_permutations=0)
    wiener = attribute_leakage(released, A, groups, SPLIT, decoder=WienerAttacker(sigma, decoder=fixed), Z_fit=Z,
                               n_permutations=0)
    assert wiener.score > naive.score + 0.04
    assert wiener.score > on_release.score + 0.02
    assert abs(wiener.control_gaussian) < 0.1 and abs(wiener.control_permuted) < 0.1


def test_utility_and_closes_channel():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(10), 20)
    y = np.tile([0, 1], 100)
    Z = rng.standard_normal((200, 8)) + 2.0 * y[:, None]
    acc = utility_balanced_accuracy(Z, y, groups, SPLIT)
    assert acc > 0.9
    assert utility_balanced_accuracy(rng.standard_normal((200, 8)), y, groups, SPLIT) < 0.65

    Zn, An, gn, _ = synth(leak=0.0, seed=1)
    Zl, Al, gl, _ = synth(leak=1.0, seed=1)
    none = attribute_leakage(Zn, An, gn, SPLIT, n_permutations=0)
    leaky = attribute_leakage(Zl, Al, gl, SPLIT, n_permutations=0)
    assert closes_channel(none, acc)
    assert not closes_channel(none, 0.55)  # utility destroyed
    assert not closes_channel(leaky, acc)  # leakage remains
    assert closes_channel((-0.05, 0.02), 0.6) and not closes_channel((0.01, 0.2), 0.9)
    assert not closes_channel((np.nan, np.nan), 0.9)
