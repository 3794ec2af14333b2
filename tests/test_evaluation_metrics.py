"""Confusion metrics and threshold selection: the paper's Table 7 arithmetic and scikit-learn as reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn import metrics as skm

from eegprivacy.evaluation import (
    DP_GRID,
    ORIGINAL_GRID,
    best_f1_threshold,
    classification_metrics,
    confusion_counts,
    f1_by_threshold,
)

# Table 7 of study A (TN, FP, FN, TP) and the values printed for them (3 decimals).
PAPER_TABLE = {
    "original": (
        (9, 3, 2, 3),
        {
            "accuracy": 0.706,
            "precision": 0.500,
            "recall": 0.600,
            "specificity": 0.750,
            "balanced_accuracy": 0.675,
            "f1": 0.545,
            "accuracy_ci_low": 0.469,
            "accuracy_ci_high": 0.867,
            "recall_ci_low": 0.231,
            "recall_ci_high": 0.882,
            "specificity_ci_low": 0.468,
            "specificity_ci_high": 0.911,
        },
    ),
    "gaussian": (
        (0, 12, 0, 5),
        {
            "recall": 1.000,
            "specificity": 0.000,
            "precision": 0.294,
            "balanced_accuracy": 0.500,
            "accuracy_ci_low": 0.133,
            "accuracy_ci_high": 0.531,
            "recall_ci_low": 0.566,
            "recall_ci_high": 1.000,
            "specificity_ci_low": 0.000,
            "specificity_ci_high": 0.242,
        },
    ),
    "laplace": (
        (1, 11, 2, 3),
        {
            "accuracy": 0.235,
            "precision": 0.214,
            "recall": 0.600,
            "specificity": 0.083,
            "balanced_accuracy": 0.342,
            "f1": 0.316,
            "accuracy_ci_low": 0.096,
            "accuracy_ci_high": 0.473,
            "recall_ci_low": 0.231,
            "recall_ci_high": 0.882,
            "specificity_ci_low": 0.015,
            "specificity_ci_high": 0.354,
        },
    ),
}


@pytest.mark.parametrize("name", sorted(PAPER_TABLE))
def test_paper_table7_arithmetic(name):
    counts, expected = PAPER_TABLE[name]
    got = classification_metrics(*counts)
    assert {k: round(got[k], 3) for k in expected} == expected
    assert got["n"] == 17
    assert (got["tn"], got["fp"], got["fn"], got["tp"]) == counts


def test_majority_classifier_has_same_accuracy_but_chance_balanced_accuracy():
    """The paper's own caution: predicting 'no epilepsy' for everyone also scores 12/17."""
    m = classification_metrics(tn=12, fp=0, fn=5, tp=0)
    assert round(m["accuracy"], 3) == 0.706
    assert m["balanced_accuracy"] == 0.5
    assert m["precision"] == 0.0 and m["f1"] == 0.0  # 0/0 defined as 0.0


def test_zero_denominators():
    m = classification_metrics(tn=4, fp=1, fn=0, tp=0)  # no positives in the cohort
    assert m["recall"] == 0.0 and m["f1"] == 0.0 and m["precision"] == 0.0
    assert math.isnan(m["recall_ci_low"]) and math.isnan(m["recall_ci_high"])
    assert not math.isnan(m["specificity_ci_low"])
    with pytest.raises(ValueError):
        classification_metrics(-1, 0, 0, 0)


def test_agrees_with_scikit_learn_on_random_labels():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y_true = rng.integers(0, 2, size=int(rng.integers(5, 60)))
        y_pred = rng.integers(0, 2, size=y_true.size)
        c = confusion_counts(y_true, y_pred)
        assert [[c["tn"], c["fp"]], [c["fn"], c["tp"]]] == skm.confusion_matrix(y_true, y_pred, labels=[0, 1]).tolist()
        m = classification_metrics(**c)
        assert m["accuracy"] == pytest.approx(skm.accuracy_score(y_true, y_pred))
        assert m["precision"] == pytest.approx(skm.precision_score(y_true, y_pred, zero_division=0))
        assert m["recall"] == pytest.approx(skm.recall_score(y_true, y_pred, zero_division=0))
        assert m["f1"] == pytest.approx(skm.f1_score(y_true, y_pred, zero_division=0))
        if 0 < y_true.sum() < y_true.size:
            assert m["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y_true, y_pred))


def test_confusion_counts_rejects_non_binary_labels():
    with pytest.raises(ValueError):
        confusion_counts([0, 1, 2], [0, 1, 1])
    with pytest.raises(ValueError):
        confusion_counts([0, 1], [0, 1, 1])


# --- thresholds ---------------------------------------------------------------------------------------


def test_grids_are_the_papers_and_exact():
    assert ORIGINAL_GRID.tolist() == [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]
    assert DP_GRID.size == 19 and DP_GRID[0] == 0.05 and DP_GRID[-1] == 0.95
    assert 0.35 in ORIGINAL_GRID.tolist() and 0.15 in DP_GRID.tolist()  # no 0.35000000000000003 drift
    assert np.all(np.diff(DP_GRID) > 0)
    with pytest.raises(ValueError):
        ORIGINAL_GRID[0] = 0.0  # shared constant is read-only


def test_best_f1_threshold_hand_made_case():
    y = [0, 0, 0, 1, 1]
    p = [0.10, 0.30, 0.60, 0.55, 0.90]
    # thresholds 0.35..0.55 give tp 2, fp 1 -> F1 0.8; >= means 0.55 itself counts as positive.
    f1 = dict(zip(ORIGINAL_GRID.tolist(), f1_by_threshold(y, p, ORIGINAL_GRID)))
    assert f1[0.55] == pytest.approx(0.8) and f1[0.3] == pytest.approx(2 / 3) and f1[0.6] == pytest.approx(0.5)
    assert f1[0.8] == pytest.approx(2 / 3)
    assert best_f1_threshold(y, p, ORIGINAL_GRID) == 0.5  # five-way tie, closest to 0.5 wins


def test_best_f1_threshold_tie_breaks():
    y = [0, 1, 1]
    p = [0.1, 0.9, 0.95]  # every threshold in (0.1, 0.9] is perfect
    assert best_f1_threshold(y, p, [0.45, 0.55]) == 0.45  # equally close to 0.5 -> lowest
    assert best_f1_threshold(y, p, [0.2, 0.7, 0.6]) == 0.6
    assert best_f1_threshold([0, 0, 0], [0.2, 0.4, 0.6], DP_GRID) == 0.5  # no positives: all F1 = 0
    assert best_f1_threshold([0, 1, 0, 1], [0.2, 0.3, 0.35, 0.1], [0.05, 0.5]) == 0.05  # unique best wins


def test_f1_by_threshold_matches_scikit_learn():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, size=40)
    p = rng.random(40)
    got = f1_by_threshold(y, p, DP_GRID)
    ref = [skm.f1_score(y, (p >= t).astype(int), zero_division=0) for t in DP_GRID]
    np.testing.assert_allclose(got, ref)
