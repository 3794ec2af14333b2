"""The one-run privacy audit (Steinke, Nasr and Jagielski 2023, "Privacy Auditing with One (1) Training Run"):
a lower bound on ε from a single training run with m canaries, each included independently with probability ½.

Why one run: the many-runs audit (:mod:`eegprivacy.attacks.mechanism_audit`) needs thousands of trainings; here
the m canaries play the role of the trainings. An attacker guesses "in" or "out" for r of them (abstaining on the
others) and gets v right. Under (ε, δ)-DP the number of correct guesses is stochastically dominated by
Binomial(r, e^ε / (1 + e^ε)) up to a δ term (the paper's Theorem 5.2), so a v that this distribution makes unlikely
at level β refutes ε. :func:`p_value` is that tail bound, :func:`epsilon_lower_bound` the largest ε it refutes
at confidence 1 − β, :func:`guesses` turns membership scores into the r guesses (the k⁺ highest "in", the k⁻
lowest "out", fixed before the scores are seen, so choosing them spends no confidence).

Like every audit, the bound can only refute a claim: it is ≤ the true ε with the stated confidence, and m canaries
cap it (:func:`max_certifiable_epsilon`: all r = m guesses right).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

__all__ = ["epsilon_lower_bound", "guesses", "max_certifiable_epsilon", "p_value"]


def _check(m: int, r: int, v: int, delta: float) -> None:
    if not (0 <= int(v) <= int(r) <= int(m)) or int(m) < 1:
        raise ValueError(f"need 0 <= v <= r <= m and m >= 1, got m={m}, r={r}, v={v}")
    if not 0.0 <= float(delta) <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta!r}")


def p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P[v or more of r guesses right] under (ε, δ)-DP with m canaries (Theorem 5.2 of Steinke et al.):
    P[Binomial(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Binomial(r, q) < v] / i, q = e^ε / (1 + e^ε); capped at 1."""
    _check(m, r, v, delta)
    if not float(epsilon) >= 0.0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    m, r, v = int(m), int(r), int(v)
    q = 1.0 / (1.0 + math.exp(-float(epsilon)))
    tail = float(binom.sf(v - 1, r, q))
    if delta == 0.0 or v == 0:
        return min(tail, 1.0)
    below = np.cumsum(binom.pmf(v - np.arange(1, v + 1), r, q))  # P[v − i ≤ B < v], i = 1..v
    alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * float(delta) * alpha, 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95,
                        tol: float = 1e-6) -> float:
    """The largest ε that v right of r guesses refute at ``confidence`` (p_value(ε) < 1 − confidence), by
    bisection; 0 when even ε = 0 is not refuted."""
    _check(m, r, v, delta)
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    level = 1.0 - float(confidence)
    if p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(m, r, v, high, delta) < level:
        low, high = high, 2.0 * high
        if high > 1e3:
            raise ValueError("the bound does not converge below ε = 1000")
    while high - low > tol:
        mid = 0.5 * (low + high)
        low, high = (mid, high) if p_value(m, r, v, mid, delta) < level else (low, mid)
    return low


def max_certifiable_epsilon(m: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    """The most m canaries can certify: every one of r = m guesses right."""
    return epsilon_lower_bound(m, m, m, delta, confidence)


def guesses(scores, included, k_in: int, k_out: int) -> tuple[int, int]:
    """(r, v): guess "in" for the ``k_in`` highest scores and "out" for the ``k_out`` lowest (ties broken by
    position, fixed before scoring), abstain on the rest; v counts the right guesses against ``included``."""
    scores = np.asarray(scores, dtype=float).ravel()
    included = np.asarray(included).astype(bool).ravel()
    if scores.shape != included.shape or not np.isfinite(scores).all():
        raise ValueError("scores must be finite, one per canary, like included")
    k_in, k_out = int(k_in), int(k_out)
    if k_in < 0 or k_out < 0 or k_in + k_out > scores.size:
        raise ValueError(f"k_in + k_out must lie in 0..{scores.size} (one guess per canary at most)")
    order = np.argsort(scores, kind="stable")
    right = int(included[order[scores.size - k_in:]].sum()) if k_in else 0
    right += int((~included[order[:k_out]]).sum())
    return k_in + k_out, right
