"""Loss-threshold membership: the attack's AUC with a subject-cluster bootstrap interval (:func:`membership_auc`),
the paired difference of an attack and its control (:func:`membership_difference`) and the residual R_M
(:func:`membership_residual`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from eegprivacy.attacks.metrics import auroc
from eegprivacy.embeddings.endpoints.resampling import _codes, _percentile_ci, _unit_weights
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = ["MembershipResult", "membership_auc", "membership_difference", "membership_residual"]


@dataclass
class MembershipResult:
    """Loss-threshold membership attack: AUC, its cluster-bootstrap interval and draws, and R_M.

    ``ci_over`` says what the bootstrap resampled: ``"subjects"`` when the caller named every loss's subject,
    ``"windows"`` for the documented fallback without subjects (each window its own cluster). ``paired_with``
    records what fixes the resamples (the seed and both group arrays), so two attacks on the same windows can be
    differenced draw by draw (:func:`membership_difference`). With subjects, ``pair_counts`` (the (member subject,
    non-member subject) win counts C), ``sizes_members`` / ``sizes_nonmembers`` (windows per subject on each side)
    and ``units_members`` / ``units_nonmembers`` (the subjects of each side; one array for both when ``joint``)
    rescore any subject resample (:meth:`draws_for`); they are None for the window-level fallback.
    """

    auc: float
    ci: tuple[float, float]
    n_members: int
    n_nonmembers: int
    draws: np.ndarray = field(repr=False)
    ci_over: str = "subjects"
    n_subjects: int = 0
    joint: bool = False
    paired_with: tuple = field(default=(), repr=False, compare=False)
    pair_counts: np.ndarray = field(default=None, repr=False, compare=False)
    sizes_members: np.ndarray = field(default=None, repr=False, compare=False)
    sizes_nonmembers: np.ndarray = field(default=None, repr=False, compare=False)
    units_members: np.ndarray = field(default=None, repr=False, compare=False)
    units_nonmembers: np.ndarray = field(default=None, repr=False, compare=False)

    @property
    def residual(self) -> float:
        return membership_residual(self.auc)

    def draws_for(self, units, counts) -> np.ndarray:
        """AUC of each subject resample: ``counts`` (B, len(units)) are multiplicities of the subjects ``units``;
        the attack's member and non-member subjects take theirs (each must be in ``units``; a ``joint`` subject
        carries its windows on both sides), the others are ignored. With :func:`membership_auc`'s own
        multiplicities (stratified: the members' then the non-members' columns) it reproduces ``draws`` exactly.
        A resample without a member or without a non-member subject is NaN."""
        if self.pair_counts is None or self.units_members is None:
            raise ValueError("this membership result has no per-subject pair counts (a window-level fallback, or "
                             "computed by older code)")
        w_m = _unit_weights(units, counts, self.units_members, "the membership members")
        w_n = w_m if self.joint else _unit_weights(units, counts, self.units_nonmembers, "the membership non-members")
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.einsum("bh,hg,bg->b", w_m, self.pair_counts, w_n)
                    / ((w_m @ self.sizes_members) * (w_n @ self.sizes_nonmembers)))


def _pair_counts(pos: np.ndarray, neg: np.ndarray, ipos: np.ndarray, ineg: np.ndarray, n_upos: int,
                 n_uneg: int) -> np.ndarray:
    """(n_upos, n_uneg) sums over pairs of P(pos > neg) + 0.5 P(tie), per (positive cluster, negative cluster).

    A resample's AUC is then a bilinear form in the two clusters' multiplicities, so every resample costs one
    small matrix product instead of a rank computation over the windows.
    """
    onehot_neg = np.zeros((neg.size, n_uneg))
    onehot_neg[np.arange(neg.size), ineg] = 1.0
    out = np.zeros((n_upos, n_uneg))
    for start in range(0, pos.size, 2048):  # bounded memory for large window counts
        p = pos[start:start + 2048, None]
        wins = (p > neg[None, :]) + 0.5 * (p == neg[None, :])  # (chunk, n_neg)
        onehot_pos = np.zeros((p.shape[0], n_upos))
        onehot_pos[np.arange(p.shape[0]), ipos[start:start + 2048]] = 1.0
        out += onehot_pos.T @ (wins @ onehot_neg)
    return out


def membership_auc(losses_members, losses_nonmembers, n_bootstrap: int = 1000, confidence: float = 0.95,
                   random_state=0, *, groups_members=None, groups_nonmembers=None) -> MembershipResult:
    """AUC of the loss-threshold attack (lower loss => member), with a subject-cluster bootstrap interval.

    ``groups_members`` / ``groups_nonmembers`` name the subject of every loss. Subjects are the privacy unit,
    so they are what is resampled, with replacement (multinomial counts, as in :func:`attribute_leakage`):

    - the two sides share no subject (the head attack: members = the head's training subjects) -> members'
      subjects and non-members' subjects are resampled separately (stratified, so every resample keeps both
      classes);
    - a subject has windows on both sides (the encoder attack: member and non-member blocks of the same
      recordings) -> the union of subjects is resampled jointly, a subject carrying its member *and* its
      non-member windows into the resample.

    Without groups (both ``None``) every window is its own cluster and ``ci_over="windows"`` -- a fallback for
    callers that have no subject ids, not valid for subject-level claims. Giving one group array but not the
    other is an error. ``random_state`` (an int) fixes the resamples: two calls with the same groups and seed
    draw the same subject multiplicities, which :func:`membership_difference` relies on.
    """
    m = np.asarray(losses_members, float).ravel()
    nm = np.asarray(losses_nonmembers, float).ravel()
    if m.size == 0 or nm.size == 0:
        raise ValueError("need at least one member and one non-member loss")
    if (groups_members is None) != (groups_nonmembers is None):
        raise ValueError("give the subject of every member *and* every non-member loss (groups_members and "
                         "groups_nonmembers), or neither for a window-level bootstrap")
    ci_over = "windows" if groups_members is None else "subjects"
    gm = np.arange(m.size) if groups_members is None else np.asarray(groups_members)
    gn = np.arange(m.size, m.size + nm.size) if groups_nonmembers is None else np.asarray(groups_nonmembers)
    _codes(gm, m.size, "groups_members")
    _codes(gn, nm.size, "groups_nonmembers")
    y = np.r_[np.ones(m.size, int), np.zeros(nm.size, int)]
    auc = auroc(y, -np.r_[m, nm])
    rng = check_random_state(random_state)
    joint = bool(np.intersect1d(gm, gn).size)
    if joint:
        units, index = np.unique(np.r_[gm, gn], return_inverse=True)
        im, inn = index[: m.size], index[m.size:]
        w_m = w_n = subject_counts(units.size, n_bootstrap, rng).astype(float)
        n_um = n_un = units.size
        units_m = units_n = units
    else:
        (units_m, im), (units_n, inn) = np.unique(gm, return_inverse=True), np.unique(gn, return_inverse=True)
        n_um, n_un = units_m.size, units_n.size
        w_m = subject_counts(n_um, n_bootstrap, rng).astype(float)
        w_n = subject_counts(n_un, n_bootstrap, rng).astype(float)
        units = np.r_[units_m, units_n]
    C = _pair_counts(-m, -nm, im, inn, n_um, n_un)
    size_m = np.bincount(im, minlength=n_um).astype(float)
    size_n = np.bincount(inn, minlength=n_un).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.einsum("bh,hg,bg->b", w_m, C, w_n) / ((w_m @ size_m) * (w_n @ size_n))
    seed = random_state if isinstance(random_state, (int, np.integer)) else None
    # what rescores any subject resample (not kept for the window fallback: C would be windows x windows)
    per_subject = {} if ci_over == "windows" else {
        "pair_counts": C, "sizes_members": size_m, "sizes_nonmembers": size_n, "units_members": units_m,
        "units_nonmembers": units_n}
    return MembershipResult(auc=float(auc), ci=_percentile_ci(draws, confidence), n_members=int(m.size),
                            n_nonmembers=int(nm.size), draws=draws, ci_over=ci_over,
                            n_subjects=int(np.unique(units).size), joint=joint,
                            paired_with=(seed, int(n_bootstrap), gm.tobytes(), gn.tobytes()), **per_subject)


def membership_difference(attack: MembershipResult, control: MembershipResult,
                          confidence: float = 0.95) -> tuple[float, tuple[float, float], np.ndarray]:
    """AUC(attack) - AUC(control) with a paired subject-bootstrap interval: (value, ci, draws).

    Both results must come from the same windows' subjects and the same integer seed (e.g. the pretrained and
    the random-init encoder scored on the same member/non-member windows), so draw i of each resampled the same
    subjects; their difference is then the matched-null difference the conventions ask for.
    """
    if attack.paired_with[0] is None or attack.paired_with != control.paired_with:
        raise ValueError("the attack and its control must share the windows' subjects, n_bootstrap and an integer "
                         "random_state to be differenced draw by draw")
    draws = attack.draws - control.draws
    return float(attack.auc - control.auc), _percentile_ci(draws, confidence), draws


def membership_residual(auc):
    """R_M = max(0, 2 AUC - 1); an attack worse than chance is no residual. Elementwise on draws."""
    out = np.maximum(0.0, 2.0 * np.asarray(auc, float) - 1.0)
    return out if np.ndim(out) else float(out)
