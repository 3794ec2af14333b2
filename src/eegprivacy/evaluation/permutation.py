"""Permutation tests over the privacy unit, the subject, for Study C's "leaks / does not leak" claims.

Every yes/no claim of the embedding audit is decided by a permutation test whose null arrangements move whole
subjects, never single windows: windows of one subject share that subject's random effect, so only subjects are
exchangeable. Each test here is exact under the null it states -- the observed arrangement is one draw from the
same distribution as every permuted arrangement, so ``P(p <= alpha) <= alpha`` for every ``alpha`` -- whether the
arrangements are enumerated (``exact=True``, p = #{null >= observed} / #arrangements, the observed one included)
or drawn at random (Monte Carlo, p = (1 + #{null >= observed}) / (1 + n_permutations), which is itself a valid
p-value for any number of draws). The subject bootstrap of :mod:`eegprivacy.embeddings.endpoints` is kept for
the *size* of an effect; it is not used for the decision, because with 14-16 subjects per side its percentile
interval covers chance in only about 90 % of null datasets.

Four tests:

- :func:`membership_permutation_test` -- the head attack (member and non-member subjects disjoint): permute
  which subjects are members;
- :func:`paired_membership_test` -- the encoder attack against its random-init control on the same windows
  (every subject on both sides): sign flips of per-subject within-subject AUC differences;
- :func:`identity_permutation_test` -- BPID@1 against chance: permute which reference set belongs to whom;
- :func:`paired_identity_test` -- BPID@1 of two encoders on the same queries: sign flips of per-subject
  hit-count differences.

Each gives both tails: ``p_value`` (the attack is better than the null / than the control) and ``p_value_lower``
(worse), and :attr:`PermutationResult.p_value_two_sided` combines them (twice the smaller tail, at most 1), which is
what study C's claims decide by (issue 46: a pretrained encoder that *reduces* identity against its random-init
control is a finding, not "no evidence"). All are deterministic for a given ``random_state`` and vectorised: the
data are reduced once to per-subject sufficient statistics, so each arrangement costs a few small array
operations. Their measured sizes are rows of ``reports/calibration.md`` (``study_c.*``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = [
    "PermutationResult",
    "two_sided",
    "membership_permutation_test",
    "paired_membership_test",
    "identity_permutation_test",
    "paired_identity_test",
]

_CONFIDENCE = 0.95
_BLOCK = 2_000_000  # entries of one block of arrangements (rows x subjects): bounds the memory of a test


@dataclass
class PermutationResult:
    """Outcome of one permutation test.

    Attributes
    ----------
    statistic : float
        The observed statistic.
    p_value : float
        One-sided p-value: ``(1 + #{null >= observed}) / (1 + n)`` for ``n`` Monte Carlo draws, the exact fraction
        ``#{null >= observed} / #arrangements`` when every arrangement was enumerated (the observed one is among
        them).
    n_permutations : int
        Monte Carlo draws, or the number of enumerated arrangements when ``exact``.
    exact : bool
        True when every arrangement was enumerated.
    test : str
        Short human-readable name of the test, e.g. ``"sign-flip over 8 subjects (exact, 256)"``.
    null : numpy.ndarray
        The statistic of every drawn (or enumerated) arrangement.
    difference_ci : tuple of float
        Paired tests only: the 95 % percentile interval of the statistic over paired subject-bootstrap resamples
        (NaN, NaN otherwise). It states the size of the difference; the decision is a p-value.
    p_value_lower : float
        The other tail: ``(1 + #{null <= observed}) / (1 + n)`` (or the exact fraction).
    """

    statistic: float
    p_value: float
    n_permutations: int
    exact: bool
    test: str
    null: np.ndarray = field(repr=False)
    difference_ci: tuple[float, float] = (float("nan"), float("nan"))
    p_value_lower: float = float("nan")

    @property
    def p_value_two_sided(self) -> float:
        """Twice the smaller tail, at most 1: the observed statistic is extreme in either direction."""
        return two_sided(self.p_value, self.p_value_lower)

    @property
    def direction(self) -> str:
        """Which tail is the smaller: ``"above"`` (the attack beats the null / control) or ``"below"``."""
        return "above" if self.p_value <= self.p_value_lower else "below"


def two_sided(upper: float, lower: float) -> float:
    """Two-sided p-value from the two one-sided ones of the same null: ``min(1, 2 · min(upper, lower))``."""
    if not (np.isfinite(upper) and np.isfinite(lower)):
        return float("nan")
    return float(min(1.0, 2.0 * min(upper, lower)))


# ---------------------------------------------------------------------------------------------------------------
# shared machinery


def _check_count(value, name: str) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _vector(values, name: str) -> np.ndarray:
    out = np.asarray(values, float)
    if out.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {out.shape}")
    if out.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def _labels(values, n: int, name: str, other: str) -> np.ndarray:
    out = np.asarray(values)
    if out.shape != (n,):
        raise ValueError(f"{name} must give one subject per entry of {other}: shape {out.shape} vs ({n},)")
    return out


def _p_value(null: np.ndarray, observed: float, exact: bool) -> float:
    """One-sided p-value; a null value equal to the observed one up to rounding counts as >= (conservative)."""
    tol = 1e-10 * max(1.0, abs(observed))
    count = int(np.count_nonzero(null >= observed - tol))
    return count / null.size if exact else (1 + count) / (1 + null.size)


def _p_value_lower(null: np.ndarray, observed: float, exact: bool) -> float:
    """The lower tail of :func:`_p_value`: a null value equal to the observed one counts as <= (conservative)."""
    return _p_value(-np.asarray(null), -observed, exact)


def _percentile_ci(draws: np.ndarray) -> tuple[float, float]:
    draws = np.asarray(draws, float)
    draws = draws[np.isfinite(draws)]
    if not draws.size:
        return (float("nan"), float("nan"))
    a = 1.0 - _CONFIDENCE
    lo, hi = np.quantile(draws, [a / 2, 1 - a / 2])
    return (float(lo), float(hi))


def _name(kind: str, exact: bool, n: int) -> str:
    return f"{kind} (exact, {n:,})" if exact else f"{kind} ({n:,})"


def _sign_flip(values: np.ndarray, denominator: float, n_permutations: int, rng) -> tuple[np.ndarray, bool]:
    """Null of ``sum(eps * values) / denominator`` over sign vectors ``eps``: all 2^n when 2^n <= n_perm + 1."""
    n = values.size
    if n < 63 and 2 ** n <= n_permutations + 1:
        codes = np.arange(2 ** n, dtype=np.int64)
        bits = (codes[:, None] >> np.arange(n, dtype=np.int64)[None, :]) & 1
        return ((1 - 2 * bits) @ values) / denominator, True  # code 0 is the observed arrangement
    block = max(1, _BLOCK // n)
    null = np.empty(n_permutations)
    for start in range(0, n_permutations, block):
        stop = min(start + block, n_permutations)
        signs = 1 - 2 * rng.randint(0, 2, size=(stop - start, n))
        null[start:stop] = (signs @ values) / denominator
    return null, False


def _within_subject_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(pos > neg) + 0.5 P(pos == neg) over all pairs (Mann-Whitney), by binary search in the sorted negatives."""
    neg = np.sort(neg)
    below = np.searchsorted(neg, pos, side="left")
    upto = np.searchsorted(neg, pos, side="right")
    return float((below + 0.5 * (upto - below)).sum() / (pos.size * neg.size))


def _subject_pair_wins(scores: np.ndarray, codes: np.ndarray, n_subjects: int) -> np.ndarray:
    """(n, n) sums over window pairs of [s_a > s_b] + 0.5 [s_a == s_b], a of subject i (row), b of subject j.

    The same pair counts as :func:`eegprivacy.embeddings.endpoints.membership._pair_counts`, but between every two
    subjects regardless of side, so that any assignment of subjects to members and non-members reads its AUC off
    them.
    One binary search of all windows into each subject's sorted scores: O(n_subjects * n_windows * log).
    """
    out = np.zeros((n_subjects, n_subjects))
    for j in range(n_subjects):
        sj = np.sort(scores[codes == j])
        below = np.searchsorted(sj, scores, side="left")
        upto = np.searchsorted(sj, scores, side="right")
        out[:, j] = np.bincount(codes, weights=below + 0.5 * (upto - below), minlength=n_subjects)
    return out


# ---------------------------------------------------------------------------------------------------------------
# membership


def membership_permutation_test(losses_members, losses_nonmembers, groups_members, groups_nonmembers,
                                n_permutations: int = 9999, random_state=0) -> PermutationResult:
    """Loss-threshold membership attack against chance, by permuting which subjects are members.

    The attack scores a window as a member when its loss is low; the statistic is the pooled AUC of all member
    against all non-member windows, exactly as :func:`eegprivacy.embeddings.endpoints.membership.membership_auc`
    computes it. Members and non-members must be disjoint sets of subjects (the head attack: members are the head's
    training subjects); for the encoder attack, where every subject has windows on both sides, use
    :func:`paired_membership_test`.

    Why the null is exact: under the sharp null that training changed no subject's losses, each subject's losses
    are what they would have been had it been assigned to the other side. The subjects that were trained on were
    one assignment of ``n_member_subjects`` of the ``n`` subjects (chosen at random, or exchangeable), so the
    observed AUC is one draw from the distribution of the AUC over all ``C(n, n_member_subjects)`` assignments,
    each subject carrying all its windows. Permuting windows instead would break the within-subject dependence
    and make the null far too narrow.

    Every subject-by-subject sum of pair wins is computed once; an assignment's AUC is then the sum of the
    member-by-non-member blocks divided by the product of the two sides' window counts. All assignments are
    enumerated when there are at most ``n_permutations + 1`` of them.

    Parameters
    ----------
    losses_members, losses_nonmembers : array-like of shape (n_member_windows,) and (n_nonmember_windows,)
        Per-window losses of the member and the non-member windows.
    groups_members, groups_nonmembers : array-like
        Subject of every member / non-member loss; no subject may appear on both sides.
    n_permutations : int, default 9999
        Monte Carlo draws when the assignments are not enumerated.
    random_state : int, RandomState or None, default 0
        Seed of the draws.

    Returns
    -------
    PermutationResult
        ``statistic`` is the observed AUC; ``null`` the AUC of every drawn / enumerated assignment.
    """
    n_permutations = _check_count(n_permutations, "n_permutations")
    m = _vector(losses_members, "losses_members")
    nm = _vector(losses_nonmembers, "losses_nonmembers")
    gm = _labels(groups_members, m.size, "groups_members", "losses_members")
    gn = _labels(groups_nonmembers, nm.size, "groups_nonmembers", "losses_nonmembers")
    shared = np.intersect1d(gm, gn)
    if shared.size:
        raise ValueError(f"{shared.size} subject(s) have both member and non-member windows: the subject-label "
                         "permutation needs disjoint member and non-member subjects; use paired_membership_test "
                         "for the encoder attack (with its random-init control)")
    units, codes = np.unique(np.r_[gm, gn], return_inverse=True)
    n = units.size
    is_member = np.isin(units, gm)
    n_m = int(is_member.sum())
    scores = -np.r_[m, nm]  # lower loss => member
    wins = _subject_pair_wins(scores, codes, n)
    size = np.bincount(codes, minlength=n).astype(float)

    def auc(mask: np.ndarray) -> np.ndarray:  # (b, n) booleans -> (b,) AUCs
        x = mask.astype(float)
        return np.einsum("bi,bi->b", x @ wins, 1.0 - x) / ((x @ size) * ((1.0 - x) @ size))

    observed = float(auc(is_member[None])[0])
    total = math.comb(n, n_m)
    block = max(1, _BLOCK // n)
    exact = total <= n_permutations + 1
    if exact:
        null = np.empty(total)
        combos = itertools.combinations(range(n), n_m)
        for start in range(0, total, block):
            chosen = np.array(list(itertools.islice(combos, block)), dtype=np.int64).reshape(-1, n_m)
            mask = np.zeros((chosen.shape[0], n), bool)
            mask[np.arange(chosen.shape[0])[:, None], chosen] = True
            null[start:start + chosen.shape[0]] = auc(mask)
    else:
        rng = check_random_state(random_state)
        null = np.empty(n_permutations)
        for start in range(0, n_permutations, block):
            rows = min(block, n_permutations - start)
            ranks = rng.random_sample((rows, n)).argsort(axis=1).argsort(axis=1)
            null[start:start + rows] = auc(ranks < n_m)
    count = total if exact else n_permutations
    return PermutationResult(statistic=observed, p_value=_p_value(null, observed, exact),
                             p_value_lower=_p_value_lower(null, observed, exact), n_permutations=count,
                             exact=exact, test=_name(f"subject-label permutation over {n} subjects", exact, count),
                             null=null)


def paired_membership_test(attack_members, attack_nonmembers, control_members, control_nonmembers,
                           groups_members, groups_nonmembers, n_permutations: int = 9999, n_bootstrap: int = 1000,
                           random_state=0) -> PermutationResult:
    """Encoder membership attack against its control (the same encoder at random init) on the same windows.

    Every subject has member windows (blocks the encoder was pretrained on) and non-member windows (held-out
    blocks of the same recordings). For each subject ``s`` the within-subject AUC compares the member windows of
    ``s`` with the non-member windows of ``s`` (lower loss => member); the statistic is the mean over subjects of
    ``AUC_attack(s) - AUC_control(s)``. Within subject, because the pooled AUC mixes the subjects' loss scales: a
    subject with low losses overall counts as "member-like" against every other subject, which is noise (or,
    where member and non-member windows differ in kind, an artefact) that has nothing to do with training. The
    control removes what any encoder of this architecture scores on these windows (e.g. member blocks recorded
    earlier in the session), so the claim is "training made members more recognisable", not "AUC > 0.5".

    Why the null is exact: under the null that, for every subject, the attack and the control encoder are
    exchangeable -- swapping the two encoders' losses on all of that subject's windows leaves their joint
    distribution unchanged -- each subject's difference is as likely to have either sign, independently across
    subjects. The observed statistic is one of the ``2^n`` sign patterns, so the sign-flip distribution is its
    exact null. All ``2^n`` patterns are enumerated when ``2^n <= n_permutations + 1`` (8 subjects: 256; the
    smallest possible p is then ``1 / 2^n``).

    ``difference_ci`` is the 95 % percentile interval of the same statistic over subject bootstrap resamples
    (:func:`~eegprivacy.evaluation.cluster_bootstrap.subject_counts`): a drawn subject brings its member and
    non-member windows of both encoders, so the resample is paired.

    Parameters
    ----------
    attack_members, attack_nonmembers : array-like
        Losses of the trained encoder's attack on the member / non-member windows.
    control_members, control_nonmembers : array-like
        Losses of the control (random-init) attack on the same windows, in the same order.
    groups_members, groups_nonmembers : array-like
        Subject of every member / non-member window; both sides must name the same subjects.
    n_permutations : int, default 9999
        Monte Carlo draws when the sign patterns are not enumerated.
    n_bootstrap : int, default 1000
        Subject-bootstrap resamples of ``difference_ci``.
    random_state : int, RandomState or None, default 0
        Seed of the bootstrap (drawn first, so the interval does not depend on ``n_permutations``) and the draws.

    Returns
    -------
    PermutationResult
        ``statistic`` is the mean within-subject AUC difference; ``null`` its sign-flip distribution.
    """
    n_permutations = _check_count(n_permutations, "n_permutations")
    n_bootstrap = _check_count(n_bootstrap, "n_bootstrap")
    am = _vector(attack_members, "attack_members")
    an = _vector(attack_nonmembers, "attack_nonmembers")
    cm = _vector(control_members, "control_members")
    cn = _vector(control_nonmembers, "control_nonmembers")
    if cm.size != am.size or cn.size != an.size:
        raise ValueError("the control must be scored on the same windows as the attack: "
                         f"members {am.size} vs {cm.size}, non-members {an.size} vs {cn.size}")
    gm = _labels(groups_members, am.size, "groups_members", "attack_members")
    gn = _labels(groups_nonmembers, an.size, "groups_nonmembers", "attack_nonmembers")
    units = np.unique(gm)
    if not np.array_equal(units, np.unique(gn)):
        only_m, only_n = np.setdiff1d(gm, gn).size, np.setdiff1d(gn, gm).size
        raise ValueError(f"the paired test needs every subject on both sides ({only_m} subject(s) only among "
                         f"members, {only_n} only among non-members); for disjoint member and non-member "
                         "subjects use membership_permutation_test")
    diff = np.array([_within_subject_auc(-am[gm == s], -an[gn == s]) - _within_subject_auc(-cm[gm == s],
                                                                                           -cn[gn == s])
                     for s in units])
    n = units.size
    rng = check_random_state(random_state)
    counts = subject_counts(n, n_bootstrap, rng).astype(float)
    ci = _percentile_ci(counts @ diff / n)
    observed = float(diff.mean())
    null, exact = _sign_flip(diff, float(n), n_permutations, rng)
    return PermutationResult(statistic=observed, p_value=_p_value(null, observed, exact),
                             p_value_lower=_p_value_lower(null, observed, exact), n_permutations=null.size,
                             exact=exact, test=_name(f"sign-flip over {n} subjects", exact, null.size), null=null,
                             difference_ci=ci)


# ---------------------------------------------------------------------------------------------------------------
# identification


def identity_permutation_test(guess, query_subjects, candidates, n_permutations: int = 9999,
                              random_state=0) -> PermutationResult:
    """BPID@1 (top-1 nearest-centroid identification) against chance, by permuting the candidate labels.

    ``guess[i]`` is the candidate the attack chose for query ``i`` and ``query_subjects[i]`` the query's true
    subject (both among ``candidates``, the K reference subjects); the statistic is the accuracy
    ``mean(guess == query_subjects)`` (``BPIDResult.guess``, ``.query_subjects``, ``.candidates`` give all three).

    Why the null is exact: under the null that the reference sets are exchangeable between subjects -- nothing
    ties subject ``c``'s reference windows to ``c``'s queries rather than to another subject's -- relabelling the
    reference sets by any permutation ``pi`` of the candidates gives a data set with the same distribution. The
    nearest-centroid rule is equivariant (the centroids and, with ``center=True``, the reference mean only move
    with their labels), so relabelling turns every guess ``g`` into ``pi(g)`` without recomputing anything, and
    the observed accuracy is one draw from the distribution of ``mean(pi(guess) == query_subjects)`` over all
    ``K!`` permutations. Queries of one subject hit or miss together; permuting labels, not queries, keeps that.
    With the guesses tabulated against the true subjects (a K x K table), each permutation's accuracy is a sum of
    K table entries. All permutations are enumerated when ``K! <= n_permutations + 1`` (K <= 7 for the default).

    Parameters
    ----------
    guess : array-like of shape (n_queries,)
        Candidate chosen for every query.
    query_subjects : array-like of shape (n_queries,)
        True subject of every query.
    candidates : array-like of shape (K,)
        The reference subjects (distinct), including those without queries.
    n_permutations, random_state
        Monte Carlo draws when the candidate relabellings are not enumerated, and their seed (default 9999, 0).

    Returns
    -------
    PermutationResult
        ``statistic`` is BPID@1; ``null`` its distribution over candidate relabellings (mean ``1/K``).
    """
    n_permutations = _check_count(n_permutations, "n_permutations")
    candidates = np.asarray(candidates)
    if candidates.ndim != 1 or candidates.size == 0:
        raise ValueError(f"candidates must be a non-empty one-dimensional array, got shape {candidates.shape}")
    ordered = np.unique(candidates)
    if ordered.size != candidates.size:
        raise ValueError("candidates must be distinct subjects (one reference set each)")
    guess = np.asarray(guess)
    if guess.ndim != 1 or guess.size == 0:
        raise ValueError(f"guess must be a non-empty one-dimensional array, got shape {guess.shape}")
    query_subjects = _labels(query_subjects, guess.size, "query_subjects", "guess")
    for values, name in ((guess, "guess"), (query_subjects, "query_subjects")):
        missing = np.setdiff1d(values, ordered)
        if missing.size:
            raise ValueError(f"{missing.size} value(s) of {name} are not among the candidates, e.g. {missing[0]!r}")
    k = ordered.size
    g = np.searchsorted(ordered, guess)
    q = np.searchsorted(ordered, query_subjects)
    table = np.zeros((k, k))
    np.add.at(table, (g, q), 1.0)  # table[a, b]: queries of subject b assigned to candidate a
    n_queries = float(guess.size)
    observed = float(np.trace(table) / n_queries)
    total = math.factorial(k) if k <= 20 else None
    exact = total is not None and total <= n_permutations + 1
    rows = np.arange(k)
    block = max(1, _BLOCK // k)
    if exact:
        perms = itertools.permutations(range(k))
        null = np.empty(total)
        for start in range(0, total, block):
            pi = np.array(list(itertools.islice(perms, block)), dtype=np.int64).reshape(-1, k)
            null[start:start + pi.shape[0]] = table[rows[None, :], pi].sum(axis=1) / n_queries
    else:
        rng = check_random_state(random_state)
        null = np.empty(n_permutations)
        for start in range(0, n_permutations, block):
            size = min(block, n_permutations - start)
            pi = rng.random_sample((size, k)).argsort(axis=1)
            null[start:start + size] = table[rows[None, :], pi].sum(axis=1) / n_queries
    return PermutationResult(statistic=observed, p_value=_p_value(null, observed, exact),
                             p_value_lower=_p_value_lower(null, observed, exact), n_permutations=null.size,
                             exact=exact, test=_name(f"candidate-label permutation over {k} candidates", exact,
                                                     null.size), null=null)


def paired_identity_test(correct_a, correct_b, query_subjects, n_permutations: int = 9999, n_bootstrap: int = 1000,
                         random_state=0) -> PermutationResult:
    """BPID@1 of encoder ``a`` against encoder ``b`` (e.g. trained vs random init) on the same queries.

    The statistic is ``BPID(a) - BPID(b)``, the pooled accuracy difference -- equivalently the per-subject
    hit-rate differences weighted by the subjects' query counts, ``sum_s D_s / n_queries`` with ``D_s`` subject
    ``s``'s hit count of ``a`` minus that of ``b``.

    Why the null is exact: under the null that the two encoders are exchangeable for every query subject --
    swapping their hit vectors on all of subject ``s``'s queries leaves the joint distribution unchanged -- each
    ``D_s`` is as likely to be negative as positive, independently across subjects, so the observed statistic is
    one of the ``2^n`` sign patterns of ``sum_s eps_s D_s / n_queries``. Flipping whole subjects, not single
    queries, keeps the dependence among one subject's queries. All patterns are enumerated when
    ``2^n <= n_permutations + 1``.

    ``difference_ci`` is the 95 % percentile interval of the same statistic over query-subject bootstrap
    resamples (:func:`~eegprivacy.evaluation.cluster_bootstrap.subject_counts`), a drawn subject carrying both
    encoders' hits on its queries (paired).

    Parameters
    ----------
    correct_a, correct_b : array-like of shape (n_queries,)
        Hit (1 / True) or miss (0 / False) of each encoder on every query (``BPIDResult.correct``).
    query_subjects : array-like of shape (n_queries,)
        True subject of every query.
    n_permutations, n_bootstrap, random_state
        As in :func:`paired_membership_test`.

    Returns
    -------
    PermutationResult
        ``statistic`` is ``BPID(a) - BPID(b)``; ``null`` its sign-flip distribution.
    """
    n_permutations = _check_count(n_permutations, "n_permutations")
    n_bootstrap = _check_count(n_bootstrap, "n_bootstrap")
    a = _vector(correct_a, "correct_a")
    b = _vector(correct_b, "correct_b")
    if a.size != b.size:
        raise ValueError(f"both encoders must be scored on the same queries: {a.size} vs {b.size} hits")
    for values, name in ((a, "correct_a"), (b, "correct_b")):
        if not np.all((values == 0) | (values == 1)):
            raise ValueError(f"{name} must be a hit vector of 0/1 (or booleans)")
    query_subjects = _labels(query_subjects, a.size, "query_subjects", "correct_a")
    units, codes = np.unique(query_subjects, return_inverse=True)
    n = units.size
    diff = np.bincount(codes, weights=a - b, minlength=n)
    tries = np.bincount(codes, minlength=n).astype(float)
    rng = check_random_state(random_state)
    counts = subject_counts(n, n_bootstrap, rng).astype(float)
    ci = _percentile_ci((counts @ diff) / (counts @ tries))
    observed = float(diff.sum() / a.size)
    null, exact = _sign_flip(diff, float(a.size), n_permutations, rng)
    return PermutationResult(statistic=observed, p_value=_p_value(null, observed, exact),
                             p_value_lower=_p_value_lower(null, observed, exact), n_permutations=null.size,
                             exact=exact, test=_name(f"sign-flip over {n} query subjects", exact, null.size),
                             null=null, difference_ci=ci)
