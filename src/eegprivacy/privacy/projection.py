"""Low-dimensional releases: spend the budget on the few directions that carry the label, not on all d features.

The paper's mechanism noises every one of the d = 176 coordinates of a patient vector at the same scale, while the
label signal of a patient table lives in a few directions. A k-dimensional projection before the noise keeps the
sensitivity (an L2 clip to ``C`` in the k-dimensional space bounds a replaced patient's change by 2C whatever k
is) while the signal of each kept coordinate grows by about sqrt(d/k). Where the projection comes from decides
whether the pipeline is end to end:

- :class:`PublicProjection` — PCA, or PLS on the labels, fitted on *public* patients (a split of patients kept out
  of the release and of every evaluation). It does not depend on the private table: ε_projection = 0.
- :class:`AnalyzeGaussPCA` — the top-k eigenvectors of the *private* second-moment matrix released with the
  Gaussian mechanism (Analyze-Gauss, Dwork, Talwar, Thakurta & Zhang 2014). It spends its own (ε, δ), composed with
  the release's (:func:`composed_epsilon`, dp_accounting's PLD accountant).

:class:`ProjectedReleaser` chains public scaling → projection → L2 clip in k dimensions → a registered noise
mechanism (:mod:`eegprivacy.privacy.mechanisms`) at the release's ε, and states what its ε covers.
"""

from __future__ import annotations

import copy
import math

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.privacy.mechanisms import Mechanism, check_mechanism, gaussian_sigma
from eegprivacy.privacy.release import PublicFitted, _noise_generator, clip_rows_l2
from eegprivacy.validation import EPSILON, check

PROJECTION_METHODS = ("pca", "pls")


def _orthonormal_rows(directions: np.ndarray) -> np.ndarray:
    """(k, d) rows spanning the same space as ``directions`` (k, d), orthonormal (QR, signs fixed so the largest
    entry of each row is positive: the same space always gives the same rows)."""
    q, _ = np.linalg.qr(np.asarray(directions, dtype=np.float64).T)
    rows = q.T
    signs = np.sign(rows[np.arange(rows.shape[0]), np.argmax(np.abs(rows), axis=1)])
    return rows * np.where(signs == 0, 1.0, signs)[:, None]


def _check_components(n_components, n_features: int, n_samples: int | None = None) -> int:
    k = int(n_components)
    if k != n_components or k < 1:
        raise ValueError(f"n_components must be a whole number ≥ 1, got {n_components!r}")
    if k > n_features:
        raise ValueError(f"n_components = {k} exceeds the {n_features} features")
    if n_samples is not None and k > n_samples:
        raise ValueError(f"n_components = {k} exceeds the {n_samples} public patients it is fitted on")
    return k


class PublicProjection(PublicFitted, TransformerMixin, BaseEstimator):
    """k orthonormal directions fitted on public patients: PCA of their (scaled) features, or PLS on their labels.

    Fit it on the public split yourself (public patients' labels are public, so PLS may use them) and hand it on
    fitted; a clone keeps the public directions, and an unfitted one refuses to be cloned, so no caller can fit it
    on the private table by accident. ``transform`` is ``X @ components_.T``: the caller centres ``X`` (the public
    robust scaling does).
    """

    def __init__(self, method: str = "pca", n_components: int = 4):
        self.method = method
        self.n_components = n_components

    def fit(self, X_public, y_public=None):
        X = validate_data(self, X_public, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=2)
        k = _check_components(self.n_components, X.shape[1], X.shape[0])
        if self.method == "pca":
            from sklearn.decomposition import PCA

            directions = PCA(n_components=k, svd_solver="full").fit(X).components_
        elif self.method == "pls":
            from sklearn.cross_decomposition import PLSRegression

            if y_public is None:
                raise ValueError("PLS needs the public patients' labels (y_public)")
            y = np.asarray(y_public, dtype=np.float64).ravel()
            if y.shape[0] != X.shape[0] or np.unique(y).size < 2:
                raise ValueError("y_public must hold one label per public patient and both classes")
            directions = PLSRegression(n_components=k, scale=False).fit(X, y).x_rotations_.T
        else:
            raise ValueError(f"method must be one of {PROJECTION_METHODS}, got {self.method!r}")
        self.components_ = _orthonormal_rows(directions)
        self.n_reference_ = int(X.shape[0])
        return self

    def transform(self, X):
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        return X @ self.components_.T

    _fitted_attribute = "components_"
    _public_data = "the public patients"

    def projection_info(self) -> dict:
        check_is_fitted(self, "components_")
        return {"projection_source": f"public_{self.method}", "projection_epsilon": 0.0, "projection_delta": 0.0,
                "n_components": int(self.components_.shape[0]), "projection_reference_patients": self.n_reference_,
                "projection_note": (f"{self.method.upper()} directions fitted on {self.n_reference_} public patients "
                                    "disjoint from the released ones: no private data enters, no ε spent")}


def second_moment_sensitivity(clip_norm: float) -> float:
    """L2 (Frobenius) sensitivity of Σ x xᵀ over rows with ‖x‖ ≤ C, replace-one adjacency: √2·C².

    ‖xxᵀ − x'x'ᵀ‖²_F = ‖x‖⁴ + ‖x'‖⁴ − 2(xᵀx')² ≤ 2C⁴. The released vector (the upper triangle with the diagonal)
    has an L2 norm at most the Frobenius norm, so noising it at this sensitivity is a Gaussian mechanism.
    """
    clip_norm = float(clip_norm)
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"clip_norm must be a positive finite number, got {clip_norm}")
    return math.sqrt(2.0) * clip_norm ** 2


class AnalyzeGaussPCA(TransformerMixin, BaseEstimator):
    """DP-PCA by Analyze-Gauss: rows clipped to ``clip_norm``, their second-moment matrix noised symmetrically with
    the analytic Gaussian mechanism at (``epsilon``, ``delta``), then its top-k eigenvectors.

    The directions are (ε, δ)-DP for replace-one patient adjacency (:func:`second_moment_sensitivity`); whatever is
    computed from them afterwards is post-processing. ``sigma_`` is the noise scale, ``sensitivity_`` the bound
    it is calibrated to, ``components_`` the (k, d) orthonormal directions. The noise comes from ``random_state``
    (an int is mixed into a stream apart from ``default_rng(int)``, as in the release).
    """

    def __init__(self, epsilon: float, delta: float, n_components: int = 4, clip_norm: float = 2.0,
                 random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.n_components = n_components
        self.clip_norm = clip_norm
        self.random_state = random_state

    def fit(self, X, y=None):
        check(float(self.epsilon), EPSILON, "epsilon")
        if not 0.0 < float(self.delta) < 1.0:
            raise ValueError(f"delta must lie strictly between 0 and 1, got {self.delta}")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=1)
        k = _check_components(self.n_components, X.shape[1])
        rows = clip_rows_l2(X, self.clip_norm)
        d = X.shape[1]
        self.sensitivity_ = second_moment_sensitivity(self.clip_norm)
        self.sigma_ = gaussian_sigma(float(self.epsilon), float(self.delta), self.sensitivity_)
        rng = _noise_generator(self.random_state)
        upper = np.triu(rng.normal(0.0, self.sigma_, size=(d, d)))
        noise = upper + np.triu(upper, 1).T
        eigenvalues, eigenvectors = np.linalg.eigh(rows.T @ rows + noise)
        order = np.argsort(eigenvalues)[::-1][:k]
        self.components_ = _orthonormal_rows(eigenvectors[:, order].T)
        self.eigenvalues_ = eigenvalues[order]
        return self

    def transform(self, X):
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        return X @ self.components_.T

    def projection_info(self) -> dict:
        check_is_fitted(self, "components_")
        return {"projection_source": "dp_pca", "projection_epsilon": float(self.epsilon),
                "projection_delta": float(self.delta), "n_components": int(self.components_.shape[0]),
                "projection_sigma": float(self.sigma_), "projection_sensitivity": float(self.sensitivity_),
                "projection_note": (f"top-{self.components_.shape[0]} eigenvectors of the private second-moment "
                                    f"matrix released by Analyze-Gauss at (ε, δ) = ({float(self.epsilon):g}, "
                                    f"{float(self.delta):g}), rows clipped to {float(self.clip_norm):g}")}


def gaussian_event(sigma: float, sensitivity: float):
    """dp_accounting's event for one Gaussian mechanism (noise multiplier σ/Δ)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(noise_multiplier=float(sigma) / float(sensitivity))


def laplace_event(scale: float, sensitivity: float):
    """dp_accounting's event for one Laplace mechanism (noise multiplier b/Δ1)."""
    import dp_accounting

    return dp_accounting.LaplaceDpEvent(noise_multiplier=float(scale) / float(sensitivity))


def mechanism_event(calibration):
    """The dp_accounting event of a registered mechanism's calibration (:class:`~eegprivacy.privacy.Calibration`):
    Gaussian at σ/Δ2 or Laplace at b/Δ1. Only formally calibrated ones: a calibration without a formal guarantee
    describes no mechanism an accountant could bound."""
    if not calibration.formal_guarantee:
        raise ValueError(f"{calibration.mechanism}: no formal guarantee at this calibration, so no event to compose")
    if calibration.sensitivity_norm == "L2":
        return gaussian_event(calibration.noise_scale, calibration.sensitivity)
    return laplace_event(calibration.noise_scale, calibration.sensitivity)


def composed_epsilon(events, delta: float) -> float:
    """ε at ``delta`` of the sequential composition of ``events`` (dp_accounting's PLD accountant, pessimistic
    discretisation, as :class:`~eegprivacy.privacy.accounting.PldAccountant` runs it): an upper bound that is
    never larger than the sum of the parts' ε at their own δ."""
    import dp_accounting

    from eegprivacy.privacy.accounting import make_accountant

    return float(make_accountant("pld").epsilon(dp_accounting.ComposedDpEvent(list(events)), delta).epsilon)


class ProjectedReleaser(BaseEstimator):
    """Patient table → k-dimensional release: public scaling → projection → L2 clip to ``clip_norm`` → noise.

    ``scaler`` must be fitted on public patients (``PublicReferenceScaler``); ``projection`` is a fitted
    :class:`PublicProjection` (used as is) or an unfitted :class:`AnalyzeGaussPCA`, fitted here on the scaled
    private rows (it clips them itself and pays its own ε). ``mechanism`` is a registered release mechanism at the
    release's ε, calibrated for (C, k). ``fit`` keeps the noiseless mechanism input ``clipped_`` (private data:
    never log it); each ``transform`` draws fresh noise from the stream seeded in ``fit``.
    """

    def __init__(self, scaler, projection, mechanism: Mechanism, clip_norm: float = 2.0, random_state=None):
        self.scaler = scaler
        self.projection = projection
        self.mechanism = mechanism
        self.clip_norm = clip_norm
        self.random_state = random_state

    def fit(self, X, y=None):
        check_mechanism(self.mechanism)
        check_is_fitted(self.scaler, "scale_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=1)
        scaled = self.scaler.transform(X)
        if isinstance(self.projection, AnalyzeGaussPCA):
            self.projection_ = copy.deepcopy(self.projection).fit(scaled)
        elif isinstance(self.projection, PublicProjection):
            check_is_fitted(self.projection, "components_")
            self.projection_ = self.projection
        else:
            raise TypeError(f"projection must be a PublicProjection or AnalyzeGaussPCA, got {self.projection!r}")
        k = self.projection_.components_.shape[0]
        self.calibration_ = self.mechanism.calibrate(self.clip_norm, k)
        self.clipped_ = clip_rows_l2(self.projection_.transform(scaled), self.clip_norm)
        self._rng = _noise_generator(self.random_state)
        return self

    def transform(self, X=None):
        """The release of the fitted table (``X`` is ignored: a projected release is of the table it was fitted
        on, whose noiseless input ``clipped_`` it holds)."""
        check_is_fitted(self, "clipped_")
        return self.mechanism.privatise(self.clipped_, self.calibration_, self._rng)

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y).transform()

    def events(self) -> list:
        """dp_accounting events of every private step: the DP projection's (if any), then the release's."""
        check_is_fitted(self, "calibration_")
        steps = []
        if isinstance(self.projection_, AnalyzeGaussPCA):
            steps.append(gaussian_event(self.projection_.sigma_, self.projection_.sensitivity_))
        return [*steps, mechanism_event(self.calibration_)]

    def release_info(self) -> dict:
        """What a run logs beside the release: the projection's and the noise's budgets and scope."""
        check_is_fitted(self, "calibration_")
        calibration = self.calibration_.to_dict()
        calibration["calibration_note"] = calibration.pop("note")
        return {**self.mechanism.to_dict(), **calibration, **self.projection_.projection_info(),
                **self.scaler.scaling_info(), "n_patients": int(self.clipped_.shape[0]),
                "n_features": int(self.n_features_in_)}
