"""Study B, sound GLA: its untrained-model control and its pooled, powered test.

Why: the sound GLA (:class:`~eegprivacy.attacks.membership.GradientLevelAttack`) asks whether a client update was
computed on member or on non-member trials of the same global model. Two things kept a per-round result from
meaning much:

- **No control.** Each client's CSP and scaling are fitted on its members, so member and non-member batches can
  differ before any training; an attack on updates of the *untrained* initial global model computed on the same
  batches with the same local seeds (``gla_sound_control``) measures that pipeline alone, and the trained-model
  score is read against it.
- **No power.** One round samples a few clients, so its attacker-test half holds ~4 member and ~4 non-member
  updates: even a perfect-looking AUROC is noise. ``gla_sound_pooled`` (and ``gla_sound_pooled_control``) pool
  the member and non-member updates of every attacked round of one seed into one test, still split by client (an
  update's client pool carries a fingerprint, so one client's updates stay on one side), and each pooled row comes
  with ``min_detectable_auroc``: the smallest true AUROC a one-sided test at ``ALPHA`` detects with probability
  ``POWER`` at that test size (normal approximation with the null variance of the Mann–Whitney AUROC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from eegprivacy.attacks.membership import GradientLevelAttack

ALPHA = 0.05  # one-sided: the tables ask "above chance?"
POWER = 0.8
ATTACK = "gla_sound"
CONTROL = "gla_sound_control"
POOLED = "gla_sound_pooled"
POOLED_CONTROL = "gla_sound_pooled_control"
N_ROUNDS = "gla_sound_pooled_n_rounds"


@dataclass(frozen=True)
class SoundRound:
    """One attacked round's sound-GLA updates: (n_clients, d) member and non-member updates of the trained global
    model, and the same of the untrained initial model on the same batches with the same local seeds (``None``
    when no control was computed); ``clients`` are the sampled clients' indices, in row order."""

    rnd: int
    clients: np.ndarray
    member: np.ndarray
    nonmember: np.ndarray
    control_member: np.ndarray | None = None
    control_nonmember: np.ndarray | None = None

    def __post_init__(self):
        n = len(np.asarray(self.clients))
        for name in ("member", "nonmember", "control_member", "control_nonmember"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} updates for {n} clients (one per sampled client)")


def min_detectable_auroc(n_members: int, n_nonmembers: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true AUROC a one-sided level-``alpha`` test of AUROC = 0.5 detects with probability ``power``
    on ``n_members`` vs ``n_nonmembers`` scored rows: 0.5 + (z_{1−α} + z_{power}) · SE₀, SE₀² = (m + n + 1) /
    (12 m n) (Mann–Whitney null variance; the variance under the alternative is smaller, so this errs on the
    conservative side). Above 1 means no effect is detectable at that size; NaN without rows on both sides."""
    m, n = int(n_members), int(n_nonmembers)
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    if m < 1 or n < 1:
        return float("nan")
    se = math.sqrt((m + n + 1) / (12.0 * m * n))
    return float(0.5 + (norm.ppf(1.0 - alpha) + norm.ppf(power)) * se)


def pooled_data(rounds: list[SoundRound], control: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, groups) of every round's member (y = 1) and non-member (y = 0) updates, grouped by client."""
    if not rounds:
        raise ValueError("no attacked round to pool")
    members = [r.control_member if control else r.member for r in rounds]
    nonmembers = [r.control_nonmember if control else r.nonmember for r in rounds]
    if any(u is None for u in members + nonmembers):
        raise ValueError("a round has no control updates: compute them (sound_updates with initial weights)")
    X = np.concatenate([np.asarray(u, dtype=float).reshape(len(u), -1) for u in members + nonmembers])
    clients = np.concatenate([np.asarray(r.clients).ravel() for r in rounds])
    y = np.concatenate([np.ones(clients.size, dtype=int), np.zeros(clients.size, dtype=int)])
    return X, y, np.concatenate([clients, clients])


def power_rows(scores: dict, attack: str, attacker: str) -> list[dict]:
    """The pooled test's power: ``min_detectable_auroc`` at its attacker-test counts, beside the AUROC's chance
    (0.5, what the detectable AUROC is measured from)."""
    mda = min_detectable_auroc(int(scores.get("n_members", 0)), int(scores.get("n_nonmembers", 0)))
    return [{"metric": "min_detectable_auroc", "value": mda, "chance": 0.5, "attack": attack, "attacker": attacker,
             "round": float("nan"), "n": scores.get("n_test")}]


def rounds_row(rounds: list[SoundRound]) -> dict:
    """How many attacked rounds the pooled test pooled (one row per cell, not an attack score)."""
    return {"metric": N_ROUNDS, "value": float(len(rounds)), "round": float("nan"),
            "n": float(sum(len(r.clients) for r in rounds))}


def pooled_scores(rounds: list[SoundRound], kw: dict, test_size: float, control: bool = False) -> dict:
    """The sound GLA on every attacked round's updates at once, split by client (``kw``: the attacker's keyword
    arguments); ``score_attack``'s dict, or ``{}`` when fewer than two clients took part (no client split)."""
    X, y, groups = pooled_data(rounds, control)
    if np.unique(groups).size < 2:
        return {}
    attack = GradientLevelAttack(**kw)
    return attack.evaluate(X, y, test_size=test_size, groups=groups)
