"""SYNTHETIC feature-table generator (:mod:`eegprivacy.data.feature_generator`): determinism, calibration of the
marginals, correlation and effect sizes, the no-signal null, label counts, errors, and the calibration table.

Every cohort here is a seeded toy shaped like MSU (84 patients, 39 negative / 45 positive; up to 176 features,
lognormal marginals so the copula has a skewed shape to reproduce); no real data is read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.base import clone
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from eegprivacy.data.feature_generator import FeatureTableGenerator, marginal_comparison, standardized_effect_sizes
from eegprivacy.validation import InvalidParameterError

N_NEG, N_POS = 39, 45


def toy_cohort(n_features: int = 176, n_signal: int = 30, shift: float = 0.8, seed: int = 0,
               frame: bool = False):
    """Lognormal features sharing a few latent factors (so there is a correlation to learn); the first
    `n_signal` carry a planted class shift in the log domain of 0.3..`shift` latent SDs."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.zeros(N_NEG, int), np.ones(N_POS, int)]
    loadings = rng.normal(size=(n_features, 4)) * 0.6
    latent = rng.normal(size=(y.size, 4)) @ loadings.T + rng.normal(size=(y.size, n_features))
    planted = np.zeros(n_features)
    planted[:n_signal] = np.linspace(0.3, shift, n_signal) * np.sqrt(1 + (loadings[:n_signal] ** 2).sum(axis=1))
    X = np.exp(0.7 * (latent + y[:, None] * planted))
    if frame:
        X = pd.DataFrame(X, columns=[f"c{j}:power" for j in range(n_features)])
    return X, y


def normal_scores(X: np.ndarray) -> np.ndarray:
    return stats.norm.ppf((stats.rankdata(X, axis=0) - 0.5) / len(X))


def cv_auroc(X, y, seed: int = 0) -> float:
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    return float(cross_val_score(model, np.log(X), y, cv=folds, scoring="roc_auc").mean())


@pytest.fixture(scope="module")
def cohort():
    return toy_cohort()


@pytest.fixture(scope="module")
def fitted(cohort):
    return FeatureTableGenerator(random_state=0).fit(*cohort)


def test_fit_returns_self_and_learns_shapes(cohort):
    X, y = cohort
    gen = FeatureTableGenerator()
    assert gen.fit(X, y) is gen
    d = X.shape[1]
    assert gen.quantiles_.shape == X.shape and (np.diff(gen.quantiles_, axis=0) >= 0).all()
    assert gen.effect_sizes_.shape == gen.effect_sizes_observed_.shape == (d,)
    assert gen.class_means_.shape == (2, d)
    assert gen.correlation_.shape == (d, d)
    np.testing.assert_allclose(np.diag(gen.correlation_), 1.0)
    np.testing.assert_allclose(gen.correlation_, gen.correlation_.T)
    assert np.linalg.eigvalsh(gen.correlation_).min() > 0  # Ledoit-Wolf keeps it invertible although n < d
    assert 0 < gen.shrinkage_ < 1
    assert gen.positive_rate_ == pytest.approx(N_POS / (N_NEG + N_POS))
    assert gen.feature_names_ is None
    assert list(FeatureTableGenerator().fit(*toy_cohort(8, 2, frame=True)).feature_names_) == [
        f"c{j}:power" for j in range(8)]
    # a scikit-learn estimator: params round-trip, clone gives an unfitted copy
    assert clone(gen).get_params() == gen.get_params()
    assert not hasattr(clone(gen), "correlation_")


def test_same_seed_same_sample_different_seed_different(fitted):
    X1, y1 = fitted.sample(100, random_state=7)
    X2, y2 = fitted.sample(100, random_state=7)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, y3 = fitted.sample(100, random_state=8)
    assert not np.array_equal(X1, X3) and not np.array_equal(y1, y3)
    # None falls back to the instance's random_state (an int: the same table every call, as in scikit-learn)
    np.testing.assert_array_equal(fitted.sample(50)[0], fitted.sample(50)[0])
    np.testing.assert_array_equal(fitted.sample(50)[0], fitted.sample(50, random_state=0)[0])
    # a Generator advances: successive draws differ, and a fresh Generator with the same seed replays them
    g = np.random.default_rng(3)
    a, b = fitted.sample(50, random_state=g)[0], fitted.sample(50, random_state=g)[0]
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, fitted.sample(50, random_state=np.random.default_rng(3))[0])


def test_marginals_reproduced_within_observed_range(cohort, fitted):
    X, _ = cohort
    assert stats.skew(X, axis=0).mean() > 1  # the toy marginals really are skewed
    Xs, _ = fitted.sample(4000, random_state=1)
    ks = np.array([stats.ks_2samp(X[:, j], Xs[:, j]).statistic for j in range(X.shape[1])])
    assert ks.max() < 0.1, ks.max()
    assert (Xs >= X.min(axis=0)).all() and (Xs <= X.max(axis=0)).all()
    # the skew comes from the empirical quantile function, not from a Gaussian
    np.testing.assert_allclose(np.median(Xs, axis=0), np.median(X, axis=0), rtol=0.15)


def test_marginals_stay_calibrated_when_effects_are_scaled(cohort):
    X, y = cohort
    gen = FeatureTableGenerator(effect_scale=3.0).fit(X, y)
    Xs, _ = gen.sample(4000, random_state=2)
    strong = np.argsort(-np.abs(gen.effect_sizes_))[:10]
    ks = [stats.ks_2samp(X[:, j], Xs[:, j]).statistic for j in strong]
    assert max(ks) < 0.1, ks


def test_correlation_reproduced(cohort, fitted):
    Xs, ys = fitted.sample(4000, random_state=3)
    Z = normal_scores(Xs)
    Z = Z - np.vstack([Z[ys == 0].mean(axis=0), Z[ys == 1].mean(axis=0)])[ys]
    upper = np.triu_indices(Xs.shape[1], 1)
    assert np.corrcoef(np.corrcoef(Z.T)[upper], fitted.correlation_[upper])[0, 1] > 0.95


def test_effect_sizes_track_and_debias_shrinks_noise(cohort, fitted):
    Xs, ys = fitted.sample(4000, random_state=4)
    in_normal_scores = standardized_effect_sizes(normal_scores(Xs), ys)
    on_raw_values = standardized_effect_sizes(Xs, ys)
    assert np.corrcoef(in_normal_scores, fitted.effect_sizes_)[0, 1] > 0.9
    assert np.corrcoef(on_raw_values, fitted.effect_sizes_)[0, 1] > 0.9
    # the between-class difference is effect_scale * effect_sizes_ (slope ~ 1), not half of it
    slope = np.polyfit(fitted.effect_sizes_, in_normal_scores, 1)[0]
    assert slope == pytest.approx(1.0, abs=0.1)

    noise = slice(30, None)  # toy_cohort plants its shift on the first 30 features only
    observed, debiased = np.abs(fitted.effect_sizes_observed_[noise]), np.abs(fitted.effect_sizes_[noise])
    assert debiased.mean() < 0.6 * observed.mean()
    assert (debiased <= observed).all() and (fitted.effect_sizes_[noise] == 0).mean() > 0.5
    # the planted effects survive debiasing
    assert np.abs(fitted.effect_sizes_[:30]).mean() > 0.8 * np.abs(fitted.effect_sizes_observed_[:30]).mean()
    raw = FeatureTableGenerator(debias=False).fit(*cohort)
    np.testing.assert_array_equal(raw.effect_sizes_, raw.effect_sizes_observed_)


def test_no_signal_at_zero_effect_scale_and_signal_at_one():
    X, y = toy_cohort(n_features=40, n_signal=10, shift=1.2, seed=1)
    null = FeatureTableGenerator(effect_scale=0.0).fit(X, y)
    assert null.oracle_auroc() == 0.5
    aurocs = [cv_auroc(*null.sample(200, random_state=s), seed=s) for s in range(4)]
    assert abs(np.mean(aurocs) - 0.5) < 0.05, aurocs
    signal = null.set_params(effect_scale=1.0)  # read at sampling time: no refit needed
    aurocs = [cv_auroc(*signal.sample(200, random_state=s), seed=s) for s in range(2)]
    assert np.mean(aurocs) > 0.6, aurocs


def test_oracle_auroc_is_the_large_sample_ceiling():
    X, y = toy_cohort(n_features=6, n_signal=3, shift=0.8, seed=2)
    gen = FeatureTableGenerator(random_state=0).fit(X, y)
    train_X, train_y = gen.sample(20000, random_state=1)
    test_X, test_y = gen.sample(20000, random_state=2)
    # the Bayes rule is linear in the normal scores (within-class Gaussian, shared covariance)
    lda = LinearDiscriminantAnalysis().fit(normal_scores(train_X), train_y)
    auroc = roc_auc_score(test_y, lda.decision_function(normal_scores(test_X)))
    assert auroc == pytest.approx(gen.oracle_auroc(), abs=0.02)
    assert gen.oracle_auroc(0.0) == 0.5 and gen.oracle_auroc(2.0) > gen.oracle_auroc()


def test_label_counts(fitted):
    _, y = fitted.sample(101, n_positive=17, random_state=0)
    assert y.sum() == 17 and y.size == 101
    assert not (y[:17] == 1).all()  # label order is shuffled, not the first 17 rows
    for n in (2, 3, 56, 896):
        _, y = fitted.sample(n, random_state=0)
        assert y.sum() == min(max(round(n * fitted.positive_rate_), 1), n - 1)
        assert 0 < y.sum() < n


@pytest.mark.parametrize("change, message", [
    (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), y), "NaN or infinite"),
    (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), y), "NaN or infinite"),
    (lambda X, y: (X, np.ones_like(y)), "one class only"),
    (lambda X, y: (X[:N_NEG + 2], y[:N_NEG + 2]), "too few patients per class"),
    (lambda X, y: (X, y + 1), "binary 0/1"),
    (lambda X, y: (X, y[:-1]), "one label per patient"),
    (lambda X, y: (X[:, 0], y), "n_patients, n_features"),
])
def test_fit_errors(change, message):
    X, y = toy_cohort(n_features=5, n_signal=1)
    with pytest.raises(ValueError, match=message):
        FeatureTableGenerator().fit(*change(X, y))


def test_parameter_errors(fitted, cohort):
    X, y = cohort
    with pytest.raises(InvalidParameterError, match="effect_scale"):
        FeatureTableGenerator(effect_scale=-0.5).fit(X, y)
    with pytest.raises(InvalidParameterError, match="debias"):
        FeatureTableGenerator(debias="yes").fit(X, y)
    with pytest.raises(ValueError, match="random_state"):
        FeatureTableGenerator(random_state=-1).fit(X, y)
    for n in (1, 0, 2.5):
        with pytest.raises(InvalidParameterError, match="n_patients"):
            fitted.sample(n)
    for k in (0, 10, 3.0):
        with pytest.raises(InvalidParameterError, match="n_positive"):
            fitted.sample(10, n_positive=k)
    with pytest.raises(InvalidParameterError, match="effect_scale"):
        clone(fitted).set_params(effect_scale=-1).fit(X, y)
    with pytest.raises(InvalidParameterError, match="effect_scale"):
        fitted.oracle_auroc(-1.0)


def test_sample_before_fit_fails():
    with pytest.raises(NotFittedError):
        FeatureTableGenerator().sample(10)


def test_constant_feature_is_kept_constant():
    X, y = toy_cohort(n_features=5, n_signal=1)
    X[:, 2] = 3.0
    gen = FeatureTableGenerator().fit(X, y)
    assert gen.effect_sizes_[2] == 0.0
    Xs, _ = gen.sample(50, random_state=0)
    assert (Xs[:, 2] == 3.0).all() and np.isfinite(Xs).all()


def test_marginal_comparison_columns(cohort, fitted):
    X, y = cohort
    Xs, ys = fitted.sample(300, random_state=0)
    table = marginal_comparison(X, Xs, y, ys)
    assert list(table.columns) == ["feature", "real_median", "real_iqr", "synthetic_median", "synthetic_iqr",
                                   "ks_statistic", "real_effect_size", "synthetic_effect_size"]
    assert len(table) == X.shape[1] and table["feature"].iloc[0] == "feature_0"
    np.testing.assert_allclose(table["real_median"], np.median(X, axis=0))
    np.testing.assert_allclose(table["real_effect_size"], standardized_effect_sizes(X, y))
    assert table["ks_statistic"].between(0, 1).all()
    assert table.notna().all().all()

    frame, y8 = toy_cohort(8, 2, frame=True)
    gen8 = FeatureTableGenerator().fit(frame, y8)
    bare = marginal_comparison(frame, gen8.sample(40, random_state=0)[0])
    assert list(bare["feature"]) == list(frame.columns) and "real_effect_size" not in bare
    named = marginal_comparison(X[:, :3], Xs[:, :3], feature_names=["a", "b", "c"])
    assert list(named["feature"]) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="features"):
        marginal_comparison(X, Xs[:, :5])
    with pytest.raises(ValueError, match="NaN"):
        marginal_comparison(np.where(X > 0, np.nan, X), Xs)
