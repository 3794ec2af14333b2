"""The ridge decoder of the attribute and reconstruction endpoints: standardised embeddings, alpha by inner
cross-validation on the training subjects only, every alpha solved from one eigendecomposition.

It has a module of its own because four callers fit it: attribute leakage (:mod:`.attribute`), reconstruction R^2
(:mod:`.reconstruction`), the cross-encoder bridge and the defenses' attackers.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import GroupKFold, KFold
from sklearn.utils import check_random_state

__all__ = ["AttributeDecoder", "DEFAULT_ALPHAS"]

DEFAULT_ALPHAS = np.logspace(-3, 5, 17)


def _standardise_fit(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = Z.mean(axis=0)
    scale = Z.std(axis=0)
    scale[scale < 1e-12] = 1.0  # constant coordinates carry nothing; keep them finite
    return mean, scale


def _ridge_coef_path(Xtr: np.ndarray, Ytr: np.ndarray, alphas) -> np.ndarray:
    """Centred ridge coefficients (n_alphas, dim, n_targets) for every alpha from one eigendecomposition.

    Uses the smaller of the two Gram matrices (X^T X when n >= dim, X X^T otherwise): an eigh of it is far
    cheaper than an SVD of X and gives every alpha for free.
    """
    alphas = np.asarray(alphas, float)
    n, d = Xtr.shape
    if n >= d:
        lam, V = np.linalg.eigh(Xtr.T @ Xtr)
        VtXtY = V.T @ (Xtr.T @ Ytr)  # (d, k)
        inv = 1.0 / (np.clip(lam, 0.0, None)[None, :] + alphas[:, None])  # (a, d)
        return np.einsum("dr,ar,rk->adk", V, inv, VtXtY, optimize=True)
    lam, U = np.linalg.eigh(Xtr @ Xtr.T)
    XtU = Xtr.T @ U  # (d, n)
    UtY = U.T @ Ytr
    inv = 1.0 / (np.clip(lam, 0.0, None)[None, :] + alphas[:, None])
    return np.einsum("dr,ar,rk->adk", XtU, inv, UtY, optimize=True)


def _ridge_path_predict(Xtr: np.ndarray, Ytr: np.ndarray, Xte: np.ndarray, alphas) -> np.ndarray:
    """Predictions (n_alphas, n_test, n_targets) of centred ridge for every alpha."""
    return np.einsum("td,adk->atk", Xte, _ridge_coef_path(Xtr, Ytr, alphas), optimize=True)


class AttributeDecoder(RegressorMixin, BaseEstimator):
    """Ridge from standardised embeddings to the attribute; alpha by inner CV on the training subjects only.

    The inner CV is grouped by subject (``GroupKFold``) whenever ``fit`` receives ``groups`` with at least two
    subjects, so alpha is never tuned on windows of a subject it is later tested on; without groups it falls
    back to a seeded ``KFold``. The criterion is the mean squared error summed over attribute dimensions.
    All alphas are solved from one eigendecomposition per fold, which keeps the permutation null affordable.
    """

    def __init__(self, alphas=None, inner_splits: int = 3, random_state=None):
        self.alphas = alphas
        self.inner_splits = inner_splits
        self.random_state = random_state

    def _alphas(self) -> np.ndarray:
        return np.asarray(DEFAULT_ALPHAS if self.alphas is None else self.alphas, float)

    def fit(self, Z, A, groups=None):
        Z = np.asarray(Z, float)
        A = np.asarray(A, float)
        self._single_output = A.ndim == 1
        A2 = A[:, None] if self._single_output else A
        if Z.ndim != 2 or Z.shape[0] != A2.shape[0]:
            raise ValueError(f"Z must be (n, dim) with one row per attribute row: {Z.shape} vs {A.shape}")
        alphas = self._alphas()
        if alphas.size == 1:
            self.alpha_ = float(alphas[0])
            self.cv_mse_ = np.array([np.nan])
        else:
            if groups is not None and np.unique(groups).size >= 2:
                inner = GroupKFold(n_splits=min(self.inner_splits, np.unique(groups).size))
                folds = inner.split(Z, A2, groups)
            else:
                inner = KFold(n_splits=self.inner_splits, shuffle=True,
                              random_state=check_random_state(self.random_state).randint(2**31 - 1))
                folds = inner.split(Z)
            sse = np.zeros(alphas.size)
            for tr, va in folds:
                m, sc = _standardise_fit(Z[tr])
                ybar = A2[tr].mean(axis=0)
                pred = _ridge_path_predict((Z[tr] - m) / sc, A2[tr] - ybar, (Z[va] - m) / sc, alphas) + ybar
                sse += ((pred - A2[va][None]) ** 2).sum(axis=(1, 2))
            self.cv_mse_ = sse / Z.shape[0]
            self.alpha_ = float(alphas[int(np.argmin(self.cv_mse_))])
        self.mean_, self.scale_ = _standardise_fit(Z)
        Xs = (Z - self.mean_) / self.scale_
        self.intercept_ = A2.mean(axis=0)
        self.coef_ = _ridge_coef_path(Xs, A2 - self.intercept_, [self.alpha_])[0]  # (dim, n_targets)
        self.n_features_in_ = Z.shape[1]
        return self

    def predict(self, Z):
        Z = np.asarray(Z, float)
        out = ((Z - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        return out[:, 0] if self._single_output else out
