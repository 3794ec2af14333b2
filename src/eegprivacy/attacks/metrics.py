"""Attack metrics shared by every attack in the project: AUROC, TPR at a fixed low FPR, the ROC curve.

Membership and re-identification attacks are judged at low false-positive rates (Carlini et al. 2022): an
attack that is right about a few members with near certainty matters more than a small AUROC gain.
``tpr_at_fpr`` is conservative: the best TPR among operating points whose FPR does not exceed the target, no
interpolation. With fewer than 1/fpr negatives the target cannot be resolved and the value is NaN.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = ["auroc", "roc", "tpr_at_fpr", "attack_summary", "ovr_macro_auroc", "DEFAULT_FPRS"]

DEFAULT_FPRS = (0.01, 0.001)


def _check(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true).ravel().astype(int)
    s = np.asarray(scores, dtype=float).ravel()
    if y.shape != s.shape:
        raise ValueError(f"y_true and scores differ in length: {y.size} vs {s.size}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("y_true must hold 0 (non-member) and 1 (member) only")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    return y, s


def auroc(y_true, scores) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    y, s = _check(y_true, scores)
    if np.unique(y).size < 2:
        return float("nan")
    return float(roc_auc_score(y, s))


def roc(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of the full ROC curve, for plots."""
    y, s = _check(y_true, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr


def tpr_at_fpr(y_true, scores, fpr: float) -> float:
    """Highest TPR at an operating point with FPR <= ``fpr``; NaN if there are fewer than 1/fpr negatives."""
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr}")
    y, s = _check(y_true, scores)
    negatives = int((y == 0).sum())
    if negatives < np.ceil(1.0 / fpr) or (y == 1).sum() == 0:
        return float("nan")
    fprs, tprs, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tprs[fprs <= fpr + 1e-12].max())


def attack_summary(y_true, scores, fprs=DEFAULT_FPRS) -> dict[str, float]:
    """``auroc`` and ``tpr_at_fpr_<fpr>`` for each target FPR, plus the counts they rest on."""
    y, s = _check(y_true, scores)
    out = {"auroc": auroc(y, s), "n_members": float((y == 1).sum()), "n_nonmembers": float((y == 0).sum())}
    for f in fprs:
        out[f"tpr_at_fpr_{f:g}"] = tpr_at_fpr(y, s, f)
    return out


def ovr_macro_auroc(y_true, proba, classes) -> float:
    """Macro one-vs-rest AUROC for a multi-class attack (e.g. which client sent an update); chance is 0.5.

    ``proba[:, k]`` scores ``classes[k]``. Each class present in ``y_true`` is scored against all others and the
    AUROCs are averaged unweighted, so small clients count as much as large ones. A class absent from ``y_true``
    has no AUROC and is left out; NaN when no class can be scored.
    """
    y = np.asarray(y_true).ravel()
    p = np.asarray(proba, dtype=float)
    classes = np.asarray(classes).ravel()
    if p.ndim != 2 or p.shape != (y.size, classes.size):
        raise ValueError(f"proba must be (n_samples, n_classes) = ({y.size}, {classes.size}), got {p.shape}")
    per_class = [auroc(y == c, p[:, k]) for k, c in enumerate(classes) if (y == c).any()]
    finite = [a for a in per_class if np.isfinite(a)]
    return float(np.mean(finite)) if finite else float("nan")
