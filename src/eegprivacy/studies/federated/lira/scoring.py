"""What a membership score may report: the rule that a TPR at FPR f is a number only where at least
:data:`~eegprivacy.studies.federated.lira.config.MIN_BEYOND` independent non-members lie beyond its threshold
(:func:`resolvable`, :func:`resolvable_fpr`, the notes an unresolvable cell reads), the TPR at a threshold set on
the non-members, and one model's rows (:func:`score_rows`).
"""

from __future__ import annotations

import numpy as np

from eegprivacy.attacks.metrics import auroc
from eegprivacy.studies.federated.lira.config import FPRS, METRICS, MIN_BEYOND


def independent_nonmembers(members) -> int:
    """Distinct trials that were a non-member of at least one target model, each counted once: (n_models,
    n_trials) member masks in. S targets scoring the same held-out trial give S correlated scores, not S
    independent non-members, so this, not the pooled count, is what a false-positive rate rests on."""
    members = np.asarray(members).astype(bool)
    if members.ndim != 2:
        raise ValueError(f"members must be (n_models, n_trials), got shape {members.shape}")
    return int((~members).any(axis=0).sum())


def resolvable(fpr: float, n_independent: int, beyond: int = MIN_BEYOND) -> bool:
    """Whether a TPR at ``fpr`` can be reported: at least ``beyond`` independent non-members lie beyond its
    threshold, fpr · n_independent ≥ beyond (10 by default). A threshold set by fewer rests on a handful of
    correlated scores, and no interval we have holds there (the percentile bootstrap put the TPR at 0.2 % FPR,
    3 non-members beyond, at the bottom of its own interval)."""
    return float(fpr) * int(n_independent) >= int(beyond) - 1e-9


def needed_nonmembers(fpr: float, beyond: int = MIN_BEYOND) -> int:
    """Independent non-members a TPR at ``fpr`` needs: ⌈beyond / fpr⌉."""
    return int(np.ceil(int(beyond) / float(fpr) - 1e-9))


def resolvable_fpr(fpr: float, n_independent: int, beyond: int = MIN_BEYOND) -> float:
    """``fpr`` if ``n_independent`` non-members resolve it (:func:`resolvable`: fpr · n ≥ ``beyond``), else the
    smallest FPR on the 1-2-5 grid (…, 0.001, 0.002, 0.005, 0.01, …) that they do; NaN when none below 1 does
    (fewer than 2 · ``beyond`` independent non-members: even 50 % FPR is out of reach)."""
    if not 0.0 < float(fpr) < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr!r}")
    n = int(n_independent)
    if n < 1:
        raise ValueError("no independent non-member: no false-positive rate can be resolved")
    if resolvable(fpr, n, beyond):
        return float(fpr)
    floor = int(beyond) / n
    exponent = int(np.floor(np.log10(floor)))
    for scale in (exponent, exponent + 1):
        for step in (1.0, 2.0, 5.0):
            candidate = float(f"{step * 10.0 ** scale:.12g}")
            if resolvable(candidate, n, beyond):
                return candidate if candidate < 1.0 else float("nan")
    return float("nan")


def not_resolvable_note(fpr: float, n_independent: int, beyond: int = MIN_BEYOND, what: str = "") -> str:
    """The text an unresolvable TPR is reported as: what it needs, what it has, and the FPR the pool supports."""
    supported = resolvable_fpr(fpr, n_independent, beyond) if int(n_independent) >= 1 else float("nan")
    where = (f"; supports {100 * supported:g} % FPR" if np.isfinite(supported)
             else f"; no FPR below 1 (needs ≥ {2 * int(beyond)})")
    return (f"not resolvable: needs ≥ {needed_nonmembers(fpr, beyond):,} independent non-members{what}, has "
            f"{int(n_independent):,}{where}")


ZERO_FPR_NOTE = (f"not resolvable: a threshold above every non-member has no non-member beyond it, and a TPR "
                 f"needs ≥ {MIN_BEYOND} beyond its threshold")


def zero_fpr_tpr(member, scores) -> float:
    """Share of members scored strictly above every non-member (ties count against the attacker). Never reported
    as a number: its threshold has no non-member beyond it, so it fails the ≥ 10-beyond rule by construction
    (:data:`ZERO_FPR_NOTE`); it is a diagnostic only."""
    member = np.asarray(member).astype(bool)
    return float((scores[member] > scores[~member].max()).mean())


def tpr_at_threshold(member, scores, fpr: float) -> float:
    """TPR at the threshold of FPR ``fpr`` set on these non-members: the share of members scored strictly above
    the (⌊fpr·n⌋ + 1)-th highest of the n non-member scores (ties count against the attacker) — the highest TPR
    at an operating point with FPR ≤ ``fpr``, as :func:`~eegprivacy.attacks.metrics.tpr_at_fpr` computes it, in
    one partial sort and without its 1/fpr floor (the caller applies :func:`resolvable`)."""
    member = np.asarray(member).astype(bool).ravel()
    scores = np.asarray(scores, dtype=float).ravel()
    negatives, positives = scores[~member], scores[member]
    if negatives.size == 0 or positives.size == 0:
        return float("nan")
    allowed = int(np.floor(float(fpr) * negatives.size + 1e-9))
    if allowed >= negatives.size:
        return 1.0
    cut = negatives.size - allowed - 1
    return float((positives > np.partition(negatives, cut)[cut]).mean())


def chance_of(metric: str) -> float:
    """What a blind attacker scores: AUROC 0.5, TPR at x FPR = x, TPR at zero false positives 0."""
    return 0.5 if metric == "auroc" else 0.0 if metric == "tpr_at_zero_fpr" else float(metric.rsplit("_", 1)[1])


def score_rows(member, scores: dict, **extra) -> list[dict]:
    """One model's rows: AUROC, and the TPR at each of :data:`FPRS` where this model's own non-members (distinct
    trials) resolve it (:func:`resolvable`), NaN where they do not — one target's 144 non-members resolve
    neither 1 % (1.4 beyond) nor 0.1 %."""
    member = np.asarray(member).astype(bool).ravel()
    n_nonmembers = int((~member).sum())
    rows = []
    for (attack, attacker), s in scores.items():
        summary = {"auroc": auroc(member.astype(int), s)}
        for fpr in FPRS:
            summary[f"tpr_at_fpr_{fpr:g}"] = (tpr_at_threshold(member, s, fpr) if resolvable(fpr, n_nonmembers)
                                              else float("nan"))
        for metric in METRICS:
            rows.append({"metric": metric, "value": summary[metric], "chance": chance_of(metric), "attack": attack,
                         "attacker": attacker, "n": float(member.size), **extra})
    return rows

