"""Release pipeline: patient aggregation, robust scaling, clipping, seeded noise, sklearn contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from eegprivacy.privacy import (
    SCALING_NOTE,
    DPFeatureReleaser,
    RobustFeatureScaler,
    clip_rows_l2,
    make_mechanism,
    patient_vectors,
)

FEATURES = ["Fz:rms", "Fz:line_length", "Cz:rms"]


def _window_table() -> pd.DataFrame:
    """Patient p1 has two recordings of unequal length, so pooled mean ≠ mean of recording means."""
    rows = []
    def add(subject, recording, label, values):
        for i, v in enumerate(values):
            rows.append({"dataset": "toy", "subject": subject, "recording": recording, "label": label, "window": i,
                         **dict(zip(FEATURES, v))})
    add("p2", "r1", 0, [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    add("p1", "r1", 1, [[0.0, 0.0, 0.0]])
    add("p1", "r2", 1, [[3.0, 6.0, 9.0], [3.0, 6.0, 9.0]])
    add("p3", "r1", 0, [[5.0, 5.0, 5.0]])
    return pd.DataFrame(rows)


def test_patient_vectors_pool_all_windows_of_all_recordings():
    X, y, groups = patient_vectors(_window_table(), FEATURES)
    assert list(groups) == ["p1", "p2", "p3"]  # one row per patient, ids only in the private list
    assert len(X) == 3 and list(X.index) == [0, 1, 2]
    np.testing.assert_allclose(X.iloc[0], [2.0, 4.0, 6.0])  # (0+3+3)/3, not ((0)+(3))/2
    np.testing.assert_allclose(X.iloc[1], [2.0, 3.0, 4.0])
    np.testing.assert_allclose(X.iloc[2], [5.0, 5.0, 5.0])
    assert list(y) == [1, 0, 0]
    assert list(X.columns) == FEATURES
    for identifier in ("subject", "recording", "dataset", "label", "window"):
        assert identifier not in X.columns
    assert not X.isin(["p1", "p2", "p3"]).any().any()


def test_patient_vectors_refuses_mixed_labels_and_identifier_features():
    table = _window_table()
    table.loc[table.index[0], "label"] = 1
    with pytest.raises(ValueError, match="more than one"):
        patient_vectors(table, FEATURES)
    with pytest.raises(ValueError, match="cannot be feature"):
        patient_vectors(_window_table(), [*FEATURES, "subject"])
    X, y, _ = patient_vectors(_window_table(), FEATURES, label=None)
    assert y is None and len(X) == 3


def test_robust_scaling_gives_median_0_iqr_1_and_floors_constant_columns():
    rng = np.random.default_rng(0)
    X = rng.lognormal(size=(17, 5)) * [1, 10, 100, 1000, 1]
    X[:, 4] = 3.0  # IQR 0 → divided by 1.0
    scaler = RobustFeatureScaler().fit(X)
    Z = scaler.transform(X)
    q25, med, q75 = np.percentile(Z, [25, 50, 75], axis=0)
    np.testing.assert_allclose(med, 0.0, atol=1e-12)
    np.testing.assert_allclose((q75 - q25)[:4], 1.0, rtol=1e-12)
    assert scaler.scale_[4] == 1.0
    np.testing.assert_array_equal(Z[:, 4], 0.0)
    # A near-constant column (IQR ≤ 1e-9) is centred but not blown up.
    X[:, 4] = 3.0 + np.linspace(0, 1e-10, 17)
    assert RobustFeatureScaler().fit(X).scale_[4] == 1.0


def test_clipping_bounds_every_row_and_leaves_rows_inside_unchanged():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 363)) * rng.uniform(0.0001, 0.3, size=(200, 1))
    X[0] = 0.0
    norms = np.linalg.norm(X, axis=1)
    assert (norms > 2.0).any() and (norms <= 2.0).any()
    clipped = clip_rows_l2(X, 2.0)
    assert np.all(np.linalg.norm(clipped, axis=1) <= 2.0 * (1 + 1e-12))
    inside = norms <= 2.0
    np.testing.assert_array_equal(clipped[inside], X[inside])
    outside = ~inside
    np.testing.assert_allclose(np.linalg.norm(clipped[outside], axis=1), 2.0, rtol=1e-12)
    np.testing.assert_allclose(clipped[outside] / np.linalg.norm(clipped[outside], axis=1, keepdims=True),
                               X[outside] / norms[outside, None])  # direction kept
    with pytest.raises(ValueError):
        clip_rows_l2(X, 0.0)


def _patients(n=17, d=40, seed=0):
    return pd.DataFrame(np.random.default_rng(seed).lognormal(size=(n, d)), columns=[f"f{i}" for i in range(d)])


def test_release_is_scale_clip_noise_and_says_what_it_guarantees():
    X = _patients()
    rel = DPFeatureReleaser(make_mechanism("gaussian_analytic", 10.0), clip_norm=2.0, random_state=0)
    out = rel.fit_transform(X)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == list(X.columns)
    expected_scaled = (X.to_numpy() - np.median(X, axis=0)) / (np.percentile(X, 75, axis=0)
                                                                - np.percentile(X, 25, axis=0))
    np.testing.assert_allclose(rel.scaled_, expected_scaled)
    np.testing.assert_allclose(rel.clipped_, clip_rows_l2(expected_scaled, 2.0))
    noise = out.to_numpy() - rel.clipped_
    assert np.std(noise) == pytest.approx(rel.calibration_.noise_scale, rel=0.1)
    info = rel.release_info()
    assert info["formal_guarantee"] is True and info["end_to_end_guarantee"] is False
    assert info["scaling_note"] == SCALING_NOTE and "not cover" in SCALING_NOTE
    assert info["noise_scale"] == rel.calibration_.noise_scale and info["dim"] == 40
    assert not any(str(v) in {"p1", "p2"} for v in info.values())

    laplace = DPFeatureReleaser(make_mechanism("laplace_implemented", 10.0), random_state=0).fit(X)
    assert laplace.calibration_.formal_guarantee is False
    assert laplace.release_info()["formal_guarantee"] is False


def test_same_seed_same_release_different_seed_different():
    X = _patients()
    mech = make_mechanism("laplace_formal", 5.0)
    a = DPFeatureReleaser(mech, random_state=11).fit_transform(X)
    b = DPFeatureReleaser(mech, random_state=11).fit_transform(X)
    c = DPFeatureReleaser(mech, random_state=12).fit_transform(X)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a, c)
    # Each further transform is a fresh release (fresh noise), and refitting restarts the seeded stream.
    rel = DPFeatureReleaser(mech, random_state=11).fit(X)
    first, second = rel.transform(X), rel.transform(X)
    pd.testing.assert_frame_equal(first, a)
    assert not np.allclose(first, second)
    pd.testing.assert_frame_equal(rel.fit(X).transform(X), a)


def test_noise_stream_is_independent_of_a_data_generator_with_the_same_seed():
    X = pd.DataFrame(np.random.default_rng(0).lognormal(size=(17, 363)))
    rel = DPFeatureReleaser(make_mechanism("gaussian_analytic", 0.5), random_state=0)
    noise = rel.fit_transform(X).to_numpy() - rel.clipped_
    assert abs(np.corrcoef(noise.ravel(), rel.scaled_.ravel())[0, 1]) < 0.05


def test_sklearn_contract():
    X = _patients().to_numpy()
    rel = DPFeatureReleaser(make_mechanism("gaussian_analytic", 2.0), clip_norm=1.5, random_state=3)
    assert rel.fit(X) is rel
    assert {"center_", "scale_", "calibration_", "clipped_", "n_features_in_"} <= set(vars(rel))
    twin = clone(rel)
    assert twin.get_params() == rel.get_params()
    assert not hasattr(twin, "calibration_")
    np.testing.assert_array_equal(twin.fit_transform(X), clone(rel).fit_transform(X))
    assert rel.set_params(clip_norm=1.0) is rel and rel.fit(X).calibration_.sensitivity == 2.0
    gen_a = DPFeatureReleaser(make_mechanism("gaussian_analytic", 2.0), random_state=np.random.default_rng(5))
    gen_b = DPFeatureReleaser(make_mechanism("gaussian_analytic", 2.0), random_state=np.random.default_rng(5))
    np.testing.assert_array_equal(gen_a.fit_transform(X), gen_b.fit_transform(X))
    assert isinstance(rel.transform(X), np.ndarray)
    with pytest.raises(ValueError):
        rel.transform(X[:, :5])
    with pytest.raises(TypeError):
        DPFeatureReleaser("gaussian_analytic").fit(X)
