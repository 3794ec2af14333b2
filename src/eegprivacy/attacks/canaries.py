"""Canaries for the one-run audit (:mod:`eegprivacy.attacks.one_run_audit`): records planted in a training set,
each included independently with probability ½, whose inclusion an attacker then guesses.

The audit's power is the canaries' strength: a canary the model barely notices gives a bound near 0 however
leaky the mechanism is. :func:`outlier_canaries` draws *out-of-distribution* records in the model's input space:
each sits on a sphere of radius ``radius`` (in units of the data's per-feature standard deviation, times
sqrt(d)) around the data's mean, in a direction of its own, with a label of its own drawn at random. Far from the
data and from one another, a canary is fitted only if the model memorises it, which is what membership asks.
They are synthetic records, not EEG trials; where they are planted after a preprocessing step, that step never
sees them, so the audit measures the training mechanism alone (the step a training certificate covers).

The inclusion coins and the owners are drawn from ``random_state`` before any training, as the audit requires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Canaries", "outlier_canaries"]


@dataclass(frozen=True)
class Canaries:
    """``m`` canaries: inputs ``X`` (m, d), labels ``y``, the inclusion coins ``included`` (bool) and the group
    (e.g. the federated client) each one is planted in, ``owner``."""

    X: np.ndarray
    y: np.ndarray
    included: np.ndarray
    owner: np.ndarray

    def __post_init__(self):
        m = len(self.X)
        if not (len(self.y) == len(self.included) == len(self.owner) == m) or m < 2:
            raise ValueError("canaries need at least two rows, and one label, coin and owner per row")

    @property
    def m(self) -> int:
        return len(self.X)

    def planted(self, group: int) -> tuple[np.ndarray, np.ndarray]:
        """The included canaries of ``group``: what its training set receives."""
        keep = (self.owner == group) & self.included
        return self.X[keep], self.y[keep]


def outlier_canaries(X, classes, per_group: int, n_groups: int, radius: float, random_state: int) -> Canaries:
    """``per_group`` canaries for each of ``n_groups`` groups, placed around the rows ``X`` (n, d) as the module
    says, labels uniform over ``classes``, each included with probability ½."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or len(X) < 2:
        raise ValueError("X must be 2-D with at least two rows (the data the canaries stand apart from)")
    if int(per_group) < 1 or int(n_groups) < 1 or not (math.isfinite(radius) and radius > 0):
        raise ValueError("per_group and n_groups must be >= 1 and radius a positive finite number")
    rng = np.random.default_rng(random_state)
    m, d = int(per_group) * int(n_groups), X.shape[1]
    scale = np.maximum(X.std(axis=0), 1e-12)
    direction = rng.standard_normal((m, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    points = X.mean(axis=0) + float(radius) * math.sqrt(d) * scale * direction
    labels = np.asarray(classes)[rng.integers(0, len(classes), m)]
    included = rng.random(m) < 0.5
    owner = np.repeat(np.arange(int(n_groups)), int(per_group))
    return Canaries(points.astype(X.dtype), labels, included, owner)
