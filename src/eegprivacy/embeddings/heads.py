"""The downstream head of study C and the balanced accuracy it is scored by.

Both the leakage endpoints (:mod:`eegprivacy.embeddings.endpoints.labels`: the subject- and window-label attacks)
and the defenses' utility (:mod:`eegprivacy.embeddings.defenses`) fit this head and score it this way, and the
defenses build on the endpoints' results. They live apart from both so that neither module has to import the other to
share them (a circle the import-order test refuses).
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

__all__ = ["default_head", "weighted_balanced_accuracy"]


def default_head():
    """The downstream head every utility and head-membership result uses: standardised logistic regression."""
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))


def weighted_balanced_accuracy(truth, pred, weights=None) -> float:
    """Balanced accuracy with per-window weights (a subject bootstrap's multiplicities); a missing class gives
    NaN."""
    truth, pred = np.asarray(truth), np.asarray(pred)
    w = np.ones(truth.size) if weights is None else np.asarray(weights, float)
    recalls = []
    for label in np.unique(truth):
        mask = truth == label
        total = w[mask].sum()
        if total <= 0:
            return float("nan")
        recalls.append(float((w[mask] * (pred[mask] == label)).sum() / total))
    return float(np.mean(recalls))
