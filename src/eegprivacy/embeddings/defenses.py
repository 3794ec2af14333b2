"""Release-side defenses on embeddings, the adaptive (Wiener-style) attacker, and the "closes the channel" rule.

Defenses are scikit-learn transformers fitted on the *release* side (the provider's own embeddings) and
applied to what is released. Randomness is seeded through ``random_state`` so a defense sweep is
reproducible. DP-SGD fine-tuning of the downstream head is not here (it trains a model, not a transform): see
``eegprivacy.embeddings.dp_head.DPSGDHead``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin, clone
from sklearn.decomposition import PCA
from sklearn.metrics import balanced_accuracy_score
from sklearn.utils import check_random_state

from eegprivacy.embeddings.endpoints.attribute import LeakageResult
from eegprivacy.embeddings.endpoints.decoder import AttributeDecoder
from eegprivacy.embeddings.heads import default_head, weighted_balanced_accuracy

__all__ = [
    "NOISE_SIGMAS",
    "GaussianNoiseDefense",
    "PCABottleneck",
    "CoordinateDropout",
    "WienerAttacker",
    "utility_balanced_accuracy",
    "UtilityResult",
    "utility_with_controls",
    "balanced_accuracy_ci",
    "closes_channel",
    "ChannelVerdict",
    "utility_kept",
    "has_utility",
    "channel_verdict",
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

    Default head: :func:`~eegprivacy.embeddings.heads.default_head`. Use a subject-disjoint splitter for the
    protocol's held-out-subject utility; :func:`utility_with_controls` adds the interval and the controls.
    """
    Z, y = np.asarray(Z, float), np.asarray(y)
    folds = splitter.split(Z, y, np.asarray(groups))
    rows, pred = _oof_predictions(Z, y, folds, default_head() if estimator is None else estimator)
    return float(balanced_accuracy_score(y[rows], pred))


@dataclass
class UtilityResult:
    """Held-out balanced accuracy of the downstream task, its subject-bootstrap interval and its two controls."""

    balanced_accuracy: float
    ci: tuple[float, float]
    control_gaussian: float
    control_permuted: float
    n_windows: int
    n_subjects: int

    def as_dict(self) -> dict:
        return {"balanced_accuracy": self.balanced_accuracy, "ci_low": self.ci[0], "ci_high": self.ci[1],
                "control_gaussian": self.control_gaussian, "control_permuted": self.control_permuted,
                "n_windows": self.n_windows, "n_subjects": self.n_subjects}


def _oof_predictions(Z, y, folds, estimator, permute=None):
    """Pooled out-of-fold predictions: (test row indices, predictions); ``permute`` (a RandomState) shuffles the
    training rows against their labels, the split-local permutation control."""
    rows, pred = [], []
    for train, test in folds:
        fit_rows = train if permute is None else permute.permutation(train)
        model = clone(estimator).fit(Z[fit_rows], y[train])  # permuted: rows no longer match their labels
        rows.append(test)
        pred.append(model.predict(Z[test]))
    return np.concatenate(rows), np.concatenate(pred)


def balanced_accuracy_ci(truth, pred, groups, n_bootstrap: int = 1000, confidence: float = 0.95,
                         random_state=0) -> tuple[float, tuple[float, float]]:
    """Balanced accuracy and its subject-level bootstrap interval (subjects resampled with replacement, so
    windows of one subject never count as independent evidence)."""
    truth, pred, groups = np.asarray(truth), np.asarray(pred), np.asarray(groups)
    rng = check_random_state(random_state)
    subjects = np.unique(groups)
    index = np.searchsorted(subjects, groups)
    draws = np.empty(int(n_bootstrap))
    for b in range(draws.size):
        counts = np.bincount(rng.randint(0, subjects.size, subjects.size), minlength=subjects.size)
        draws[b] = weighted_balanced_accuracy(truth, pred, counts[index].astype(float))
    a = 1.0 - confidence
    finite = draws[np.isfinite(draws)]
    ci = tuple(float(q) for q in np.quantile(finite, [a / 2, 1 - a / 2])) if finite.size else (np.nan, np.nan)
    return weighted_balanced_accuracy(truth, pred), ci


def utility_with_controls(Z, y, groups, splitter, estimator=None, n_bootstrap: int = 1000,
                          confidence: float = 0.95, random_state=0) -> UtilityResult:
    """What the released embeddings are good for, judged like a leakage result: the held-out balanced accuracy
    of the task (e.g. rest vs arithmetic of unseen subjects) with a subject-level bootstrap interval, next to the
    same head on i.i.d. Gaussian embeddings and on embeddings permuted among the training rows of each fold
    (both should read about 0.5). Deployment relevance: a release that still tells the state of a held-out
    subject is useful to the attacker too."""
    Z = np.asarray(Z, float)
    y = np.asarray(y)
    groups = np.asarray(groups)
    rng = check_random_state(random_state)
    est = default_head() if estimator is None else estimator
    folds = list(splitter.split(Z, y, groups))
    rows, pred = _oof_predictions(Z, y, folds, est)
    G = rng.standard_normal(Z.shape)
    rows_g, pred_g = _oof_predictions(G, y, folds, est)
    rows_p, pred_p = _oof_predictions(Z, y, folds, est, permute=rng)
    value, ci = balanced_accuracy_ci(y[rows], pred, groups[rows], n_bootstrap, confidence, rng)
    return UtilityResult(balanced_accuracy=value, ci=ci,
                         control_gaussian=weighted_balanced_accuracy(y[rows_g], pred_g),
                         control_permuted=weighted_balanced_accuracy(y[rows_p], pred_p),
                         n_windows=int(rows.size), n_subjects=int(np.unique(groups[rows]).size))


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


def utility_kept(defended: float, undefended: float, chance: float = 0.5) -> float:
    """(BA_defended - chance) / (BA_undefended - chance): the share of the task's above-chance utility a defense
    keeps (1 = all of it, 0 = chance; NaN when the undefended utility is not above chance)."""
    above = float(undefended) - chance
    return (float(defended) - chance) / above if np.isfinite(above) and above > 0 else float("nan")


def has_utility(undefended: UtilityResult, chance: float = 0.5) -> bool:
    """Whether the undefended task utility is real: the lower end of its subject-bootstrap interval lies above
    chance and above both of its controls (Gaussian embeddings, permuted training rows)."""
    low = float(undefended.ci[0])
    bar = max(chance, float(undefended.control_gaussian), float(undefended.control_permuted))
    return bool(np.isfinite(low) and np.isfinite(bar) and low > bar)


@dataclass
class ChannelVerdict:
    """Whether a defense closes the attribute channel while keeping the task's utility.

    ``closes``: True (yes), False (no) or None (undecided: the undefended task has no utility to keep, so
    keeping a share of it means nothing). ``closes_absolute``: the earlier rule against a fixed bar.
    ``as_value()`` codes ``closes`` for a numeric row: 1.0, 0.0 or NaN.
    """

    closes: bool | None
    closes_absolute: bool
    leakage_closed: bool
    kept: float
    reason: str

    def as_value(self) -> float:
        return float("nan") if self.closes is None else float(self.closes)


def _leakage_closed(leakages) -> bool:
    lows = [le.ci[0] if isinstance(le, LeakageResult) else float(le[0]) for le in leakages]
    return bool(lows) and all(np.isfinite(low) and low <= 0.0 for low in lows)


def channel_verdict(leakages, defended: float, undefended: UtilityResult, kept_threshold: float = 0.5,
                    absolute_threshold: float = 0.6, chance: float = 0.5) -> ChannelVerdict:
    """Does a defense close the channel? Every attacker's L_A interval must reach 0 (:func:`closes_channel`'s
    reading) and the defense must keep at least ``kept_threshold`` of the undefended utility above chance.

    **(ours)** Utility is judged relative to what there is to keep: the undefended held-out balanced accuracy
    of the same task, same subjects and split (0.51-0.58 on eegmat, below any fixed bar such as 0.6, so the
    absolute rule could never say yes). Decision order: an attacker whose interval excludes 0 from above leaves
    the channel open -> no, whatever the utility. Otherwise, when the undefended utility is not itself above
    its controls (:func:`has_utility`), there is no utility to keep -> undecided (None), not a forced no.
    Otherwise yes iff kept = (BA_defended - chance) / (BA_undefended - chance) >= ``kept_threshold``.
    ``leakages``: one LeakageResult (or (ci_low, ci_high)) per attacker.
    """
    if isinstance(leakages, LeakageResult) or (isinstance(leakages, tuple) and all(map(np.isscalar, leakages))):
        leakages = [leakages]  # one attacker
    leakages = list(leakages)
    if not leakages:
        raise ValueError("channel_verdict needs the leakage result of at least one attacker")
    if not 0.0 < float(kept_threshold) <= 1.0:
        raise ValueError(f"kept_threshold must lie in (0, 1], got {kept_threshold!r}")
    closed = _leakage_closed(leakages)
    absolute = all(closes_channel(le, defended, absolute_threshold) for le in leakages)
    kept = utility_kept(defended, undefended.balanced_accuracy, chance)
    if not closed:
        return ChannelVerdict(False, absolute, closed, kept, "leakage remains for at least one attacker")
    if not has_utility(undefended, chance):
        return ChannelVerdict(None, absolute, closed, kept, "undecided: no utility to keep")
    if np.isfinite(kept) and kept >= kept_threshold:
        return ChannelVerdict(True, absolute, closed, kept, "leakage closed, utility kept")
    return ChannelVerdict(False, absolute, closed, kept, "utility lost")
