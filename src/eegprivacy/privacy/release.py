"""Study A's release pipeline: window features → one vector per patient → robust scale → L2 clip → noise.

The patient is the privacy unit, so everything before the mechanism happens per patient: windows from all of a
patient's recordings are pooled into one mean vector, and the table that leaves this module carries no
identifier. Scaling statistics (median, IQR across patients) are fitted inside each release, as in the paper;
they are computed from the private table, so the mechanism's ε holds only conditional on them — every release
says so in ``release_info()``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.privacy.mechanisms import SAMPLERS, Mechanism, check_mechanism, make_mechanism

IQR_FLOOR = 1e-9
# Integer seeds are mixed with this tag so the noise stream never equals ``default_rng(seed)``: a synthetic
# cohort drawn with the same seed would otherwise get noise correlated with the private values.
_NOISE_STREAM_TAG = 0x44505245
SCALING_NOTE = ("robust-scaling statistics (median, IQR) are fitted on the private patient table in each release; "
                "the sensitivity bounds treat them as fixed, so the ε does not cover them and there is no "
                "end-to-end guarantee for the whole pipeline")


def patient_vectors(window_table: pd.DataFrame, feature_columns, group: str = "subject",
                    label: str | None = "label") -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray]:
    """Window table → (X, y, groups): one row per patient, the mean over all windows of all its recordings.

    ``X`` has a plain 0..n-1 index and only the feature columns, so it can be released; ``groups`` holds the
    patient ids in row order and is for the caller's private bookkeeping only (never logged or released).
    Windows are pooled, not averaged per recording first, so a longer recording weighs more, as in the paper.
    NaN feature values are skipped per column (pandas' mean).
    """
    feature_columns = list(feature_columns)
    if not feature_columns:
        raise ValueError("feature_columns is empty")
    identifiers = {group} | ({label} if label is not None else set())
    leaked = identifiers & set(feature_columns)
    if leaked:
        raise ValueError(f"identifier/label columns {sorted(leaked)} cannot be feature columns")
    missing = [c for c in [group, *([label] if label is not None else []), *feature_columns]
               if c not in window_table.columns]
    if missing:
        raise KeyError(f"window table lacks columns {missing[:5]}{' …' if len(missing) > 5 else ''}")
    if window_table[group].isna().any():
        raise ValueError(f"some windows have no {group!r}; every window must belong to a patient")

    grouped = window_table.groupby(group, sort=True)
    means = grouped[feature_columns].mean()
    groups = means.index.to_numpy()
    X = means.reset_index(drop=True)
    X.columns.name = None

    y = None
    if label is not None:
        n_labels = grouped[label].nunique(dropna=False)
        mixed = n_labels[n_labels > 1]
        if len(mixed):
            raise ValueError(f"{len(mixed)} patient(s) have windows with more than one {label!r}; "
                             "a patient-level release needs one label per patient")
        y = grouped[label].first().loc[means.index].to_numpy()
    return X, y, groups


def _noise_generator(random_state) -> np.random.Generator:
    """A Generator is used as given; an int (or None) seeds a stream kept apart from ``default_rng(int)``."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    return np.random.default_rng([_NOISE_STREAM_TAG, int(random_state)])


class PublicFitted:
    """A step fitted on public data before a releaser takes it: it refuses to be cloned unfitted, since the
    releaser would fit the clone on the private table and its ``public`` label would then be false. Subclasses
    name the attribute that shows they are fitted and the data they must be fitted on."""

    _fitted_attribute: str = ""
    _public_data: str = ""

    def __sklearn_clone__(self):
        import copy

        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted

        try:
            check_is_fitted(self, self._fitted_attribute)
        except NotFittedError:
            raise ValueError(f"fit {type(self).__name__} on {self._public_data} before handing it on; an unfitted "
                             "one would be fitted on the private table") from None
        return copy.deepcopy(self)


class RobustFeatureScaler(TransformerMixin, BaseEstimator):
    """Per-feature (x − median)/IQR across patients; an IQR ≤ ``iqr_floor`` becomes 1.0 so constant features
    are centred, not blown up."""

    def __init__(self, iqr_floor: float = IQR_FLOOR):
        self.iqr_floor = iqr_floor

    def fit(self, X, y=None):
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True)
        q25, median, q75 = np.percentile(X, [25.0, 50.0, 75.0], axis=0)
        iqr = q75 - q25
        self.center_ = median
        self.scale_ = np.where(iqr <= self.iqr_floor, 1.0, iqr)
        return self

    def transform(self, X):
        check_is_fitted(self, "scale_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        return (X - self.center_) / self.scale_


def clip_rows_l2(X, clip_norm: float) -> np.ndarray:
    """x · min(1, C/‖x‖2) per row: bounds each patient's contribution; rows already inside are returned as is.

    Clipped rows land on the sphere up to float rounding (‖x‖ ≤ C·(1 + 1e-15)).
    """
    clip_norm = float(clip_norm)
    if not np.isfinite(clip_norm) or clip_norm <= 0:
        raise ValueError(f"clip_norm must be a positive finite number, got {clip_norm}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D (patients × features) array, got shape {X.shape}")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    outside = norms > clip_norm
    factor = np.divide(clip_norm, norms, out=np.ones_like(norms), where=outside)
    return np.where(outside, X * factor, X)


def _fitted_scaler(scaler, X):
    """None: robust scaling fitted on the private table (the paper). A fitted scaler (public reference
    statistics) is used as is; an unfitted one is cloned and fitted on ``X`` (e.g. DP quantiles, which pay
    their own ε). Whatever comes back must expose ``center_`` and ``scale_``."""
    if scaler is None:
        return RobustFeatureScaler().fit(X)
    try:
        check_is_fitted(scaler)
    except NotFittedError:
        scaler = clone(scaler).fit(X)
    if not (hasattr(scaler, "center_") and hasattr(scaler, "scale_")):
        raise TypeError(f"scaler {type(scaler).__name__} must expose center_ and scale_ after fit")
    return scaler


class DPFeatureReleaser(TransformerMixin, BaseEstimator):
    """Patient table → noisy release: robust scale (fitted here) → clip to ``clip_norm`` → mechanism noise.

    ``fit`` fits the scaling on the private table, calibrates the mechanism for (C, d) and keeps the noiseless
    mechanism input (``scaled_``, ``clipped_``) so utility can be split into clipping and noise. Those
    attributes are private data: never log or release a fitted releaser. Noise comes from a Generator seeded
    in ``fit`` from ``random_state``; each ``transform`` draws fresh noise (each call is a separate release that
    spends its own ε), and refitting with the same seed reproduces the same release.

    ``sampler="numpy"`` (every simulation here) draws that seeded, idealised noise; ``sampler="opendp"`` releases
    real data with OpenDP's exact samplers (not reproducible from a seed; see :mod:`eegprivacy.privacy.mechanisms`),
    and ``calibration_.sampling`` says which.
    """

    def __init__(self, mechanism: Mechanism, clip_norm: float = 2.0, random_state=None, scaler=None,
                 sampler: str = "numpy"):
        self.mechanism = mechanism
        self.clip_norm = clip_norm
        self.random_state = random_state
        self.scaler = scaler
        self.sampler = sampler

    def fit(self, X, y=None):
        check_mechanism(self.mechanism)
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=1)
        self.scaler_ = _fitted_scaler(self.scaler, X)
        self.center_ = self.scaler_.center_
        self.scale_ = self.scaler_.scale_
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {sorted(SAMPLERS)}, got {self.sampler!r}")
        self.calibration_ = self.mechanism.calibrate(self.clip_norm, X.shape[1])
        if self.sampler == "opendp":
            self.calibration_ = self.mechanism.exact_calibration(self.calibration_)
        self.scaled_ = self.scaler_.transform(X)
        self.clipped_ = clip_rows_l2(self.scaled_, self.clip_norm)
        self.n_patients_ = X.shape[0]
        self._rng = _noise_generator(self.random_state)
        return self

    def prepare(self, X) -> tuple[np.ndarray, np.ndarray]:
        """(scaled, clipped) for ``X`` with the fitted scaling: the noiseless mechanism input."""
        check_is_fitted(self, "calibration_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        scaled = (X - self.center_) / self.scale_
        return scaled, clip_rows_l2(scaled, self.clip_norm)

    def transform(self, X):
        """The release: clipped input plus noise; a DataFrame in gives a DataFrame out (same columns, index)."""
        _, clipped = self.prepare(X)
        released = self.mechanism.privatise(clipped, self.calibration_, self._rng, self.sampler)
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(released, columns=X.columns, index=X.index)
        return released

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y).transform(X)

    def release_info(self) -> dict:
        """What a run logs beside the release: mechanism, calibration, and the scope of its guarantee."""
        check_is_fitted(self, "calibration_")
        calibration = self.calibration_.to_dict()
        note = calibration.pop("note")
        return {**self.mechanism.to_dict(), **calibration, "calibration_note": note,
                "n_patients": int(self.n_patients_), "n_features": int(self.n_features_in_),
                **scaling_info(self.scaler_)}


def scaling_info(scaler) -> dict:
    """The scaler's own statement of where its statistics came from; private robust scaling if it has none."""
    info = getattr(scaler, "scaling_info", None)
    if callable(info):
        return dict(info())
    return {"scaling_source": "private", "scaling_data_dependent": True, "scaling_epsilon": float("nan"),
            "end_to_end_guarantee": False, "scaling_note": SCALING_NOTE}


NO_NOISE = "none"


def release_table(X, mechanism: str, epsilon: float, delta: float, clip_norm: float, random_state=None,
                  scaler=None, sampler: str = "numpy") -> tuple[np.ndarray, DPFeatureReleaser]:
    """One release by mechanism name; ``"none"`` returns the noiseless mechanism input (scaled and clipped),
    the reference every sweep compares its DP releases against. The fitted releaser holds private state.
    ``sampler="opendp"`` is for releasing real data (exact sampling; see :class:`DPFeatureReleaser`)."""
    if mechanism == NO_NOISE:
        releaser = DPFeatureReleaser(make_mechanism("gaussian_analytic", 1.0, delta if delta else 1e-5),
                                     clip_norm=clip_norm, scaler=scaler).fit(X)
        return releaser.clipped_, releaser
    releaser = DPFeatureReleaser(make_mechanism(mechanism, epsilon, delta), clip_norm=clip_norm,
                                 random_state=random_state, scaler=scaler, sampler=sampler)
    return releaser.fit_transform(X), releaser
