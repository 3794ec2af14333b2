"""The subject (cluster) bootstrap every endpoint's interval uses, its resamples drawn by
:func:`eegprivacy.evaluation.cluster_bootstrap.subject_counts`: the percentile interval of the draws, a group
array's subject codes, and the columns of a joint resample's multiplicity matrix that one endpoint's subjects take.

The subject is the privacy unit, so every endpoint resamples subjects; AEDS (:mod:`.aeds`) resamples them once for
all its parts, which is why each result can rescore any multiplicities over a union of subject ids (``draws_for``).
"""

from __future__ import annotations

import numpy as np


def _percentile_ci(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = np.asarray(draws, float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return (float("nan"), float("nan"))
    a = 1.0 - confidence
    return tuple(float(q) for q in np.quantile(finite, [a / 2, 1 - a / 2]))


def _codes(groups, n: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(unique subjects, each row's index into them) of one group array, checked against ``n`` rows."""
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"{name} must name the subject of every row: {groups.shape} vs {n} rows")
    return np.unique(groups, return_inverse=True)


def _unit_keys(units) -> list:
    """Subject ids as plain Python values: ``0`` and ``"0"`` stay two subjects (no dtype coercion), while
    ``np.int64(3)`` and ``3`` are one."""
    return [u.item() if isinstance(u, np.generic) else u for u in np.asarray(units, dtype=object).ravel().tolist()]


def _union_units(*unit_arrays) -> np.ndarray:
    """The union of several parts' subject ids (an object array, sorted by type name then value), the columns
    of a joint subject bootstrap."""
    keys = dict.fromkeys(k for units in unit_arrays for k in _unit_keys(units))
    out = np.empty(len(keys), dtype=object)
    out[:] = sorted(keys, key=lambda k: (type(k).__name__, k))
    return out


def _unit_columns(units, own, name: str) -> np.ndarray:
    """Column of each of ``own``'s subjects in ``units`` (the columns of a multiplicity matrix)."""
    keys = _unit_keys(units)
    column = {k: i for i, k in enumerate(keys)}
    if len(column) != len(keys):
        raise ValueError("units must name each subject once")
    own = _unit_keys(own)
    missing = [k for k in own if k not in column]
    if missing:
        raise ValueError(f"{len(missing)} subject(s) of {name} are not in units (e.g. {missing[0]!r}): their "
                         "multiplicities are unknown")
    return np.array([column[k] for k in own], dtype=int)


def _unit_weights(units, counts, own, name: str) -> np.ndarray:
    """Multiplicities (B, len(own)) of ``own``'s subjects taken from ``counts`` (B, len(units))."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] != len(_unit_keys(units)):
        raise ValueError(f"counts must be (n_bootstrap, len(units)), got {counts.shape} for {len(units)} units")
    return counts[:, _unit_columns(units, own, name)].astype(float)
