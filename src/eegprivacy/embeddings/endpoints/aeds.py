"""AEDS = L_A - max(R_M, R_I), the one number that says whether attribute leakage is the deciding risk
(:func:`aeds`), with a subject-bootstrap interval that resamples the subjects once per draw and recomputes every
part on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from eegprivacy.embeddings.endpoints.attribute import LeakageResult
from eegprivacy.embeddings.endpoints.identity import BPIDResult, identity_residual
from eegprivacy.embeddings.endpoints.membership import MembershipResult, membership_residual
from eegprivacy.embeddings.endpoints.resampling import _percentile_ci, _union_units
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = ["AEDSResult", "aeds"]


@dataclass
class AEDSResult:
    """AEDS = L_A - max(R_M, R_I) with its bootstrap interval and draws (``ci_over``: what the parts resampled).

    ``joint``: True when every draw resampled the subjects once and recomputed every part on that resample (NaN
    draws, where a resample left a part undefined, are kept in ``draws`` and dropped from ``ci``); False when the
    parts' own, separately drawn, bootstrap draws were combined as if independent.
    """

    value: float
    ci: tuple[float, float]
    draws: np.ndarray = field(repr=False)
    ci_over: str = "subjects"
    joint: bool = False


def _value_and_draws(part, name: str, residual: bool) -> tuple[float, np.ndarray | None, str | None]:
    """Point value, bootstrap draws and ``ci_over`` of one AEDS part (a float, a pair, or a result object)."""
    if isinstance(part, LeakageResult):
        return part.gain, part.draws, part.ci_over
    if isinstance(part, MembershipResult):
        return part.residual, membership_residual(part.draws), part.ci_over
    if isinstance(part, BPIDResult):
        if part.draws is None:
            raise ValueError("the BPID@1 result carries no subject-bootstrap draws")
        return part.residual, identity_residual(part.draws, part.n_candidates), part.ci_over
    if isinstance(part, tuple) and len(part) == 2:
        return float(part[0]), np.asarray(part[1], float), None
    value = float(part)
    if residual and value < 0:
        raise ValueError(f"{name} is a residual and cannot be negative, got {value}")
    return value, None, None


def _resampled_units(part) -> np.ndarray | None:
    """The subject ids whose multiplicities a result object's ``draws_for`` reads; None for a float or a
    ``(value, draws)`` pair, a window-level membership fallback, or a result without per-subject data."""
    if isinstance(part, LeakageResult):
        return None if part.moments is None else part.subjects
    if isinstance(part, MembershipResult):
        if part.ci_over != "subjects" or part.pair_counts is None or part.units_members is None:
            return None
        return part.units_members if part.joint else _union_units(part.units_members, part.units_nonmembers)
    if isinstance(part, BPIDResult):
        return part.query_units
    return None


def _joint_draws(part, value: float, units: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One AEDS part (L_A, R_M or R_I) recomputed on every subject resample ``counts`` over ``units``."""
    if isinstance(part, LeakageResult):
        return part.draws_for(units, counts)
    if isinstance(part, MembershipResult):
        return membership_residual(part.draws_for(units, counts))
    if isinstance(part, BPIDResult):
        return identity_residual(part.draws_for(units, counts), part.n_candidates)
    return np.full(counts.shape[0], value)  # a constant part


def aeds(leakage, membership=0.0, identity=0.0, n_bootstrap: int = 1000, confidence: float = 0.95,
         random_state=0) -> AEDSResult:
    """AEDS = L_A - max(R_M, R_I) with a subject-bootstrap CI: the subjects are resampled once per draw.

    Each part is a float, a ``(value, draws)`` pair, or the result object of its endpoint
    (``LeakageResult``, ``MembershipResult``, ``BPIDResult``). The point value is always the parts' point values
    combined.

    Joint resampling (``joint=True``): when every part with draws is a result object that can rescore a subject
    resample (``draws_for``), one multiplicity matrix (:func:`subject_counts`) is drawn over the union of the
    parts' subject ids -- L_A's test subjects, the membership attack's member and non-member subjects (for the
    encoder attack the pretraining subjects, which need not be audited ones; ids are matched as values, so
    ``0`` and ``"0"`` are different subjects) and BPID@1's query subjects -- and every part is recomputed on
    each resample and combined into that draw. The parts resample the same audited subjects, so their errors
    are correlated and only this keeps the correlation. A subject absent from a part does not move it; the head
    attack's members and non-members, stratified in :func:`membership_auc`, are resampled as part of the one
    draw, so a resample without a member or without a non-member subject (or without any test or query subject
    of another part) is NaN and dropped from the percentile interval. Float parts enter as constants.

    Otherwise (a ``(value, draws)`` pair, a window-level membership fallback, or results from older code)
    **(ours)** the parts' own bootstrap draws are combined as if independent: draw i of each part (finite draws,
    resampled to ``n_bootstrap`` where their number differs) into AEDS draw i; a part without draws is a
    constant. The result is ``ci_over="subjects"`` (``"windows"`` if any part fell back to a window bootstrap).
    Use ``identity=0`` where the split has no candidates (subject-disjoint), as the protocol says.
    """
    rng = check_random_state(random_state)
    given = ((leakage, "L_A", False), (membership, "R_M", True), (identity, "R_I", True))
    units = [_resampled_units(part) for part, _, _ in given]
    resampled = [isinstance(part, (LeakageResult, MembershipResult, BPIDResult)) or isinstance(part, tuple)
                 for part, _, _ in given]
    if any(resampled) and all(u is not None for u, r in zip(units, resampled) if r):
        values = [_value_and_draws(part, name, residual)[0] for part, name, residual in given]
        union = _union_units(*(u for u in units if u is not None))
        counts = subject_counts(union.size, n_bootstrap, rng)
        la_d, rm_d, ri_d = (_joint_draws(part, v, union, counts) for (part, _, _), v in zip(given, values))
        draws = la_d - np.maximum(rm_d, ri_d)
        return AEDSResult(value=float(values[0] - max(values[1], values[2])), ci=_percentile_ci(draws, confidence),
                          draws=draws, ci_over="subjects", joint=True)
    parts, over = [], set()
    for part, name, residual in given:
        value, draws, ci_over = _value_and_draws(part, name, residual)
        if ci_over is not None:
            over.add(ci_over)
        if draws is not None:
            draws = draws[np.isfinite(draws)]
            if draws.size != n_bootstrap:
                draws = draws[rng.randint(0, draws.size, int(n_bootstrap))] if draws.size else None
        parts.append((value, draws))
    (la, la_d), (rm, rm_d), (ri, ri_d) = parts
    value = la - max(rm, ri)

    def _d(v, d):
        return np.full(int(n_bootstrap), v) if d is None else d

    draws = _d(la, la_d) - np.maximum(_d(rm, rm_d), _d(ri, ri_d))
    return AEDSResult(value=float(value), ci=_percentile_ci(draws, confidence), draws=draws,
                      ci_over="windows" if "windows" in over else "subjects")
