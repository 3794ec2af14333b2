"""SYNTHETIC patient-level feature tables, calibrated to a real cohort: a cheap stand-in for "more patients".

**Everything this module generates is SYNTHETIC.** It exists to answer a design question of study A, "how many
patients would a private release need?", at cohort sizes the real data does not have (n = 56..896 patients,
where the real MSU schizophrenia cohort has 84 patients x 176 patient-level features and a binary label).

Why feature-level and not signal-level: the signal generator (:mod:`eegprivacy.data.synthetic`) costs seconds
per patient and has a single effect knob (interictal slowing), so it can neither be run at hundreds of patients
per replicate nor be *calibrated* to a real feature table. A DP release only ever sees the patient-level table,
so that table is what is modelled here: fitting and sampling an 896-patient table take tens of milliseconds,
and every part of the model is estimated from the real cohort.

What it models (a Gaussian copula with a location shift):

- **marginals**: each feature's pooled empirical distribution, kept as its sorted values (``quantiles_``);
  samples are mapped back through the empirical quantile function, linearly interpolated over mid-ranks
  ``(i - 0.5) / n``, so skew, heavy tails and the observed range are reproduced (values never leave the
  observed [min, max]; a discrete feature becomes piecewise continuous between its observed values);
- **dependence**: the pooled within-class correlation of the class-centred normal scores
  ``Φ⁻¹(mid-rank / n)``, shrunk with Ledoit–Wolf because n < d (84 < 176) makes the sample correlation
  singular (``correlation_``);
- **signal**: a per-feature class-mean shift in normal-score space of ``effect_scale * effect_sizes_``
  within-class SDs. The observed standardized effects are inflated by sampling noise (a pure-noise feature has
  E[d_obs²] ≈ 1/n0 + 1/n1, about 0.05 at 84 patients), and a generator that replays them would hand every
  larger synthetic cohort the real cohort's *noise* as if it were signal; with ``debias=True`` they are shrunk
  by the positive-part moment estimator ``sign(d) * sqrt(max(0, d² - (1/n0 + 1/n1)))``. The two class means
  are centred on the fitted label balance and the within-class SD shrinks as the effect grows, so the pooled
  normal scores keep mean 0 and variance 1 and the marginals stay calibrated at any ``effect_scale``.

What it does not model: no within-patient window structure (it generates the patient-level table the release
sees, not windows or signals); no non-linear class structure beyond the copula (a class difference in spread or
in correlation is not reproduced: both classes share ``correlation_`` and a within-class SD); effects are
shared across features only through the correlation, not through a latent disease factor.

**Debiasing is per feature, and the noise is not.** The positive-part estimator leaves a non-zero effect on
roughly a third of pure-noise features (those with |t| > 1) and halves, not removes, their mean |d|. Summed over
176 features that residue is a large multivariate signal: on a toy cohort shaped like MSU with *no* signal at all
(84 x 176, labels independent of the features; its own cross-validated AUROC 0.46-0.66), the debiased
effects still give ``separation_`` ≈ 2.7-3.7 (an :meth:`oracle_auroc` of 0.97-0.995), and a cross-validated
logistic regression reaches AUROC 0.63-0.73 on 84 synthetic patients and 0.95-0.98 on 896 (three toy seeds).
So ``effect_scale = 1`` is not "the real cohort's signal": study A's sample-size stage
(:func:`eegprivacy.studies.release.sample_size.calibrate_effect_scale`) fits ``effect_scale`` so that the study's
own classifier on synthetic cohorts of the real size reproduces the real cohort's cross-validated AUROC, and
reports what it did not fit (each release design's noise-free AUROC, the marginals, the effect sizes) beside it.

**Not a private release.** ``quantiles_`` holds every observed value of every feature, and a sample reuses them
(the observed min and max exactly, the rest interpolated between them); a fitted generator and its samples are a
study instrument, never something to publish in place of the real table.

``effect_scale`` is read when sampling, not when fitting, so one fitted generator serves an effect-size sweep
(``gen.set_params(effect_scale=0.5).sample(...)``); ``effect_scale=0`` draws labels independently of the
features, the matched no-signal null of the same marginals and correlation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.covariance import LedoitWolf
from sklearn.utils.validation import check_is_fitted

from eegprivacy.validation import BOOLEAN, NON_NEGATIVE, Interval, check, count

__all__ = ["FeatureTableGenerator", "marginal_comparison", "standardized_effect_sizes"]

# Fewer patients per class than this leaves the within-class SD (and so every effect size) undefined or
# meaningless: two patients give one degree of freedom per class.
MIN_PER_CLASS = 3


# ---------------------------------------------------------------------------------------------------------
# Input checks and the one effect-size computation
# ---------------------------------------------------------------------------------------------------------
def _check_X(X, name: str = "X") -> tuple[np.ndarray, np.ndarray | None]:
    """A finite 2-D float array (and the column names if ``X`` is a DataFrame)."""
    names = np.asarray(X.columns.astype(str)) if isinstance(X, pd.DataFrame) else None
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (n_patients, n_features) table, got shape {X.shape}")
    if not np.isfinite(X).all():
        bad = np.flatnonzero(~np.isfinite(X).all(axis=0))
        raise ValueError(f"{name} holds NaN or infinite values (in {bad.size} feature column(s), first: "
                         f"{names[bad[0]] if names is not None else bad[0]}); impute or drop them before fitting")
    return X, names


def _check_y(y, n: int, name: str = "y", min_per_class: int = 0) -> np.ndarray:
    """Binary 0/1 labels, one per patient; ``min_per_class`` patients of each class."""
    y = np.asarray(y)
    if y.ndim != 1 or y.size != n:
        raise ValueError(f"{name} must hold one label per patient ({n}), got shape {y.shape}")
    if y.dtype == bool:
        y = y.astype(np.int64)
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name} must be binary 0/1 (1 = positive), got values {np.unique(y).tolist()[:10]}")
    y = y.astype(np.int64)
    n_pos = int(y.sum())
    counts = (n - n_pos, n_pos)
    if min_per_class and min(counts) == 0:
        raise ValueError(f"{name} holds one class only ({counts[0]} negative, {counts[1]} positive); "
                         "a class effect needs patients of both classes")
    if min(counts) < min_per_class:
        raise ValueError(f"{name} has too few patients per class ({counts[0]} negative, {counts[1]} positive); "
                         f"at least {min_per_class} of each are needed for a within-class SD")
    return y


def standardized_effect_sizes(X, y) -> np.ndarray:
    """Per-column standardized mean difference (positive minus negative) over the pooled within-class SD.

    Cohen's d with the ``ddof=1`` pooled SD. A column with no within-class spread has d = 0 when its class means
    agree and NaN otherwise (an infinite effect is not a number a table should average); fewer than two patients
    in a class gives NaN. The generator uses this on normal scores and :func:`marginal_comparison` on raw values,
    so the two effect sizes a report shows side by side come from one computation.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    a, b = X[y == 0], X[y == 1]
    n0, n1 = len(a), len(b)
    if n0 < 2 or n1 < 2:
        return np.full(X.shape[1], np.nan)
    diff = b.mean(axis=0) - a.mean(axis=0)
    pooled = np.sqrt(((n0 - 1) * a.var(axis=0, ddof=1) + (n1 - 1) * b.var(axis=0, ddof=1)) / (n0 + n1 - 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = diff / pooled
    flat = pooled <= 1e-12 * np.maximum(1.0, np.abs(X).max(axis=0))
    return np.where(flat, np.where(diff == 0, 0.0, np.nan), d)


def _rng(random_state) -> np.random.Generator:
    if random_state is None or isinstance(random_state, (np.random.Generator, np.random.SeedSequence)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool) and random_state >= 0:
        return np.random.default_rng(int(random_state))
    raise ValueError(f"random_state = {random_state!r} is invalid; it must be None, a whole number ≥ 0 or a "
                     "numpy.random.Generator")


# ---------------------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------------------
class FeatureTableGenerator(BaseEstimator):
    """SYNTHETIC patient-level feature tables from a Gaussian copula fitted to a real cohort.

    ``fit`` on a real (n_patients, n_features) table and its binary labels, then ``sample`` cohorts of any size.
    See the module docstring for what is and is not modelled.

    Parameters
    ----------
    effect_scale : float, default 1.0
        Multiplies the fitted per-feature effect sizes when sampling: 1 reproduces the (debiased) real effects,
        0 gives labels independent of the features (the no-signal null), 2 doubles every effect. Read at sampling
        time, so it can be changed with ``set_params`` after fitting.
    debias : bool, default True
        Shrink the observed effect sizes for sampling noise before using them (see the module docstring). Without
        it the generator replays the real cohort's chance class differences as signal in every synthetic cohort.
    random_state : int, numpy.random.Generator or None, default None
        Seed for :meth:`sample` when it is not given one. As in scikit-learn, an int makes every such call return
        the same table; pass distinct seeds (or one Generator) to ``sample`` for independent replicates.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_ : ndarray of str or None
        The column names when ``fit`` got a DataFrame.
    n_patients_fit_ : int
    class_counts_ : ndarray of shape (2,)
        Negative and positive patients in the fitted cohort.
    positive_rate_ : float
        Share of positive patients; the default label balance of a sample, and the mixture weight that centres
        the two class means so the pooled marginal of a sample matches the fitted one.
    quantiles_ : ndarray of shape (n_patients_fit_, n_features_in_)
        Each feature's sorted observed values: its empirical quantile function at mid-ranks ``(i - 0.5) / n``.
    class_means_ : ndarray of shape (2, n_features_in_)
        Negative and positive class means of the normal scores.
    effect_sizes_observed_ : ndarray of shape (n_features_in_,)
        Standardized class difference of the normal scores, (m1 - m0) / pooled within-class SD.
    effect_sizes_ : ndarray of shape (n_features_in_,)
        The effect sizes used for sampling: debiased if ``debias``, else the observed ones.
    noise_variance_ : float
        1/n0 + 1/n1, the sampling variance of a pure-noise feature's effect size that debiasing removes.
    correlation_ : ndarray of shape (n_features_in_, n_features_in_)
        Ledoit–Wolf shrunk pooled within-class correlation of the normal scores.
    shrinkage_ : float
        The Ledoit–Wolf shrinkage intensity (0 = sample covariance, 1 = scaled identity).
    separation_ : float
        Mahalanobis distance sqrt(δᵀ R⁻¹ δ) between the class means at ``effect_scale = 1`` (δ =
        ``effect_sizes_``, R = ``correlation_``): the whole cohort's signal, which per-feature effect sizes hide.
        See :meth:`oracle_auroc`.
    """

    def __init__(self, effect_scale: float = 1.0, debias: bool = True, random_state=None):
        self.effect_scale = effect_scale
        self.debias = debias
        self.random_state = random_state

    def _check_params(self) -> None:
        # scikit-learn convention: __init__ only stores, so set_params and clone behave; the checks run here.
        check(self.effect_scale, NON_NEGATIVE, "effect_scale")
        check(self.debias, BOOLEAN, "debias")
        _rng(self.random_state)  # only checks the type: default_rng hands a Generator back without drawing

    def fit(self, X, y) -> FeatureTableGenerator:
        """Learn marginals, copula correlation and effect sizes from a real cohort.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_patients, n_features)
            One row per patient, finite values (the release's patient-level table).
        y : array-like of shape (n_patients,)
            Binary labels, 1 = positive; at least 3 patients of each class.

        Returns
        -------
        self
        """
        self._check_params()
        X, names = _check_X(X)
        n, d = X.shape
        y = _check_y(y, n, min_per_class=MIN_PER_CLASS)
        n1 = int(y.sum())
        n0 = n - n1

        self.n_features_in_ = d
        self.feature_names_ = names
        self.n_patients_fit_ = n
        self.class_counts_ = np.array([n0, n1])
        self.positive_rate_ = n1 / n
        self.quantiles_ = np.sort(X, axis=0)

        # Normal scores of the pooled ranks (ties share their mean rank): the copula's view of each feature,
        # free of its marginal shape, so a skewed feature and a Gaussian one are treated alike.
        Z = stats.norm.ppf((stats.rankdata(X, axis=0) - 0.5) / n)
        self.class_means_ = np.vstack([Z[y == 0].mean(axis=0), Z[y == 1].mean(axis=0)])

        observed = standardized_effect_sizes(Z, y)
        observed = np.nan_to_num(observed, nan=0.0)  # a feature constant within both classes carries no effect
        self.noise_variance_ = 1.0 / n0 + 1.0 / n1
        self.effect_sizes_observed_ = observed
        if self.debias:
            self.effect_sizes_ = np.sign(observed) * np.sqrt(np.maximum(0.0, observed ** 2 - self.noise_variance_))
        else:
            self.effect_sizes_ = observed.copy()

        # Within-class dependence: centre each class on its own means so the label does not masquerade as
        # correlation, then shrink (n < d leaves the sample covariance singular).
        centred = Z - self.class_means_[y]
        lw = LedoitWolf(assume_centered=True).fit(centred)
        self.shrinkage_ = float(lw.shrinkage_)
        self.correlation_ = _to_correlation(lw.covariance_)
        self._factor = _psd_factor(self.correlation_)
        self.separation_ = _mahalanobis(self.effect_sizes_, self.correlation_)
        return self

    def oracle_auroc(self, effect_scale: float | None = None) -> float:
        """AUROC of the Bayes-optimal classifier on this generator's cohorts: Φ(effect_scale * separation_ / √2).

        Within each class the normal scores are Gaussian with a shared covariance, so the optimal score is
        linear in them with AUROC Φ(Δ / √2), Δ the Mahalanobis distance between the class means; the marginal
        maps are monotone and invertible, which leaves the optimal AUROC unchanged. It is the ceiling any
        classifier approaches as the synthetic cohort grows, so it says how much signal a sweep over n is
        *given* (read it beside a label-permuted fit: see the module docstring). ``effect_scale`` defaults to
        the instance's.
        """
        check_is_fitted(self, "separation_")
        scale = check(self.effect_scale if effect_scale is None else effect_scale, NON_NEGATIVE, "effect_scale")
        return float(stats.norm.cdf(float(scale) * self.separation_ / np.sqrt(2.0)))

    def sample(self, n_patients: int, n_positive: int | None = None,
               random_state=None) -> tuple[np.ndarray, np.ndarray]:
        """Draw a SYNTHETIC cohort of ``n_patients`` patients.

        Labels are fixed first (exactly ``n_positive`` positives, in shuffled order); each patient's normal
        scores are then drawn from the within-class correlation around its class mean, and mapped through each
        feature's empirical quantile function.

        The class means sit at ``-π Δ`` and ``(1 - π) Δ`` within-class SDs, with Δ = ``effect_scale *
        effect_sizes_`` and π = ``positive_rate_`` of the *fitted* cohort: their difference is Δ, and the
        label mixture at the fitted balance is centred at 0, as the fitted normal scores are. The within-class SD
        is ``1 / sqrt(1 + π (1 - π) Δ²)``, so the pooled normal scores keep unit variance and the pooled
        marginals stay calibrated whatever ``effect_scale`` is (a unit within-class SD would widen every
        feature with an effect and push its extremes onto the observed min and max). The class-conditional
        distributions are properties of the generator: they do not change with ``n_positive``.

        Parameters
        ----------
        n_patients : int
            At least 2.
        n_positive : int, optional
            Positive patients, between 1 and ``n_patients - 1`` (a one-class cohort has no label to release or
            learn). Default ``round(n_patients * positive_rate_)``, kept within those bounds.
        random_state : int, numpy.random.Generator or None
            Seed for this draw; the instance's ``random_state`` if None.

        Returns
        -------
        X : ndarray of shape (n_patients, n_features_in_)
        y : ndarray of shape (n_patients,), int 0/1
        """
        check_is_fitted(self, "correlation_")
        check(self.effect_scale, NON_NEGATIVE, "effect_scale")
        check(n_patients, count(2, "patients"), "n_patients")
        if n_positive is None:
            n_positive = int(min(max(round(n_patients * self.positive_rate_), 1), n_patients - 1))
        check(n_positive, Interval(1, n_patients - 1, integral=True,
                                   text=f"a whole number of positive patients in [1, {n_patients - 1}]"),
              "n_positive")
        rng = _rng(self.random_state if random_state is None else random_state)

        y = np.zeros(n_patients, dtype=np.int64)
        y[:n_positive] = 1
        y = rng.permutation(y)

        pi = self.positive_rate_
        delta = float(self.effect_scale) * self.effect_sizes_
        sd = 1.0 / np.sqrt(1.0 + pi * (1.0 - pi) * delta ** 2)
        means = np.vstack([-pi * delta, (1.0 - pi) * delta]) * sd
        noise = rng.standard_normal((n_patients, self.n_features_in_)) @ self._factor.T
        Z = means[y] + noise * sd
        return self._inverse(stats.norm.cdf(Z)), y

    def _inverse(self, u: np.ndarray) -> np.ndarray:
        """Empirical quantile function: value at probability u, interpolated between mid-rank positions."""
        Q = self.quantiles_
        n = Q.shape[0]
        pos = np.clip(u * n - 0.5, 0.0, n - 1.0)  # (i - 0.5) / n  <->  index i - 1
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        w = pos - lo
        lo_v = np.take_along_axis(Q, lo, axis=0)
        hi_v = np.take_along_axis(Q, hi, axis=0)
        return lo_v + w * (hi_v - lo_v)


def _to_correlation(cov: np.ndarray) -> np.ndarray:
    """Covariance -> correlation; a feature with no within-class spread is left uncorrelated."""
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ok = sd > 1e-12
    corr = np.zeros_like(cov)
    corr[np.ix_(ok, ok)] = cov[np.ix_(ok, ok)] / np.outer(sd[ok], sd[ok])
    corr = (corr + corr.T) / 2.0
    np.fill_diagonal(corr, 1.0)
    return corr


def _mahalanobis(delta: np.ndarray, corr: np.ndarray) -> float:
    """sqrt(δᵀ R⁻¹ δ), through the pseudo-inverse if R is singular."""
    try:
        solved = np.linalg.solve(corr, delta)
    except np.linalg.LinAlgError:
        solved = np.linalg.pinv(corr) @ delta
    return float(np.sqrt(max(float(delta @ solved), 0.0)))


def _psd_factor(corr: np.ndarray) -> np.ndarray:
    """L with L Lᵀ = corr: Cholesky, or a clipped eigen-factor if rounding left it not positive definite."""
    try:
        return np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:
        values, vectors = np.linalg.eigh(corr)
        return vectors * np.sqrt(np.clip(values, 0.0, None))


# ---------------------------------------------------------------------------------------------------------
# Calibration table
# ---------------------------------------------------------------------------------------------------------
def marginal_comparison(X_real, X_synthetic, y_real=None, y_synthetic=None, feature_names=None) -> pd.DataFrame:
    """Per-feature calibration of a SYNTHETIC table against the real one it was fitted to.

    One row per feature: each table's median and interquartile range, the two-sample Kolmogorov–Smirnov
    statistic (the largest gap between the two empirical CDFs: a distance, not a test; with one row per
    feature, p-values would need a multiplicity correction and would mostly measure the synthetic sample size),
    and, for each table whose labels are given, the standardized effect size (Cohen's d on the raw values,
    positive minus negative) so a report can set the real effects beside the ones the generator reproduces.

    Parameters
    ----------
    X_real, X_synthetic : array-like or DataFrame of shape (n_patients, n_features)
        Same features in the same order; patient counts may differ.
    y_real, y_synthetic : array-like of shape (n_patients,), optional
        Binary 0/1 labels of each table.
    feature_names : sequence of str, optional
        Default: ``X_real``'s columns if it is a DataFrame, else ``feature_0``, ``feature_1``, ...

    Returns
    -------
    DataFrame with columns ``feature, real_median, real_iqr, synthetic_median, synthetic_iqr, ks_statistic``,
    then ``real_effect_size`` if ``y_real`` is given and ``synthetic_effect_size`` if ``y_synthetic`` is.
    """
    real, real_names = _check_X(X_real, "X_real")
    synth, synth_names = _check_X(X_synthetic, "X_synthetic")
    if real.shape[1] != synth.shape[1]:
        raise ValueError(f"X_real has {real.shape[1]} features but X_synthetic has {synth.shape[1]}")
    if real_names is not None and synth_names is not None and not np.array_equal(real_names, synth_names):
        raise ValueError("X_real and X_synthetic have different column names; compare the same features")
    d = real.shape[1]
    if feature_names is None:
        feature_names = real_names if real_names is not None else synth_names
    if feature_names is None:
        feature_names = [f"feature_{j}" for j in range(d)]
    feature_names = [str(f) for f in feature_names]
    if len(feature_names) != d:
        raise ValueError(f"feature_names has {len(feature_names)} names for {d} features")

    def median_iqr(X):
        q25, q50, q75 = np.percentile(X, [25, 50, 75], axis=0)
        return q50, q75 - q25

    real_med, real_iqr = median_iqr(real)
    synth_med, synth_iqr = median_iqr(synth)
    ks = np.array([stats.ks_2samp(real[:, j], synth[:, j]).statistic for j in range(d)])
    table = pd.DataFrame({"feature": feature_names, "real_median": real_med, "real_iqr": real_iqr,
                          "synthetic_median": synth_med, "synthetic_iqr": synth_iqr, "ks_statistic": ks})
    if y_real is not None:
        table["real_effect_size"] = standardized_effect_sizes(real, _check_y(y_real, len(real), "y_real"))
    if y_synthetic is not None:
        table["synthetic_effect_size"] = standardized_effect_sizes(
            synth, _check_y(y_synthetic, len(synth), "y_synthetic"))
    return table
