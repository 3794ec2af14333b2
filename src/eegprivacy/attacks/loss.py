"""The loss-threshold membership attack (Yeom et al. 2018, "Privacy Risk in Machine Learning"): a trial the model
fits well (low loss) is called a member. It reads no reference model, so it is the floor every reference attack
must beat; given the logit confidence φ of the true label, φ is monotone in −loss, so φ itself is the score.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

__all__ = ["LossThreshold"]


class LossThreshold(BaseEstimator):
    """Scores a trial by its logit confidence φ = log p_y − log(1 − p_y) (monotone in −loss); ``fit`` reads
    nothing (no reference models) and exists so that the attack fits the reference attacks' contract."""

    def fit(self, phi_reference=None, in_mask=None):
        self.fitted_ = True
        return self

    def score_samples(self, phi_target) -> np.ndarray:
        phi = np.asarray(phi_target, dtype=np.float64).ravel()
        if not np.isfinite(phi).all():
            raise ValueError("phi_target must be finite")
        return phi

    def decision_function(self, phi_target) -> np.ndarray:
        return self.score_samples(phi_target)
