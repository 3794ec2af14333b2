"""Likelihood-ratio membership inference with shadow models (LiRA, after Carlini et al. 2022, "Membership
Inference Attacks From First Principles"), written for study B.

Why: a classifier trained on [p0, p1, loss] (the RLA) asks one global question, "do members look different?",
and so misses that some trials are easy (high confidence whether trained on or not) and others hard. LiRA asks
it per trial: shadow models trained with and without that trial give its IN and OUT distribution of the
statistic φ, and the target model's φ is judged against those two distributions. That calibration per trial is
what makes it strong at low false-positive rates.

- φ (``logit_confidence``): log p_y − log(1 − p_y) of the true label, computed from logits as
  z_y − logsumexp(z_{≠y}) so it stays finite when p_y rounds to 1; roughly Gaussian over shadow models.
- Online (``mode="online"``): Gaussian fits of IN and OUT φ per trial; score = log N(φ; μ_in, σ_in²) −
  log N(φ; μ_out, σ_out²).
- Offline (``mode="offline"``): OUT fits only (no shadow ever trained on the target's candidates); score =
  −log P_OUT(Φ ≥ φ), one-sided: members are expected to have higher φ than the OUT models give them.
- ``variance="global"``: one pooled within-trial variance per side instead of one per trial. With few shadows a
  per-trial variance from a handful of values is noisy; the paper recommends the shared variance below ~64
  shadows.
- Fallbacks, for trials with too few IN or OUT shadows (fewer than ``min_shadows`` for a variance, none for a
  mean): the variance falls back to the pooled one of that side; a missing IN (OUT) mean to the trial's OUT
  (IN) mean plus the average IN − OUT shift over trials that have both (offline, which never reads IN
  values, uses the mean of all OUT values instead). ``n_fallback_in_``/``n_fallback_out_`` count the trials
  that needed a fallback.

Higher scores mean "more likely a member"; ``score_samples`` and ``decision_function`` are the same.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

__all__ = ["LiRA", "logit_confidence", "logit_confidence_from_proba"]

MODES = ("online", "offline")
VARIANCES = ("per_example", "global")


def logit_confidence(logits, targets) -> np.ndarray:
    """φ = log p_y − log(1 − p_y) per row, from unnormalised logits (n, C): z_y − logsumexp(z_{j≠y})."""
    z = np.asarray(logits, dtype=np.float64)
    t = np.asarray(targets).ravel().astype(int)
    if z.ndim != 2 or z.shape[0] != t.size or z.shape[1] < 2:
        raise ValueError(f"logits must be (n, n_classes >= 2) with one target per row; got {z.shape}, {t.size}")
    if ((t < 0) | (t >= z.shape[1])).any():
        raise ValueError(f"targets must lie in 0..{z.shape[1] - 1}")
    if not np.isfinite(z).all():
        raise ValueError("logits must be finite")
    rows = np.arange(t.size)
    others = z.copy()
    others[rows, t] = -np.inf
    return z[rows, t] - logsumexp(others, axis=1)


def logit_confidence_from_proba(proba, targets, eps: float = 1e-12) -> np.ndarray:
    """φ from probabilities when logits are not available; p_y is clipped to [eps, 1 − eps] (saturates at
    about ±27.6), so prefer ``logit_confidence`` where logits exist."""
    p = np.asarray(proba, dtype=np.float64)
    t = np.asarray(targets).ravel().astype(int)
    if p.ndim != 2 or p.shape[0] != t.size:
        raise ValueError(f"proba must be (n, n_classes) with one target per row; got {p.shape}, {t.size}")
    if ((t < 0) | (t >= p.shape[1])).any():
        raise ValueError(f"targets must lie in 0..{p.shape[1] - 1}")
    py = np.clip(p[np.arange(t.size), t], eps, 1.0 - eps)
    return np.log(py) - np.log1p(-py)


def _side_stats(phi: np.ndarray, mask: np.ndarray):
    """Per-example count, mean and (ddof 1) variance of φ over the shadows selected by ``mask``; NaN where the
    count is too small; plus the pooled within-example variance over examples with at least two values."""
    count = mask.sum(0)
    total = np.where(mask, phi, 0.0).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        resid = np.where(mask, phi - mean, 0.0)
        ss = (resid**2).sum(0)
        var = np.where(count > 1, ss / np.maximum(count - 1, 1), np.nan)
    dof = np.clip(count - 1, 0, None)
    pooled = float(ss[count > 1].sum() / dof[count > 1].sum()) if (count > 1).any() else float("nan")
    return count, mean, var, pooled


class LiRA(BaseEstimator):
    """LiRA from shadow statistics: ``fit(phi_shadow, in_mask)``, then ``score_samples(phi_target)``.

    ``phi_shadow``: (n_shadows, n_examples) φ of every example under every shadow model; ``in_mask``: same
    shape, True where the example was in that shadow's training data. ``phi_target``: (n_examples,) φ under the
    attacked model, in the same example order. ``min_shadows``: fewest IN (OUT) values for a per-example
    variance; ``min_std``: floor on every standard deviation (a constant φ across shadows would otherwise give
    an infinite likelihood ratio).
    """

    def __init__(self, mode: str = "online", variance: str = "global", min_shadows: int = 2,
                 min_std: float = 1e-3):
        self.mode = mode
        self.variance = variance
        self.min_shadows = min_shadows
        self.min_std = min_std

    def fit(self, phi_shadow, in_mask):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.variance not in VARIANCES:
            raise ValueError(f"variance must be one of {VARIANCES}, got {self.variance!r}")
        if int(self.min_shadows) < 2 or not float(self.min_std) > 0:
            raise ValueError("min_shadows must be >= 2 (a variance needs two values) and min_std > 0")
        phi = np.asarray(phi_shadow, dtype=np.float64)
        mask = np.asarray(in_mask)
        if phi.ndim != 2:
            raise ValueError(f"phi_shadow must be (n_shadows, n_examples), got shape {phi.shape}")
        if mask.shape != phi.shape:
            raise ValueError(f"in_mask must match phi_shadow's shape {phi.shape}, got {mask.shape}")
        if mask.dtype != bool:
            if not np.isin(mask, (0, 1)).all():
                raise ValueError("in_mask must be boolean (True = the example was in that shadow's training data)")
            mask = mask.astype(bool)
        if phi.shape[0] < 2 or phi.shape[1] < 1:
            raise ValueError(f"need at least 2 shadow models and 1 example, got {phi.shape}")
        if not np.isfinite(phi).all():
            raise ValueError("phi_shadow must be finite (compute it from logits with logit_confidence)")
        n_in, mu_in, var_in, pooled_in = _side_stats(phi, mask)
        n_out, mu_out, var_out, pooled_out = _side_stats(phi, ~mask)
        if not np.isfinite(pooled_out):
            raise ValueError("no example has two or more OUT shadows: the OUT distribution cannot be fitted")
        if self.mode == "online" and not np.isfinite(pooled_in):
            raise ValueError("no example has two or more IN shadows: online LiRA needs IN fits (use "
                             "mode='offline' or train shadows on the candidates)")
        both = (n_in > 0) & (n_out > 0)
        shift = float(np.mean(mu_in[both] - mu_out[both])) if both.any() else 0.0
        lonely_out = n_out == 0
        self.n_fallback_out_ = int((n_out < int(self.min_shadows)).sum())
        if self.mode == "online":
            mu_out = np.where(lonely_out, mu_in - shift, mu_out)
        else:  # offline never reads IN values: the mean of all OUT values
            mu_out = np.where(lonely_out, float(phi[~mask].mean()), mu_out)
        self.n_fallback_in_ = int((n_in < int(self.min_shadows)).sum()) if self.mode == "online" else 0
        mu_in = np.where(n_in == 0, mu_out + shift, mu_in)
        floor = float(self.min_std) ** 2
        if self.variance == "global":
            var_in = np.full(phi.shape[1], pooled_in)
            var_out = np.full(phi.shape[1], pooled_out)
        else:
            var_in = np.where(n_in >= int(self.min_shadows), var_in, pooled_in)
            var_out = np.where(n_out >= int(self.min_shadows), var_out, pooled_out)
        self.mean_in_, self.mean_out_ = mu_in, mu_out
        self.std_in_ = np.sqrt(np.maximum(var_in, floor)) if self.mode == "online" else None
        self.std_out_ = np.sqrt(np.maximum(var_out, floor))
        self.n_in_, self.n_out_ = n_in, n_out
        self.global_shift_ = shift
        self.n_shadows_, self.n_examples_ = phi.shape
        return self

    def score_samples(self, phi_target) -> np.ndarray:
        """Membership score per example, higher = more likely a member (online: log-likelihood ratio;
        offline: −log of the OUT upper-tail probability)."""
        check_is_fitted(self, "mean_out_")
        phi = np.asarray(phi_target, dtype=np.float64).ravel()
        if phi.size != self.n_examples_:
            raise ValueError(f"phi_target has {phi.size} values; the shadows were fitted on {self.n_examples_} "
                             "examples (same examples, same order)")
        if not np.isfinite(phi).all():
            raise ValueError("phi_target must be finite")
        if self.mode == "online":
            return (norm.logpdf(phi, self.mean_in_, self.std_in_)
                    - norm.logpdf(phi, self.mean_out_, self.std_out_))
        return -norm.logsf(phi, self.mean_out_, self.std_out_)

    def decision_function(self, phi_target) -> np.ndarray:
        return self.score_samples(phi_target)
