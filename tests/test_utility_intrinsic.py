"""Intrinsic utility metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eegprivacy.evaluation.utility import clipping_distortion, intrinsic_utility
from eegprivacy.privacy import clip_rows_l2


def test_identical_arrays():
    x = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]])
    m = intrinsic_utility(x, x.copy())
    assert m["rmse"] == 0.0 and m["mae"] == 0.0
    assert m["correlation"] == pytest.approx(1.0)
    assert m["snr_db"] == math.inf


def test_hand_computed_values():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    rel = np.array([[2.0, 2.0], [3.0, 2.0]])  # errors 1, 0, 0, -2
    m = intrinsic_utility(ref, rel)
    assert m["rmse"] == pytest.approx(math.sqrt(5 / 4))
    assert m["mae"] == pytest.approx(3 / 4)
    # r of (1,2,3,4) vs (2,2,3,2): centred (-1.5,-.5,.5,1.5)·(-.25,-.25,.75,-.25) = 0.5; norms sqrt(5), sqrt(.75)
    assert m["correlation"] == pytest.approx(0.5 / math.sqrt(5 * 0.75))
    assert m["snr_db"] == pytest.approx(10 * math.log10((30 / 4) / (5 / 4)))


def test_snr_formula_with_known_noise():
    ref = np.full((10, 10), 2.0)
    rng = np.random.default_rng(0)
    noise = rng.choice([-0.5, 0.5], size=ref.shape)  # noise power exactly 0.25, signal power 4
    m = intrinsic_utility(ref, ref + noise)
    assert m["snr_db"] == pytest.approx(10 * math.log10(4 / 0.25))  # 12.04 dB
    assert m["rmse"] == pytest.approx(0.5) and m["mae"] == pytest.approx(0.5)
    assert math.isnan(m["correlation"])  # constant reference: r undefined, not 0


def test_anticorrelated_and_shape_checks():
    x = np.arange(6.0)
    assert intrinsic_utility(x, -x)["correlation"] == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        intrinsic_utility(np.zeros((2, 3)), np.zeros((3, 2)))


def test_clipping_distortion_is_clipping_alone():
    scaled = np.array([[3.0, 4.0], [0.6, 0.8], [0.0, 0.0]])  # norms 5, 1, 0; C = 2 clips only the first
    clipped = clip_rows_l2(scaled, 2.0)
    m = clipping_distortion(scaled, clipped)
    # only row 0 changes: (3,4) → (1.2,1.6); errors -1.8, -2.4
    assert m["fraction_rows_clipped"] == pytest.approx(1 / 3)
    assert m["rmse"] == pytest.approx(math.sqrt((1.8**2 + 2.4**2) / 6))
    assert m["mae"] == pytest.approx((1.8 + 2.4) / 6)
    assert m["snr_db"] == pytest.approx(10 * math.log10((25 + 1) / (1.8**2 + 2.4**2)))
    unclipped = clipping_distortion(scaled[1:], clip_rows_l2(scaled[1:], 2.0))
    assert unclipped["rmse"] == 0.0 and unclipped["fraction_rows_clipped"] == 0.0
