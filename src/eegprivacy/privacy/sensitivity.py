"""Sensitivity bounds, derived from the clipping norm so that no run can type in a number that does not follow.

Adjacency throughout is bounded replace-one at the patient level: neighbouring tables have the same patients
except that one patient's (scaled, L2-clipped) vector is replaced by another. Both bounds assume the scaling
statistics are fixed; they are not when they are fitted on the private table (see ``release``).
"""

from __future__ import annotations

import math


def _check_clip_norm(clip_norm: float) -> float:
    clip_norm = float(clip_norm)
    if not math.isfinite(clip_norm) or clip_norm <= 0:
        raise ValueError(f"clip_norm must be a positive finite number, got {clip_norm}")
    return clip_norm


def l2_sensitivity_replace_one(clip_norm: float) -> float:
    """Δ2 = 2C: the replaced row goes from one point of the C-ball to another, at most 2C apart in L2."""
    return 2.0 * _check_clip_norm(clip_norm)


def l1_sensitivity_replace_one(clip_norm: float, dim: int) -> float:
    """Δ1 = 2·sqrt(d)·C: Cauchy–Schwarz gives ‖v‖1 ≤ sqrt(d)·‖v‖2, applied to the replaced row's ≤ 2C change."""
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    return 2.0 * math.sqrt(int(dim)) * _check_clip_norm(clip_norm)
