"""Study C cross-encoder bridge on constructed encoder pairs: a shared attribute transfers through the bridge,
a target encoder without attribute information does not, and the controls read about 0."""

from __future__ import annotations

import numpy as np
import pytest
from _audit_synth import single_thread_blas, synth  # noqa: F401

from eegprivacy.embeddings.bridge import BridgedDecoder, BridgeResult, bridge_transfer
from eegprivacy.embeddings.splits import SubjectDisjointSplit

DIM_S, DIM_T = 64, 32


def encoder_pair(seed=0, n_subjects=16, n_windows=20):
    """(Z_s, Z_t, Z_noise, A, groups): s and t are different random linear maps of a shared latent
    [A, nuisance] plus independent noise; Z_noise is a t-shaped encoder independent of A."""
    _, A, groups, _ = synth(n_subjects=n_subjects, n_windows=n_windows, dim=4, seed=seed)
    rng = np.random.default_rng(seed + 100)
    n = A.shape[0]
    latent = np.hstack([A, rng.standard_normal((n, 3))])
    Z_s = latent @ rng.standard_normal((8, DIM_S)) + rng.standard_normal((n, DIM_S))
    Z_t = latent @ rng.standard_normal((8, DIM_T)) + rng.standard_normal((n, DIM_T))
    Z_noise = rng.standard_normal((n, DIM_T))
    return Z_s, Z_t, Z_noise, A, groups


@pytest.fixture(scope="module")
def results():
    Z_s, Z_t, Z_noise, A, groups = encoder_pair()
    split = SubjectDisjointSplit(4, random_state=0)
    shared = bridge_transfer(Z_s, Z_t, A, groups, split, n_permutations=5, random_state=0)
    blind = bridge_transfer(Z_s, Z_noise, A, groups, split, n_permutations=5, random_state=0)
    return shared, blind


def test_shared_attribute_transfers(results):
    shared, _ = results
    assert isinstance(shared, BridgeResult)
    assert shared.gain > 0.5 and shared.leakage.ci[0] > 0.2
    assert shared.beta > 0.5
    assert 0.0 <= shared.bridge_error < 1.0 and 0.0 <= shared.tau2 < 1.0
    assert np.isfinite(shared.bound) and shared.bound <= 1.0
    assert shared.gain >= shared.bound
    assert shared.n_target_features == DIM_T and shared.n_source_features == DIM_S


def test_blind_target_does_not_transfer(results):
    shared, blind = results
    lo, hi = blind.leakage.ci
    # no evidence of transfer: the CI does not clear 0 (it may sit just below 0, because L_A subtracts the
    # larger of two noisy controls) and the gain is small
    assert lo <= 0.0 and hi < 0.1 and abs(blind.gain) < 0.12
    assert blind.beta < 0.5 and blind.beta < shared.beta - 0.2
    assert blind.tau2 > 10.0  # t's own decoder predicts ~nothing
    assert blind.bound < 0.0  # the bound promises nothing here
    assert blind.bridge_error > 0.9


def test_controls_read_zero(results):
    for res in results:
        d = res.as_dict()
        assert abs(d["control_gaussian"]) < 0.08 and abs(d["control_permuted"]) < 0.08
        assert d["rho0"] == max(d["control_gaussian"], d["control_permuted"])
        assert np.isclose(d["bound"], np.sqrt(d["beta"] / (1 + d["tau2"])) - d["bridge_error"] - d["rho0"])
        assert all(isinstance(v, float) for v in d.values())


def test_bridged_decoder_contract():
    Z_s, Z_t, _, A, groups = encoder_pair(n_subjects=8, n_windows=10)
    Z = np.hstack([Z_t, Z_s])
    model = BridgedDecoder(DIM_T, random_state=0)
    assert model.fit(Z, A, groups) is model
    fitted = [k for k in vars(model) if k.endswith("_")]
    assert {"decoder_", "bridge_", "alpha_", "bridge_alpha_", "n_features_in_"} <= set(fitted)
    assert not [k for k in vars(model) if not k.endswith("_") and k not in model.get_params()]
    pred = model.predict(Z)
    assert pred.shape == A.shape
    Z_other = Z.copy()
    Z_other[:, DIM_T:] = np.random.default_rng(1).standard_normal(Z_s.shape)  # source columns changed
    np.testing.assert_array_equal(model.predict(Z_other), pred)
    np.testing.assert_array_equal(model.predict(Z_t), pred)  # source columns not even needed
    assert model.bridge_.predict(Z_t).shape == Z_s.shape


def test_deterministic():
    Z_s, Z_t, _, A, groups = encoder_pair(seed=3, n_subjects=8, n_windows=10)
    split = SubjectDisjointSplit(4, random_state=1)
    a = bridge_transfer(Z_s, Z_t, A, groups, split, n_permutations=2, random_state=7).as_dict()
    b = bridge_transfer(Z_s, Z_t, A, groups, split, n_permutations=2, random_state=7).as_dict()
    assert a == b


def test_shape_errors_are_clear():
    Z_s, Z_t, _, A, groups = encoder_pair(n_subjects=8, n_windows=10)
    split = SubjectDisjointSplit(4, random_state=0)
    with pytest.raises(ValueError, match="row counts differ"):
        bridge_transfer(Z_s, Z_t, A[:-3], groups, split)
    with pytest.raises(ValueError, match="row counts differ"):
        bridge_transfer(Z_s[:-1], Z_t, A, groups, split)
    with pytest.raises(ValueError, match="one row per row of Z"):
        BridgedDecoder(DIM_T).fit(np.hstack([Z_t, Z_s]), A[:-3], groups)
    with pytest.raises(ValueError, match="n_target_features"):
        BridgedDecoder(DIM_T + DIM_S).fit(np.hstack([Z_t, Z_s]), A, groups)
