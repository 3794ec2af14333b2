"""Privacy accounting for pipelines that spend budget in more than one step (e.g. DP scaling, then the release).

Only the basic sequential composition theorem lives here: mechanisms run one after another on the same patients,
each (εᵢ, δᵢ)-DP, possibly chosen adaptively from earlier outputs, give (Σεᵢ, Σδᵢ)-DP overall (Dwork & Roth 2014,
Thm 3.16). It is loose for many steps; tighter accountants (RDP, PLD from ``dp_accounting``) can replace it where a
pipeline has enough steps to gain from them — for two steps the gain is small and the basic bound is easy to audit.
"""

from __future__ import annotations

import math


def _check_budget(epsilon, delta) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number ≥ 0, got {epsilon}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta}")
    return epsilon, delta


def basic_composition(*budgets) -> tuple[float, float]:
    """(ε, δ) of running every ``(εᵢ, δᵢ)`` mechanism in sequence on the same data: (Σεᵢ, Σδᵢ).

    A bare number counts as a pure ε-DP step (δ = 0). At least one budget is needed: no steps is no release.
    """
    if not budgets:
        raise ValueError("basic_composition needs at least one (epsilon, delta) budget")
    total_epsilon = total_delta = 0.0
    for budget in budgets:
        epsilon, delta = (budget, 0.0) if isinstance(budget, (int, float)) else budget
        epsilon, delta = _check_budget(epsilon, delta)
        total_epsilon += epsilon
        total_delta += delta
    if total_delta >= 1.0:
        raise ValueError(f"composed delta {total_delta} ≥ 1 carries no guarantee")
    return total_epsilon, total_delta


def split_budget(total_epsilon: float, scaling_fraction: float) -> tuple[float, float]:
    """Total ε → (ε for the scaling statistics, ε for the release), so that they compose back to the total.

    ``scaling_fraction`` must lie strictly in (0, 1): at 0 the scaling would have no budget (use public statistics
    instead), at 1 the release would have none.
    """
    total_epsilon, _ = _check_budget(total_epsilon, 0.0)
    if total_epsilon <= 0:
        raise ValueError("total_epsilon must be > 0")
    scaling_fraction = float(scaling_fraction)
    if not 0.0 < scaling_fraction < 1.0:
        raise ValueError(f"scaling_fraction must lie strictly between 0 and 1, got {scaling_fraction}")
    scaling_epsilon = total_epsilon * scaling_fraction
    return scaling_epsilon, total_epsilon - scaling_epsilon
