"""Binary confusion-matrix metrics, computed from counts so that published matrices can be re-checked.

Every ratio whose denominator is zero (e.g. precision when nothing is predicted positive) is defined as 0.0,
the same choice as scikit-learn's `zero_division=0`: a classifier that never fires gets no credit for it.
Wilson intervals, in contrast, are nan for an empty denominator because there is nothing to estimate.
"""

from __future__ import annotations

import numpy as np

from eegprivacy.evaluation.intervals import wilson_interval

__all__ = ["confusion_counts", "confusion_matrix", "classification_metrics"]


def confusion_counts(y_true, y_pred) -> dict[str, int]:
    """tn, fp, fn, tp for labels in {0, 1} (1 = positive class, e.g. epilepsy)."""
    y_true = np.asarray(y_true).ravel()
    y_pred = np.asarray(y_pred).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {y_true.size} vs {y_pred.size}")
    for name, arr in (("y_true", y_true), ("y_pred", y_pred)):
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must hold only 0 and 1 (1 = positive class)")
    t = y_true.astype(bool)
    p = y_pred.astype(bool)
    tp = int(np.count_nonzero(t & p))
    fn = int(np.count_nonzero(t & ~p))
    fp = int(np.count_nonzero(~t & p))
    return {"tn": int(t.size - tp - fn - fp), "fp": fp, "fn": fn, "tp": tp}


def confusion_matrix(tn: int, fp: int, fn: int, tp: int) -> np.ndarray:
    """2x2 matrix in scikit-learn's layout [[tn, fp], [fn, tp]] (rows = true class), for figures."""
    return np.array([[tn, fp], [fn, tp]], dtype=int)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def classification_metrics(tn: int, fp: int, fn: int, tp: int, confidence: float = 0.95) -> dict:
    """Accuracy, precision, recall (= sensitivity), specificity, balanced accuracy, F1, with Wilson intervals.

    Balanced accuracy is reported beside accuracy because an all-negative classifier on the paper's 12/5
    cohort already scores accuracy 0.706. Intervals cover accuracy (n = all patients), recall (n = positives)
    and specificity (n = negatives), the proportions whose denominators are fixed by the cohort.
    """
    tn, fp, fn, tp = (int(v) for v in (tn, fp, fn, tp))
    if min(tn, fp, fn, tp) < 0:
        raise ValueError("confusion counts must be non-negative")
    n = tn + fp + fn + tp
    recall = _ratio(tp, tp + fn)
    specificity = _ratio(tn, tn + fp)
    out = {
        "accuracy": _ratio(tp + tn, n),
        "precision": _ratio(tp, tp + fp),
        "recall": recall,
        "specificity": specificity,
        "balanced_accuracy": (recall + specificity) / 2.0,
        "f1": _ratio(2 * tp, 2 * tp + fp + fn),
    }
    for key, (k, m) in {
        "accuracy": (tp + tn, n),
        "recall": (tp, tp + fn),
        "specificity": (tn, tn + fp),
    }.items():
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = wilson_interval(k, m, confidence)
    out.update({"n": n, "tn": tn, "fp": fp, "fn": fn, "tp": tp})
    return out
