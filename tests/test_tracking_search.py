"""The shared Optuna helpers: the exact 2-D hypervolume on hand-computed fronts and the storage URL masking."""

from __future__ import annotations

import pytest

from eegprivacy.pipeline import search


def test_hypervolume_of_hand_computed_fronts():
    # reference (0.5, 1.0): rectangles [0.1, 1] x [0.5, 0.6] and [0.4, 1] x [0.5, 0.8] overlap; union 0.09 + 0.12
    assert search.hypervolume([(0.6, 0.1), (0.8, 0.4)], (0.5, 1.0)) == pytest.approx(0.21)
    # order does not matter; a dominated point adds nothing
    assert search.hypervolume([(0.8, 0.4), (0.7, 0.5), (0.6, 0.1)], (0.5, 1.0)) == pytest.approx(0.21)
    assert search.hypervolume([(1.0, 0.0)], (0.5, 1.0)) == pytest.approx(0.5)  # the ideal point fills the box
    assert search.hypervolume([(0.45, 0.1)], (0.5, 1.0)) == 0.0  # below the reference utility
    assert search.hypervolume([(0.9, 1.2)], (0.5, 1.0)) == 0.0  # beyond the reference attack success
    assert search.hypervolume([], (0.5, 1.0)) == 0.0


def test_storage_url_masks_the_password_only():
    assert search.public_url("postgresql://alice:s3cret@db:5432/optuna") == "postgresql://alice:***@db:5432/optuna"
    assert search.public_url("sqlite:///data/optuna/study_b.db") == "sqlite:///data/optuna/study_b.db"


def test_json_number_turns_nan_into_null():
    assert search.json_number(float("nan")) is None and search.json_number(0.25) == 0.25


def test_interval_bounds_are_clipped_to_the_unit_range():
    import math

    from eegprivacy.pipeline.search import unit_bound

    assert unit_bound(-5.39) == 0.0 and unit_bound(6.33) == 1.0 and unit_bound(0.42) == 0.42
    assert unit_bound(None) is None and math.isnan(unit_bound(float("nan")))
