"""Label DP for study A: randomized response on the patient label, its composition with the feature release,
and LOSO evaluation of models trained on released labels but scored against the truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import LeaveOneGroupOut

from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation import DP_GRID, LOSOEvaluation, best_f1_threshold, default_mlp
from eegprivacy.privacy import RandomizedResponse, compose_with_labels
from eegprivacy.privacy.accounting import basic_composition
from eegprivacy.privacy.release import _noise_generator
from eegprivacy.validation import InvalidParameterError

INF = math.inf


# ---- randomized response ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_flip_rate_matches_one_over_one_plus_e_eps(epsilon):
    """Flips over many labels of both classes fall inside the 1e-6 binomial interval of 1/(1 + e^ε); the
    tempting wrong rate e^-ε (and the keep rate) fall outside it."""
    n = 200_000
    y = np.tile([0, 1], n // 2)
    flips = int(np.count_nonzero(RandomizedResponse(epsilon).release(y, random_state=7) != y))
    p = 1.0 / (1.0 + math.exp(epsilon))
    assert RandomizedResponse(epsilon).flip_probability == pytest.approx(p, rel=1e-12)
    low, high = binom.interval(1 - 1e-6, n, p)
    assert low <= flips <= high, (flips, n * p)
    for wrong in (math.exp(-epsilon), 1 - p):
        assert not binom.interval(1 - 1e-6, n, wrong)[0] <= flips <= binom.interval(1 - 1e-6, n, wrong)[1]
    for cls in (0, 1):  # each class flips at the same rate: the mechanism is symmetric
        flips_cls = int(np.count_nonzero(RandomizedResponse(epsilon).release(y, 7)[y == cls] != cls))
        assert binom.interval(1 - 1e-6, n // 2, p)[0] <= flips_cls <= binom.interval(1 - 1e-6, n // 2, p)[1]


def test_infinite_epsilon_never_flips_and_says_there_is_no_guarantee():
    y = np.random.default_rng(0).integers(0, 2, 100_000)
    rr = RandomizedResponse(INF)
    np.testing.assert_array_equal(rr.release(y, 3), y)
    calibration = rr.calibrate()
    assert calibration.flip_probability == 0.0 and not calibration.formal_guarantee
    assert "in the clear" in calibration.note
    # a huge finite ε underflows to "never flip" without overflowing e^ε
    assert RandomizedResponse(1e4).flip_probability == 0.0


def test_release_is_deterministic_per_seed_and_its_stream_is_its_own():
    y = np.random.default_rng(1).integers(0, 2, 2_000)
    rr = RandomizedResponse(0.5)
    np.testing.assert_array_equal(rr.release(y, 11), rr.release(y, 11))
    np.testing.assert_array_equal(rr(y, 11), rr.release(y, 11))
    assert not np.array_equal(rr.release(y, 11), rr.release(y, 12))
    generator = np.random.default_rng(11)
    first, second = rr.release(y, generator), rr.release(y, generator)  # a Generator is used as given
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first, np.where(np.random.default_rng(11).random(y.size) < rr.flip_probability,
                                                  1 - y, y))
    # An int seed must not reuse default_rng(seed) (a synthetic cohort drawn with it) nor the feature noise
    # stream of the same seed (composition assumes independent coins).
    for stream in (np.random.default_rng(11), _noise_generator(11)):
        same = np.where(stream.random(y.size) < rr.flip_probability, 1 - y, y)
        assert not np.array_equal(rr.release(y, 11), same)


def test_same_seed_couples_flips_monotonically_across_epsilon():
    y = np.random.default_rng(2).integers(0, 2, 5_000)
    flipped = {eps: RandomizedResponse(eps).release(y, 4) != y for eps in (0.2, 1.0, 3.0, INF)}
    assert flipped[0.2].sum() > flipped[1.0].sum() > flipped[3.0].sum() > flipped[INF].sum() == 0
    assert not np.any(flipped[1.0] & ~flipped[0.2]) and not np.any(flipped[3.0] & ~flipped[1.0])


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 2.5])
def test_output_distributions_for_either_label_differ_by_at_most_e_eps(epsilon):
    """ε-DP for one patient's label: for every output o, P(o | y = 0) ≤ e^ε P(o | y = 1) and vice versa. The
    exact probabilities meet the bound with equality (no needless noise); the empirical ones agree."""
    rr = RandomizedResponse(epsilon)
    p = rr.flip_probability
    exact = {0: np.array([1 - p, p]), 1: np.array([p, 1 - p])}  # P(output = 0), P(output = 1)
    ratios = np.concatenate([exact[0] / exact[1], exact[1] / exact[0]])
    assert ratios.max() <= math.exp(epsilon) * (1 + 1e-12)
    assert ratios.max() == pytest.approx(math.exp(epsilon), rel=1e-12)

    n = 400_000
    empirical = {}
    for label in (0, 1):
        out = rr.release(np.full(n, label), random_state=100 + label)
        empirical[label] = np.bincount(out, minlength=2) / n
    # Each empirical frequency within 5 binomial standard errors of its exact value, so the empirical
    # ratio stays near e^ε; a mechanism at 2ε would be far outside.
    for label in (0, 1):
        se = np.sqrt(exact[label] * (1 - exact[label]) / n)
        assert np.all(np.abs(empirical[label] - exact[label]) <= 5 * se)
    empirical_ratio = max((empirical[0] / empirical[1]).max(), (empirical[1] / empirical[0]).max())
    assert empirical_ratio == pytest.approx(math.exp(epsilon), rel=0.05)
    assert empirical_ratio < math.exp(2 * epsilon) * 0.9


def test_positive_rate_estimate_is_unbiased_and_the_naive_rate_is_not():
    y = np.zeros(400, dtype=int)
    y[:100] = 1  # true rate 0.25
    rr = RandomizedResponse(0.7)
    released = [rr.release(y, s) for s in range(400)]
    estimates = np.array([rr.estimate_positive_rate(r) for r in released])
    se = estimates.std(ddof=1) / np.sqrt(estimates.size)
    assert abs(estimates.mean() - 0.25) < 4 * se
    naive = np.mean([r.mean() for r in released])  # pulled towards 0.5 by the flips
    assert abs(naive - 0.25) > 20 * se


def test_calibration_is_declarative_and_bad_input_is_named():
    rr = RandomizedResponse(2)
    assert isinstance(rr.epsilon, float)
    calibration = rr.calibrate()
    assert calibration.flip_probability == rr.flip_probability
    assert calibration.keep_probability / calibration.flip_probability == pytest.approx(math.exp(2))
    assert calibration.formal_guarantee and calibration.mechanism == "randomized_response"
    assert set(calibration.to_dict()) == {"label_epsilon", "label_flip_probability", "label_formal_guarantee",
                                          "label_note", "label_mechanism"}
    assert rr.to_dict() == {"label_mechanism": "randomized_response", "label_epsilon": 2.0}
    for bad in (0, -1.0, math.nan, True, "1", None):
        with pytest.raises(InvalidParameterError, match=r"label epsilon = .* it must be a positive ε"):
            RandomizedResponse(bad)
    with pytest.raises(ValueError, match="only 0 and 1"):
        rr.release([0, 2, 1], 0)
    with pytest.raises(ValueError, match="1-D"):
        rr.release([[0, 1]], 0)


# ---- composition -----------------------------------------------------------------------------------------------

def test_composition_adds_the_label_epsilon_to_the_feature_release():
    g = compose_with_labels(2.0, 1e-5, 0.5)
    assert (g.epsilon, g.delta) == (2.5, 1e-5) == basic_composition((2.0, 1e-5), 0.5)
    assert (g.feature_epsilon, g.feature_delta, g.label_epsilon) == (2.0, 1e-5, 0.5)
    assert (g.eps_unit, g.accounting, g.formal_guarantee) == ("subject", "cumulative", True)
    assert "feature columns" in g.note
    assert compose_with_labels(1.0, 0.0, 1.0).to_dict()["epsilon"] == 2.0  # pure ε stays pure

    clear = compose_with_labels(2.0, 1e-5, INF)  # today: labels in the clear
    assert math.isinf(clear.epsilon) and not clear.formal_guarantee and "in the clear" in clear.note
    unnoised = compose_with_labels(INF, 0.0, 1.0)
    assert math.isinf(unnoised.epsilon) and not unnoised.formal_guarantee

    with pytest.raises(InvalidParameterError, match="label epsilon"):
        compose_with_labels(1.0, 1e-5, 0.0)
    with pytest.raises(InvalidParameterError, match="feature epsilon"):
        compose_with_labels(-1.0, 1e-5, 1.0)
    with pytest.raises(ValueError, match="delta"):
        compose_with_labels(1.0, 1.0, 1.0)


# ---- LOSO with released training labels ------------------------------------------------------------------------

class LabelRecorder(ClassifierMixin, BaseEstimator):
    """Records the (row id, label) pairs each fit saw (row id in column 0); predicts P(1) = sigmoid(column 1)."""

    seen: list = []

    def __init__(self, random_state=None):
        self.random_state = random_state

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        LabelRecorder.seen.append(dict(zip(X[:, 0].astype(int).tolist(), np.asarray(y).tolist())))
        return self

    def predict_proba(self, X):
        p = 1.0 / (1.0 + np.exp(-X[:, 1]))
        return np.column_stack([1.0 - p, p])


def learnable(n, seed, shift=1.5, d=5):
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=int)
    y[: n // 2] = 1
    rng.shuffle(y)
    X = rng.normal(size=(n, d))
    X[:, :2] += shift * (2 * y - 1)[:, None]
    return X, y


def _assert_same_result(a, b):
    np.testing.assert_array_equal(a.proba, b.proba)
    np.testing.assert_array_equal(a.y_true, b.y_true)
    np.testing.assert_array_equal(a.inner_proba, b.inner_proba)
    assert set(a.protocols) == set(b.protocols)
    for name in a.protocols:
        np.testing.assert_array_equal(a[name].thresholds, b[name].thresholds)
        np.testing.assert_array_equal(a[name].y_pred, b[name].y_pred)
        np.testing.assert_array_equal(a[name].confusion, b[name].confusion)
        assert a[name].metrics.keys() == b[name].metrics.keys()
        np.testing.assert_array_equal(list(a[name].metrics.values()), list(b[name].metrics.values()))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_y_fit_none_or_equal_to_y_changes_nothing():
    """Without y_fit the paper's MLP gives what a hand-written LOSO loop with the same seed gives (bit for bit on
    scikit-learn's path, to the batched MLP's 1e-9 on the default one), and y_fit=None or y_fit=y reproduce it
    bit for bit (2 rows per patient, nested thresholds included)."""
    rng = np.random.default_rng(3)
    X, y_patient = learnable(7, seed=3, shift=0.6, d=4)
    X = np.repeat(X, 2, axis=0) + rng.normal(scale=0.1, size=(14, 4))
    y, groups = np.repeat(y_patient, 2), np.repeat(np.arange(7), 2)
    evaluation = LOSOEvaluation(random_state=5, threshold_grid=DP_GRID)
    plain = evaluation.evaluate(X, y, groups)
    assert plain.y_fit is None
    _assert_same_result(plain, evaluation.evaluate(X, y, groups, y_fit=None))
    same = evaluation.evaluate(X, y, groups, y_fit=y.copy())
    _assert_same_result(plain, same)
    np.testing.assert_array_equal(same.y_fit, y_patient)

    by_hand = np.empty(7)
    for train, test in LeaveOneGroupOut().split(X, y, groups):
        by_hand[groups[test[0]]] = clone(default_mlp(5)).fit(X[train], y[train]).predict_proba(X[test])[:, 1].mean()
    np.testing.assert_allclose(plain.proba, by_hand, rtol=0, atol=1e-9)  # eegprivacy.batched.AdamMLP's tolerance
    sklearn_path = LOSOEvaluation(random_state=5, threshold_grid=DP_GRID, batched=False).evaluate(X, y, groups)
    np.testing.assert_array_equal(sklearn_path.proba, by_hand)


@pytest.mark.parametrize("inner_folds", [None, 3])
def test_models_train_and_nested_thresholds_select_on_y_fit_while_metrics_use_y(inner_folds):
    n = 9
    X, y = learnable(n, seed=5, shift=0.4, d=2)
    X = np.column_stack([np.arange(n), X])  # column 0: row id for the recorder, column 1: its logit
    y_fit = RandomizedResponse(0.3).release(y, 1)
    assert not np.array_equal(y_fit, y)
    LabelRecorder.seen = []
    evaluation = LOSOEvaluation(LabelRecorder(), threshold_grid=DP_GRID, inner_folds=inner_folds)
    res = evaluation.evaluate(X, y, np.arange(n), y_fit=y_fit)
    assert LabelRecorder.seen and all(label == y_fit[row] for fit in LabelRecorder.seen
                                      for row, label in fit.items())
    np.testing.assert_array_equal(res.y_true, y)
    np.testing.assert_array_equal(res.y_fit, y_fit)

    for i in range(n):  # the analyst's thresholds: chosen on released labels of the training patients
        others = np.arange(n) != i
        assert res["nested"].thresholds[i] == best_f1_threshold(y_fit[others], res.inner_proba[i, others], DP_GRID)
    assert res["optimistic"].threshold == best_f1_threshold(y, res.proba, DP_GRID)  # sees the truth by design
    for name in ("optimistic", "nested"):  # scored against the truth
        p = res[name]
        tp = int(np.sum((p.y_pred == 1) & (y == 1)))
        fn = int(np.sum((p.y_pred == 0) & (y == 1)))
        assert (p.metrics["tp"], p.metrics["fn"]) == (tp, fn)
    # the same fits scored as if the released labels were the truth differ: the argument matters
    as_truth = evaluation.evaluate(X, y_fit, np.arange(n))
    np.testing.assert_array_equal(as_truth.proba, res.proba)  # the recorder's scores ignore its labels
    assert as_truth["nested"].metrics != res["nested"].metrics


def test_y_fit_is_validated_like_y():
    X = np.zeros((4, 2))
    evaluation = LOSOEvaluation(LabelRecorder(), nested=False)
    with pytest.raises(ValueError, match="y_fit must hold only 0 and 1"):
        evaluation.evaluate(X, [0, 1, 0, 1], [0, 1, 2, 3], y_fit=[0, 2, 0, 1])
    with pytest.raises(ValueError, match="y_fit has 3 labels for 4 rows"):
        evaluation.evaluate(X, [0, 1, 0, 1], [0, 1, 2, 3], y_fit=[0, 1, 0])
    with pytest.raises(ValueError, match=r"one label across all its rows \(y_fit\)"):
        evaluation.evaluate(X, [0, 0, 1, 1], [0, 0, 1, 2], y_fit=[0, 1, 1, 1])


def test_auroc_against_the_truth_falls_to_chance_at_small_label_epsilon():
    """Trained on labels released at ε = ∞ the result is the no-label-DP one exactly; at ε = 0.05 (flip
    probability ≈ 0.49) the released labels carry almost no signal and the AUROC against the true
    diagnosis falls to chance, while a moderate ε keeps part of it."""
    n = 40
    X, y = learnable(n, seed=0)
    groups = np.arange(n)
    evaluation = LOSOEvaluation(LogisticRegression(C=0.5), nested=False, threshold_grid=DP_GRID)
    clean = evaluation.evaluate(X, y, groups)
    clean_auroc = auroc(y, clean.proba)
    assert clean_auroc > 0.9

    released_inf = RandomizedResponse(INF).release(y, 0)
    _assert_same_result(clean, evaluation.evaluate(X, y, groups, y_fit=released_inf))

    def mean_auroc(epsilon):
        values = []
        for seed in range(8):
            res = evaluation.evaluate(X, y, groups, y_fit=RandomizedResponse(epsilon).release(y, seed))
            np.testing.assert_array_equal(res.y_true, y)
            values.append(auroc(res.y_true, res.proba))
        return float(np.mean(values))

    low, moderate = mean_auroc(0.05), mean_auroc(2.0)
    assert abs(low - 0.5) < 0.15, low
    assert low < moderate < clean_auroc + 1e-12, (low, moderate, clean_auroc)
