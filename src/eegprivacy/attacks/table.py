"""Attacks on a released patient-level feature table (study A goes further than the paper here).

The attacker knows the public release pipeline (robust scaling, L2 clipping at C, the mechanism and its
calibrated noise scale) but not the private scaling statistics, so it rebuilds the mechanism's input space from
its own data: it fits the same robust scaling on the table it holds and clips to the same C.

- ``NearestNeighbourReidentifier`` — the attacker holds one feature vector per known person from *another*
  recording (e.g. resting state) and names each released row by its nearest neighbour among them. Under
  Gaussian noise Euclidean distance is the maximum-likelihood decoder.
- ``TableMembershipInference`` — the attacker knows a target's true feature vector and the population it
  comes from, and decides whether the target is one of the released rows. ``distance`` scores by the nearest
  released row; ``likelihood`` by the log mixture likelihood of the released rows under the known noise
  distribution centred on the target (the likelihood-ratio test against a population-free null).

Rows are positions, never identifiers: identities stay with the caller.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.privacy.mechanisms import Calibration
from eegprivacy.privacy.release import RobustFeatureScaler, clip_rows_l2

__all__ = ["NearestNeighbourReidentifier", "TableMembershipInference", "pairwise_distances", "top_k_hits"]

METRICS = ("euclidean", "cosine")
MIA_SCORES = ("distance", "likelihood")


def pairwise_distances(A: np.ndarray, B: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """(len(A), len(B)) distances; cosine distance is 1 − cos, robust to a noise-inflated norm."""
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    if metric == "euclidean":
        sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
        return np.sqrt(np.maximum(sq, 0.0))
    if metric == "cosine":
        na = np.linalg.norm(A, axis=1, keepdims=True)
        nb = np.linalg.norm(B, axis=1, keepdims=True)
        return 1.0 - (A / np.where(na == 0, 1, na)) @ (B / np.where(nb == 0, 1, nb)).T
    raise ValueError(f"unknown metric {metric!r}; use one of {METRICS}")


def top_k_hits(distances: np.ndarray, true_index: np.ndarray, k: int) -> np.ndarray:
    """Per query row: is the true candidate among the k nearest? Ties count against the attacker."""
    distances = np.asarray(distances, dtype=float)
    true_index = np.asarray(true_index, dtype=int)
    true_distance = distances[np.arange(distances.shape[0]), true_index]
    # rank = number of candidates strictly closer, plus ties other than the true one (pessimistic)
    closer = (distances < true_distance[:, None]).sum(1)
    ties = (distances == true_distance[:, None]).sum(1) - 1
    return (closer + ties) < k


class _AttackerSpace:
    """The attacker's reconstruction of the mechanism input: own robust scaling, then clipping at C."""

    def _fit_space(self, X) -> np.ndarray:
        self.scaler_ = RobustFeatureScaler().fit(X)
        return self._project(X)

    def _fit_checked(self, X, option: str, allowed) -> np.ndarray:
        """``_fit_space`` on the attacker's table after checking the estimator's ``option`` against ``allowed``."""
        value = getattr(self, option)
        if value not in allowed:
            raise ValueError(f"unknown {option} {value!r}; use one of {allowed}")
        return self._fit_space(validate_data(self, X, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=2))

    def _project(self, X) -> np.ndarray:
        scaled = self.scaler_.transform(X)
        return scaled if self.clip_norm is None else clip_rows_l2(scaled, self.clip_norm)


class NearestNeighbourReidentifier(_AttackerSpace, BaseEstimator):
    """Link released rows to known people by nearest neighbour in the attacker's reconstructed space.

    ``fit(X_auxiliary)``: one row per candidate person, from data the attacker holds. ``distances(X_released)``
    gives (released × candidates); ``top_k_accuracy(X_released, true_index, k)`` scores the attack when the
    caller knows which candidate each released row really is.
    """

    def __init__(self, metric: str = "euclidean", clip_norm: float | None = None):
        self.metric = metric
        self.clip_norm = clip_norm

    def fit(self, X, y=None):
        self.candidates_ = self._fit_checked(X, "metric", METRICS)
        return self

    def distances(self, X_released) -> np.ndarray:
        check_is_fitted(self, "candidates_")
        released = validate_data(self, X_released, dtype=np.float64, ensure_all_finite=True, reset=False)
        # Both sides are already standardised by their own cohort's median/IQR (the releaser's and the
        # attacker's), which removes the cohort-wide shift between the two recordings; noise stays as is.
        return pairwise_distances(released, self.candidates_, self.metric)

    def predict(self, X_released) -> np.ndarray:
        """Candidate position named for each released row."""
        return self.distances(X_released).argmin(1)

    def top_k_accuracy(self, X_released, true_index, k: int = 1) -> float:
        return float(top_k_hits(self.distances(X_released), true_index, k).mean())


class TableMembershipInference(_AttackerSpace, BaseEstimator):
    """Is the target in the released table? Scores are higher for 'member'.

    ``fit(X_population)`` fits the attacker's scaling on the population the targets come from (a strong
    attacker: it knows every candidate's true vector). ``score(X_released, X_targets, calibration)`` returns
    one score per target; ``calibration`` (the release's public noise scale and family) is needed only for the
    ``likelihood`` score.
    """

    def __init__(self, score: str = "distance", clip_norm: float | None = None):
        self.score = score
        self.clip_norm = clip_norm

    def fit(self, X, y=None):
        self._fit_checked(X, "score", MIA_SCORES)
        return self

    def decision_function(self, X_released, X_targets, calibration: Calibration | None = None) -> np.ndarray:
        check_is_fitted(self, "scaler_")
        released = validate_data(self, X_released, dtype=np.float64, ensure_all_finite=True, reset=False)
        targets = self._project(validate_data(self, X_targets, dtype=np.float64, ensure_all_finite=True,
                                              reset=False))
        if self.score == "distance":
            return -pairwise_distances(targets, released).min(1)
        if calibration is None:
            raise ValueError("the likelihood score needs the release's calibration (noise family and scale)")
        scale = float(calibration.noise_scale)
        if calibration.mechanism.startswith("gaussian"):
            loglik = -0.5 * pairwise_distances(targets, released) ** 2 / scale**2
        elif calibration.mechanism.startswith("laplace"):
            loglik = -np.abs(targets[:, None, :] - released[None, :, :]).sum(-1) / scale
        else:
            raise ValueError(f"no likelihood for mechanism {calibration.mechanism!r}")
        return logsumexp(loglik, axis=1)
