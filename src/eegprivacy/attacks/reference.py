"""The membership attacks that read reference (shadow) models, as one registry (:data:`REFERENCE_ATTACKS`): the
``federated_lira`` stage runs every entry, its tests count the entries and its reports label rows from them. A new
attack of this kind is one estimator and one entry here.

Every entry reads the same two things: the logit confidence φ of each trial's true label under each reference model
(with a mask of which references trained on which trial) and under the attacked model. An entry states how its
estimator is built, what it reads of φ (LiRA φ itself, RMIA the probability p_y = sigmoid(φ), exact because
φ = log p_y − log(1 − p_y)), whether it reads OUT references only (offline), how many references it needs at the
least, and whether it compares a trial with population points (RMIA's z: the target's non-members of other
subjects, passed as ``population`` and ``groups``).

k reference models (:func:`select_references`): online, each trial's first ⌊k/2⌋ IN and ⌈k/2⌉ OUT references;
offline, each trial's own first k OUT references, so that k counts models the attack can use for that trial.
``k = None`` means all, as drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from eegprivacy.attacks.lira import LiRA
from eegprivacy.attacks.loss import LossThreshold
from eegprivacy.attacks.rmia import RMIA

__all__ = ["REFERENCE_ATTACKS", "ReferenceAttack", "feasible", "fit_attack", "score_attack", "select_references"]


def _phi(phi: np.ndarray) -> np.ndarray:
    return phi


def _proba(phi: np.ndarray) -> np.ndarray:
    """p_y = sigmoid(φ), floored at the smallest positive float so that RMIA's logs stay finite."""
    return np.maximum(expit(phi), np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class ReferenceAttack:
    """One registry entry: ``name`` in rows, ``text`` in reports. ``make(options)`` returns the unfitted estimator
    (``options``: the stage's attack knobs, e.g. ``lira_variance``); its ``fit(signal_reference, in_mask)`` and
    ``score_samples(signal_target[, population, groups])`` read ``signal(φ)``."""

    name: str
    text: str
    make: Callable[[Mapping], object]
    signal: Callable[[np.ndarray], np.ndarray] = field(default=_phi)
    offline: bool = False
    min_references: int = 1
    population: bool = False


REFERENCE_ATTACKS: dict[str, ReferenceAttack] = {a.name: a for a in (
    ReferenceAttack("loss", "loss threshold", lambda o: LossThreshold(), min_references=0),
    ReferenceAttack("lira_online", "LiRA online",
                    lambda o: LiRA("online", o.get("lira_variance", "global")), min_references=4),
    ReferenceAttack("lira_offline", "LiRA offline",
                    lambda o: LiRA("offline", o.get("lira_variance", "global")), offline=True, min_references=2),
    ReferenceAttack("rmia_online", "RMIA online",
                    lambda o: RMIA("online"), signal=_proba, min_references=2, population=True),
    ReferenceAttack("rmia_offline", "RMIA offline",
                    lambda o: RMIA("offline", offline_a=1.0), signal=_proba, offline=True, population=True),
)}


def _per_trial(phi: np.ndarray, take: np.ndarray, count: int) -> np.ndarray:
    """(count, n_trials): each trial's φ under the first ``count`` references that ``take`` marks for it."""
    order = np.argsort(~take, axis=0, kind="stable")[:count]  # marked references first, in reference order
    return np.take_along_axis(phi, order, axis=0)


def feasible(in_mask, k: int | None, offline: bool) -> bool:
    """Whether every trial has the references :func:`select_references` takes at k."""
    mask = np.asarray(in_mask).astype(bool)
    if k is None:
        return True
    n_in, n_out = int(mask.sum(0).min()), int((~mask).sum(0).min())
    k = int(k)
    return k <= n_out if offline else (k // 2 <= n_in and k - k // 2 <= n_out)


def select_references(phi_reference, in_mask, k: int | None, offline: bool) -> tuple[np.ndarray, np.ndarray]:
    """The φ and in-mask an attack reads at k references per trial, as (k, n_trials) arrays.

    Online: each trial's first ⌊k/2⌋ IN and first ⌈k/2⌉ OUT references (in reference order), so that, as in the
    papers' online setting, half the references trained on the trial whatever share of them did overall (a balanced
    shadow design groups its shadows in blocks, so "the first k shadows" can hold no OUT model for a trial). Offline:
    each trial's first k OUT references. ``k = None``: every reference as drawn. Raises where a trial has fewer
    (:func:`feasible`). Rows of the result are slots, not models: the estimators read each trial's column alone
    (LiRA pools its variance over trials, which any slot order keeps)."""
    phi = np.asarray(phi_reference, dtype=np.float64)
    mask = np.asarray(in_mask).astype(bool)
    if k is None:
        return phi, mask
    if int(k) < 1:
        raise ValueError(f"k must be a whole number ≥ 1 or None (all), got {k!r}")
    if not feasible(mask, k, offline):
        raise ValueError(f"a trial has too few {'OUT' if offline else 'IN or OUT'} references for k = {k}")
    k = int(k)
    if offline:
        return _per_trial(phi, ~mask, k), np.zeros((k, mask.shape[1]), dtype=bool)
    n_in = k // 2
    parts = [_per_trial(phi, mask, n_in), _per_trial(phi, ~mask, k - n_in)]
    flags = np.r_[np.ones(n_in, dtype=bool), np.zeros(k - n_in, dtype=bool)]
    return np.vstack(parts), np.repeat(flags[:, None], mask.shape[1], axis=1)


def fit_attack(name: str, phi_reference, in_mask, k: int | None = None, options: Mapping | None = None):
    """The registry's attack ``name`` fitted on k reference models (:func:`select_references`)."""
    if name not in REFERENCE_ATTACKS:
        raise ValueError(f"unknown reference attack {name!r}; use one of {tuple(REFERENCE_ATTACKS)}")
    entry = REFERENCE_ATTACKS[name]
    phi, mask = select_references(phi_reference, in_mask, k, entry.offline)
    return entry.make(options or {}).fit(entry.signal(phi), mask)


def score_attack(name: str, fitted, phi_target, population=None, groups=None) -> np.ndarray:
    """Membership scores of ``fitted`` (from :func:`fit_attack`) on the attacked model's φ; ``population`` and
    ``groups`` reach only the attacks that compare with population points."""
    entry = REFERENCE_ATTACKS[name]
    signal = entry.signal(np.asarray(phi_target, dtype=np.float64))
    if entry.population:
        return fitted.score_samples(signal, population, groups)
    return fitted.score_samples(signal)
