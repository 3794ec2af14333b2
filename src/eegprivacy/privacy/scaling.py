"""Scaling statistics for the release that do not void its guarantee: public reference statistics, or DP quantiles.

The paper fits median/IQR on the private patient table and treats them as fixed, so its ε covers the noise step
only (``release.SCALING_NOTE``). Two honest alternatives, both usable as ``DPFeatureReleaser(scaler=...)``:

- ``PublicReferenceScaler`` — median/IQR of a public reference cohort (patients outside the release). The
  statistics do not depend on the private table, so the release's (ε, δ) is end-to-end at no extra cost.
- ``DPQuantileScaler`` — median and IQR of the private table from diffprivlib's DP quantiles (Smith 2011's
  exponential mechanism) within public bounds. It spends its own ε; the total is the sum with the release's
  (``accounting.basic_composition``).

Each exposes ``scaling_info()``, which ``DPFeatureReleaser.release_info()`` logs as the scope of the guarantee.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.privacy.release import IQR_FLOOR, PublicFitted, RobustFeatureScaler
from eegprivacy.validation import EPSILON, check

QUANTILES = (0.25, 0.5, 0.75)


class PublicReferenceScaler(PublicFitted, RobustFeatureScaler):
    """Robust scaling (same median/IQR and floor as ``RobustFeatureScaler``) fitted on a public reference table.

    Fit it on the public cohort yourself and hand it to the releaser fitted: the releaser then uses it as is. The
    guarantee is end-to-end only if the reference patients are truly outside the private cohort.
    """

    def fit(self, X_public, y=None):
        super().fit(X_public, y)
        self.n_reference_ = int(np.asarray(X_public).shape[0])
        return self

    _fitted_attribute = "scale_"
    _public_data = "the public reference cohort"

    def scaling_info(self) -> dict:
        check_is_fitted(self, "scale_")
        return {"scaling_source": "public_reference", "scaling_data_dependent": False, "scaling_epsilon": 0.0,
                "end_to_end_guarantee": True, "scaling_reference_patients": self.n_reference_,
                "scaling_note": ("median/IQR from a public reference cohort disjoint from the released patients; "
                                 "they do not depend on the private table, so the release's (ε, δ) holds "
                                 "end to end")}


def public_bounds(X_public, margin: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature (low, high) from a public table: its min/max widened by ``margin`` × range on each side.

    Public information only, so DP quantiles may use them. A feature constant in the public table gets a range of
    max(|value|, 1) so the bounds never collapse. Private values outside the bounds are clipped by the quantile
    mechanism, which biases the statistics but not the guarantee; the margin makes that rarer.
    """
    X = np.asarray(X_public, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or not np.isfinite(X).all():
        raise ValueError(f"public table must be a finite 2-D (patients × features) array, got shape {X.shape}")
    margin = float(margin)
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number ≥ 0, got {margin}")
    low, high = X.min(axis=0), X.max(axis=0)
    width = high - low
    width = np.where(width > 0, width, np.maximum(np.abs(low), 1.0))
    return low - margin * width, high + margin * width


def _check_bounds(bounds, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Public bounds as two finite (d,) arrays with low < high; anything else is an error, never a data fallback."""
    if bounds is None:
        raise ValueError("DPQuantileScaler needs public bounds (low, high) per feature; diffprivlib would otherwise "
                         "take them from the private data, which leaks and voids the guarantee")
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ValueError("bounds must be a pair (low, high) of scalars or per-feature arrays") from None
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), (n_features,)).copy() if np.ndim(low) == 0 \
        else np.asarray(low, dtype=np.float64)
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), (n_features,)).copy() if np.ndim(high) == 0 \
        else np.asarray(high, dtype=np.float64)
    if low.shape != (n_features,) or high.shape != (n_features,):
        raise ValueError(f"bounds must hold {n_features} values each, got {low.shape} and {high.shape}")
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError("bounds must be finite")
    if np.any(low >= high):
        raise ValueError(f"every lower bound must be below its upper bound ({int(np.sum(low >= high))} are not)")
    return low, high


class DPQuantileScaler(TransformerMixin, BaseEstimator):
    """Median and IQR per feature from ε-DP quantiles (diffprivlib, exponential mechanism) within public bounds.

    Budget: 3 quantiles (25th, 50th, 75th) × d features are all computed on the same patients, so they compose
    sequentially and each query gets ``epsilon / (3·d)``. That is exactly how diffprivlib's ``quantile`` spends a
    budget when given a list of quantiles and ``axis=0`` (it divides by the number of quantiles, then by the number
    of features), so the whole fit is one call at ``epsilon`` and ``epsilon_per_query_`` records the split; a
    private accountant checks that the spend adds up to ``epsilon``. Adjacency is replace-one, as in the release:
    one patient changes each rank by at most 1 (the mechanism's sensitivity).

    Post-processing, free of privacy cost: values are mapped to [0, 1] by the public bounds before the queries (the
    exponential mechanism is affine-equivariant, and this avoids diffprivlib's 1e-5 minimum bound separation
    swallowing small-unit features), the three quantiles of a feature are sorted so they cannot cross, and an
    IQR ≤ ``iqr_floor`` becomes 1.0 as in ``RobustFeatureScaler``. ``random_state`` (an int) makes a fit
    reproducible.
    """

    def __init__(self, epsilon: float, bounds, random_state=None, iqr_floor: float = IQR_FLOOR):
        self.epsilon = epsilon
        self.bounds = bounds
        self.random_state = random_state
        self.iqr_floor = iqr_floor

    def fit(self, X, y=None):
        from diffprivlib.accountant import BudgetAccountant
        from diffprivlib.tools import quantile

        epsilon = float(self.epsilon)
        check(epsilon, EPSILON, "epsilon")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=1)
        low, high = _check_bounds(self.bounds, X.shape[1])
        width = high - low
        unit = np.clip((X - low) / width, 0.0, 1.0)
        # A private accountant: records this fit's spends without growing diffprivlib's global default one.
        accountant = BudgetAccountant()
        q = quantile(unit, list(QUANTILES), epsilon=epsilon, bounds=(np.zeros(X.shape[1]), np.ones(X.shape[1])),
                     axis=0, random_state=self.random_state, accountant=accountant)
        q25, median, q75 = np.sort(np.asarray(q, dtype=np.float64), axis=0) * width + low
        iqr = q75 - q25
        self.center_ = median
        self.scale_ = np.where(iqr <= self.iqr_floor, 1.0, iqr)
        self.n_queries_ = len(QUANTILES) * X.shape[1]
        self.epsilon_per_query_ = epsilon / self.n_queries_
        spent = [float(e) for e, _ in accountant.spent_budget]
        self.epsilon_spent_ = float(sum(spent))
        if len(spent) != self.n_queries_ or not math.isclose(self.epsilon_spent_, epsilon, rel_tol=1e-9):
            raise RuntimeError(f"diffprivlib spent {self.epsilon_spent_} over {len(spent)} queries; expected "
                               f"{epsilon} over {self.n_queries_} (its budget split changed?)")
        return self

    def transform(self, X):
        check_is_fitted(self, "scale_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        return (X - self.center_) / self.scale_

    def scaling_info(self) -> dict:
        check_is_fitted(self, "scale_")
        return {"scaling_source": "dp_quantiles", "scaling_data_dependent": True,
                "scaling_epsilon": float(self.epsilon), "end_to_end_guarantee": True,
                "scaling_epsilon_per_query": float(self.epsilon_per_query_),
                "scaling_note": (f"median/IQR from {self.n_queries_} ε-DP quantile queries (diffprivlib, "
                                 f"ε/(3d) = {self.epsilon_per_query_:.3g} each) within public bounds; with a "
                                 "formally calibrated release mechanism the whole pipeline is "
                                 "(ε_scaling + ε_release, δ)-DP by sequential composition")}
