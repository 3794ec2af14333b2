"""Robust membership inference (RMIA, after Zarifzadeh, Liu and Shokri 2024, "Low-Cost High-Power Membership
Inference Attacks"), written for study B beside :class:`~eegprivacy.attacks.lira.LiRA`.

Why: LiRA models each example's IN and OUT distribution from shadow models, so with one or two shadows it has
nothing to fit. RMIA asks a cheaper question that still calibrates per example: is the target model's probability
of x, relative to x's probability under the *population* of models, Pr(x|θ)/Pr(x), larger than that of typical
population points z, Pr(z|θ)/Pr(z)? The score of x is the share of population points it beats by a factor γ,

    score(x) = |{z : (Pr(x|θ)/Pr(x)) / (Pr(z|θ)/Pr(z)) > γ}| / |Z|,

and Pr(x) is the mean of Pr(x|θ_r) over reference models θ_r. Comparing against z cancels what every model finds
easy or hard, and one reference model already estimates Pr(x).

- ``mode="online"``: Pr(x) is the mean over all reference models, those trained on x and those not.
- ``mode="offline"``: only references that never saw x (OUT); the IN half of the mean is approximated linearly from
  the OUT one, Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)) (the paper's ``a``: ``offline_a``, 1 = OUT references alone).
  Examples without any OUT reference fall back to the mean over all OUT values (``n_fallback_``).
- Population Z (:meth:`RMIA.score_samples`): a boolean mask of the examples that are population points (known
  non-members of the target); with ``groups``, x is compared only with population points of other groups (other
  subjects), so no point of x's own subject enters its score. x itself never counts as its own z.

Inputs are probabilities Pr(x|θ) > 0 (a classifier's probability of the true label; any likelihood works where the
offline ``a`` is 1, which makes the scale irrelevant). The arithmetic is in logs. Higher score = more likely a
member; ``score_samples`` and ``decision_function`` are the same.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

__all__ = ["RMIA"]

MODES = ("online", "offline")


def _log_proba(values, name: str) -> np.ndarray:
    p = np.asarray(values, dtype=np.float64)
    if not np.isfinite(p).all() or (p <= 0).any():
        raise ValueError(f"{name} must be finite probabilities (likelihoods) > 0")
    return np.log(p)


class RMIA(BaseEstimator):
    """RMIA from reference-model probabilities: ``fit(proba_reference, in_mask)``, then
    ``score_samples(proba_target, population, groups)``.

    Parameters
    ----------
    mode : {"online", "offline"}
        Online averages every reference model; offline only those that never trained on the example.
    offline_a : float in [0, 1]
        The offline approximation's slope (ignored online). 1 uses the OUT references alone.
    gamma : float ≥ 1
        How much larger x's likelihood ratio must be than z's for x to beat z.
    """

    def __init__(self, mode: str = "offline", offline_a: float = 1.0, gamma: float = 1.0):
        self.mode = mode
        self.offline_a = offline_a
        self.gamma = gamma

    def fit(self, proba_reference, in_mask):
        """``proba_reference``: (n_references, n_examples) Pr(x|θ_r); ``in_mask``: same shape, True where
        reference r trained on example x. Stores ``log_marginal_`` = log Pr(x) per example."""
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= float(self.offline_a) <= 1.0:
            raise ValueError(f"offline_a must lie in [0, 1], got {self.offline_a!r}")
        if not float(self.gamma) >= 1.0:
            raise ValueError(f"gamma must be ≥ 1 (x must beat z by at least a factor 1), got {self.gamma!r}")
        log_p = _log_proba(proba_reference, "proba_reference")
        mask = np.asarray(in_mask)
        if log_p.ndim != 2 or log_p.shape[0] < 1 or log_p.shape[1] < 1:
            raise ValueError(f"proba_reference must be (n_references >= 1, n_examples >= 1), got {log_p.shape}")
        if mask.shape != log_p.shape or not np.isin(mask, (0, 1)).all():
            raise ValueError(f"in_mask must be boolean with proba_reference's shape {log_p.shape}")
        mask = mask.astype(bool)
        self.n_fallback_ = 0
        if self.mode == "online":
            self.log_marginal_ = logsumexp(log_p, axis=0) - np.log(log_p.shape[0])
        else:
            out = ~mask
            if not out.any():
                raise ValueError("offline RMIA needs at least one OUT reference value (a reference that never "
                                 "trained on the example)")
            n_out = out.sum(0)
            with np.errstate(divide="ignore"):
                log_out = logsumexp(np.where(out, log_p, -np.inf), axis=0) - np.log(np.maximum(n_out, 1))
            lonely = n_out == 0
            self.n_fallback_ = int(lonely.sum())
            log_out = np.where(lonely, logsumexp(log_p[out]) - np.log(out.sum()), log_out)
            a = float(self.offline_a)
            # log(½((1 + a)·Pr_OUT + (1 − a))), finite for every a in [0, 1]
            terms = np.stack([np.log1p(a) + log_out, np.full_like(log_out, np.log1p(-a) if a < 1 else -np.inf)])
            self.log_marginal_ = logsumexp(terms, axis=0) - np.log(2.0)
        self.n_references_, self.n_examples_ = log_p.shape
        return self

    def log_ratio(self, proba_target) -> np.ndarray:
        """log(Pr(x|θ)/Pr(x)) per example under the target model θ."""
        check_is_fitted(self, "log_marginal_")
        log_p = _log_proba(proba_target, "proba_target").ravel()
        if log_p.size != self.n_examples_:
            raise ValueError(f"proba_target has {log_p.size} values; the references were fitted on "
                             f"{self.n_examples_} examples (same examples, same order)")
        return log_p - self.log_marginal_

    def score_samples(self, proba_target, population=None, groups=None) -> np.ndarray:
        """Share of population points z each example beats: log-ratio(x) − log-ratio(z) > log γ.

        ``population``: boolean (n_examples,), the population points (default: every example); ``groups``:
        optional (n_examples,) labels, x compared only with population points of other groups. Examples with no
        population point to compare with score NaN (raised as an error: the population is too small)."""
        ratio = self.log_ratio(proba_target)
        n = ratio.size
        pop = np.ones(n, dtype=bool) if population is None else np.asarray(population)
        if pop.shape != (n,) or not np.isin(pop, (0, 1)).all():
            raise ValueError(f"population must be a boolean mask of the {n} examples")
        pop = pop.astype(bool)
        cut = ratio - np.log(float(self.gamma))
        if groups is None:
            z = np.sort(ratio[pop])
            denominator = z.size - pop.astype(int)  # x is never its own z
            beaten = np.searchsorted(z, cut, side="left")
            if (denominator < 1).any():
                raise ValueError("the population holds no point to compare with (needs at least one other example)")
            return beaten / denominator
        labels = np.asarray(groups)
        if labels.shape != (n,):
            raise ValueError(f"groups must hold one label per example ({n})")
        scores = np.empty(n)
        for g in np.unique(labels):
            own = labels == g
            z = np.sort(ratio[pop & ~own])
            if z.size == 0:
                raise ValueError("a group has no population point of another group to compare with")
            scores[own] = np.searchsorted(z, cut[own], side="left") / z.size
        return scores

    def decision_function(self, proba_target, population=None, groups=None) -> np.ndarray:
        return self.score_samples(proba_target, population, groups)
