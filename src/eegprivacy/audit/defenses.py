"""Release-side defenses on embeddings, the adaptive (Wiener-style) attacker, and the "closes the channel" rule.

Defenses are scikit-learn transformers fitted on the *release* side (the provider's own embeddings) and
applied to what is released. Randomness is seeded through ``random_state`` so a defense sweep is
reproducible. DP-SGD fine-tuning of the downstream head is not here (it trains a model, not a transform).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin, clone
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state

from eegprivacy.audit.endpoints import AttributeDecoder, LeakageResult

__all__ = [
    "NOISE_SIGMAS",
    "GaussianNoiseDefense",
    "PCABottleneck",
    "CoordinateDropout",
    "WienerAttacker",
    "utility_balanced_accuracy",
    "closes_channel",
]

NOISE_SIGMAS = (0.1, 0.3, 1.0, 3.0)  # protocol grid, in multiples of the per-dimension std


class GaussianNoiseDefense(TransformerMixin, BaseEstimator):
    """Adds N(0, (sigma * std_j)^2) to coordinate j; std_j is learned on the release-side embeddings.

    Noise scaled per dimension so sigma means the same signal-to-noise ratio in every coordinate regardless
    of the encoder's units. Each ``transform`` call draws fresh noise from the generator seeded at ``fit``.
    """

    def __init__(self, sigma: float = 0.3, random_state=None):
        self.sigma = sigma
        self.random_state = random_state

    def fit(self, Z, y=None):
        Z = np.asarray(Z, float)
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {self.sigma}")
        self.scale_ = Z.std(axis=0)
        self.n_features_in_ = Z.shape[1]
        self._rng = check_random_state(self.random_state)
        return self

    def transform(self, Z):
        Z = np.asarray(Z, float)
        return Z + self._rng.standard_normal(Z.shape) * (self.sigma * self.scale_)


class PCABottleneck(TransformerMixin, BaseEstimator):
    """Releases only the first ``n_components`` principal-component scores (PCA fitted on the release side)."""

    def __init__(self, n_components: int = 8, random_state=None):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, Z, y=None):
        Z = np.asarray(Z, float)
        self.pca_ = PCA(n_components=self.n_components, random_state=self.random_state).fit(Z)
        self.n_features_in_ = Z.shape[1]
        return self

    def transform(self, Z):
        return self.pca_.transform(np.asarray(Z, float))


class CoordinateDropout(TransformerMixin, BaseEstimator):
    """Removes a random, fixed subset of coordinates (a fraction ``rate``) from every released embedding.

    **(ours)** The subset is drawn once at ``fit`` and is the same for every window: per-window random
    masking would leave the attacker the union of all coordinates across windows. At least one coordinate
    is always kept.
    """

    def __init__(self, rate: float = 0.5, random_state=None):
        self.rate = rate
        self.random_state = random_state

    def fit(self, Z, y=None):
        Z = np.asarray(Z, float)
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"rate must lie in [0, 1), got {self.rate}")
        d = Z.shape[1]
        n_keep = max(1, int(round(d * (1.0 - self.rate))))
        self.kept_ = np.sort(check_random_state(self.random_state).choice(d, n_keep, replace=False))
        self.n_features_in_ = d
        return self

    def transform(self, Z):
        return np.asarray(Z, float)[:, self.kept_]


class WienerAttacker(RegressorMixin, BaseEstimator):
    """Adaptive attacker that knows the noise level: Wiener-shrinks released embeddings, then decodes.

    The attacker fits on its shadow set. By default (``shadow_is_clean=True``) the shadow embeddings are clean
    -- the encoder is public and frozen, so the attacker embeds its own shadow windows. It estimates the
    signal covariance C_s from them, the noise covariance C_n = diag((sigma * std_j)^2) from the known
    sigma, and the Wiener gain W = C_s (C_s + C_n)^-1; the decoder is trained on the clean shadow set and
    applied to mu + W (z - mu) of each released z (the linear MMSE estimate of the clean embedding).
    With ``shadow_is_clean=False`` the shadow embeddings are noised like the release: C_s is estimated as
    cov(shadow) - C_n (std_j^2 = var_j / (1 + sigma^2); negative eigenvalues clipped to 0) and the decoder is
    trained on the shrunk shadow set.
    """

    def __init__(self, sigma: float = 1.0, decoder=None, shadow_is_clean: bool = True, random_state=None):
        self.sigma = sigma
        self.decoder = decoder
        self.shadow_is_clean = shadow_is_clean
        self.random_state = random_state

    def fit(self, Z, A, groups=None):
        Z = np.asarray(Z, float)
        self.mean_ = Z.mean(axis=0)
        cov = np.atleast_2d(np.cov(Z, rowvar=False))
        s2 = float(self.sigma) ** 2
        if self.shadow_is_clean:
            noise = s2 * np.diag(cov)
            signal = cov
        else:
            noise = s2 / (1.0 + s2) * np.diag(cov)
            vals, vecs = np.linalg.eigh(cov - np.diag(noise))
            signal = (vecs * np.clip(vals, 0.0, None)) @ vecs.T
        total = signal + np.diag(noise)
        self.gain_ = signal @ np.linalg.pinv(total, hermitian=True)  # W, applied as (z - mu) W^T
        base = AttributeDecoder(random_state=self.random_state) if self.decoder is None else self.decoder
        train = Z if self.shadow_is_clean else self.shrink(Z)
        self.decoder_ = clone(base).fit(train, A, groups)
        self.n_features_in_ = Z.shape[1]
        return self

    def shrink(self, Z):
        """mu + (z - mu) W^T: the attacker's estimate of the clean embedding."""
        Z = np.asarray(Z, float)
        return self.mean_ + (Z - self.mean_) @ self.gain_.T

    def predict(self, Z):
        return self.decoder_.predict(self.shrink(Z))


def utility_balanced_accuracy(Z, y, groups, splitter, estimator=None) -> float:
    """Balanced accuracy of the downstream task (e.g. rest vs arithmetic) on pooled out-of-fold predictions.

    Default head: standardised logistic regression. Use a subject-disjoint splitter for the protocol's
    held-out-subject utility.
    """
    Z = np.asarray(Z, float)
    y = np.asarray(y)
    groups = np.asarray(groups)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)) if estimator is None else estimator
    truth, pred = [], []
    for train, test in splitter.split(Z, y, groups):
        model = clone(est).fit(Z[train], y[train])
        truth.append(y[test])
        pred.append(model.predict(Z[test]))
    return float(balanced_accuracy_score(np.concatenate(truth), np.concatenate(pred)))


def closes_channel(leakage: LeakageResult | tuple[float, float], balanced_accuracy: float,
                   threshold: float = 0.6) -> bool:
    """True iff L_A's CI reaches 0 (its lower bound is <= 0) and utility balanced accuracy >= ``threshold``.

    **(ours)** "The CI includes 0" is read as "the CI does not exclude 0 from above": an interval wholly
    below 0 (real score under the controls) is no evidence of leakage either. A defense that destroys the
    task closes nothing worth having, hence the utility condition.
    """
    low = leakage.ci[0] if isinstance(leakage, LeakageResult) else float(leakage[0])
    if not np.isfinite(low):
        return False
    return bool(low <= 0.0 and balanced_accuracy >= threshold)
