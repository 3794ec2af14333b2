"""Study C's "leaks / does not leak" decisions: permutation tests over subjects (eegprivacy.evaluation.permutation).

SYNTHETIC data only (labelled as such). Each test recovers a planted effect, stays quiet without one, matches a
brute-force count where it enumerates, and is deterministic. The null checks run many synthetic null data sets
(windows of a subject share a random effect) and require the tests not to reject at alpha = 0.05 in at least
the stated share; the membership check also prints the subject bootstrap's coverage of 0.5 for comparison, which
the review found to be only about 0.90 with 14-16 subjects per side.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eegprivacy.attacks.metrics import auroc
from eegprivacy.embeddings.endpoints.identity import bpid_at_1
from eegprivacy.embeddings.endpoints.membership import membership_auc
from eegprivacy.evaluation.permutation import (
    PermutationResult,
    identity_permutation_test,
    membership_permutation_test,
    paired_identity_test,
    paired_membership_test,
)

ALPHA = 0.05
SUBJECTS, WINDOWS = 28, 25
PERM = 999  # permutations per test inside the null checks (the stage uses 9,999)


def _membership_data(seed: int, shift: float = 0.0, subjects: int = SUBJECTS, windows: int = WINDOWS):
    """SYNTHETIC: per-window losses = subject effect + noise; a random half of the subjects are "members", whose
    losses are lowered by ``shift`` (0 = nothing memorised, the null)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(subjects), windows)
    loss = rng.normal(0, 1, subjects)[groups] + rng.normal(0, 1, groups.size)
    member = np.isin(groups, rng.permutation(subjects)[: subjects // 2])
    loss = loss - shift * member
    return loss, groups, member


def _paired_membership_data(seed: int, memorised: float = 0.0, artefact: float = 0.0, subjects: int = 12,
                            windows: int = 10):
    """SYNTHETIC encoder attack: every subject has ``windows`` member and ``windows`` non-member windows. Both
    encoders see the subject effect, a per-window difficulty and the ``artefact`` (member windows easier for any
    encoder); only the trained one also has ``memorised`` lower loss on member windows."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(subjects), 2 * windows)
    member = np.tile(np.r_[np.ones(windows, bool), np.zeros(windows, bool)], subjects)
    common = rng.normal(0, 1, subjects)[groups] + 0.5 * rng.normal(size=groups.size) - artefact * member
    attack = common + rng.normal(size=groups.size) - memorised * member
    control = common + rng.normal(size=groups.size)
    return attack, control, groups, member


def _paired_membership(attack, control, groups, member, **kw) -> PermutationResult:
    return paired_membership_test(attack[member], attack[~member], control[member], control[~member],
                                  groups[member], groups[~member], **kw)


def _identity_data(seed: int, signal: float, subjects: int = SUBJECTS, windows: int = WINDOWS):
    """SYNTHETIC: reference and query windows of each subject. ``signal`` scales a subject style shared by a
    subject's reference and query windows (0 = the null: each side has its own independent style)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(subjects), windows)
    shared = rng.normal(size=(subjects, 8))
    ref = signal * shared[groups] + 0.7 * rng.normal(size=(subjects, 8))[groups] + rng.normal(size=(groups.size, 8))
    qry = signal * shared[groups] + 0.7 * rng.normal(size=(subjects, 8))[groups] + rng.normal(size=(groups.size, 8))
    return ref, qry, groups


def _identity(res, **kw) -> PermutationResult:
    return identity_permutation_test(res.guess, res.query_subjects, res.candidates, **kw)


# ---------------------------------------------------------------------------------------------------------------
# membership: subject-label permutation


def test_membership_permutation_recovers_a_planted_effect_and_is_quiet_without():
    loss, groups, member = _membership_data(0, shift=2.0)
    res = membership_permutation_test(loss[member], loss[~member], groups[member], groups[~member])
    assert res.statistic == pytest.approx(auroc(member.astype(int), -loss))
    assert not res.exact and res.n_permutations == 9999 and res.null.shape == (9999,)
    assert res.p_value < 0.01
    assert res.test == "subject-label permutation over 28 subjects (9,999)"
    assert res.p_value == (1 + np.sum(res.null >= res.statistic)) / 10_000
    assert np.isnan(res.difference_ci).all()

    loss, groups, member = _membership_data(1)
    quiet = membership_permutation_test(loss[member], loss[~member], groups[member], groups[~member])
    assert quiet.p_value > 0.1
    assert abs(quiet.null.mean() - 0.5) < 0.02


def test_membership_enumeration_matches_brute_force():
    """6 subjects, 3 members: all C(6, 3) = 20 assignments, each AUC recomputed from the windows."""
    loss, groups, member = _membership_data(2, shift=1.0, subjects=6, windows=7)
    res = membership_permutation_test(loss[member], loss[~member], groups[member], groups[~member])
    assert res.exact and res.n_permutations == 20 and res.test.endswith("(exact, 20)")
    brute = np.array([auroc(np.isin(groups, chosen).astype(int), -loss)
                      for chosen in itertools.combinations(range(6), 3)])
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute), atol=1e-12)
    observed = auroc(member.astype(int), -loss)
    assert res.p_value == pytest.approx(np.sum(brute >= observed - 1e-12) / 20)
    # unequal window counts per subject and ties: still the pooled AUC, assignment by assignment
    loss = np.round(loss, 0)
    keep = np.ones(loss.size, bool)
    keep[[0, 1, 2, 20, 40]] = False
    loss, groups, member = loss[keep], groups[keep], member[keep]
    res = membership_permutation_test(loss[member], loss[~member], groups[member], groups[~member])
    brute = np.array([auroc(np.isin(groups, chosen).astype(int), -loss)
                      for chosen in itertools.combinations(range(6), 3)])
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute), atol=1e-12)
    # fewer permutations than assignments -> Monte Carlo
    mc = membership_permutation_test(loss[member], loss[~member], groups[member], groups[~member], n_permutations=5)
    assert not mc.exact and mc.n_permutations == 5


def test_membership_permutation_is_deterministic_and_checks_its_inputs():
    loss, groups, member = _membership_data(3)
    args = (loss[member], loss[~member], groups[member], groups[~member])
    a = membership_permutation_test(*args, n_permutations=199, random_state=5)
    b = membership_permutation_test(*args, n_permutations=199, random_state=5)
    c = membership_permutation_test(*args, n_permutations=199, random_state=6)
    np.testing.assert_array_equal(a.null, b.null)
    assert a.p_value == b.p_value and not np.array_equal(a.null, c.null)
    with pytest.raises(ValueError, match="paired_membership_test"):
        membership_permutation_test([0.1, 0.2], [0.3], [0, 1], [1])
    with pytest.raises(ValueError, match="groups_members"):
        membership_permutation_test([0.1, 0.2], [0.3], [0], [1])
    with pytest.raises(ValueError, match="NaN"):
        membership_permutation_test([0.1, np.nan], [0.3], [0, 0], [1])
    with pytest.raises(ValueError, match="n_permutations"):
        membership_permutation_test([0.1], [0.3], [0], [1], n_permutations=0)


def test_membership_permutation_holds_its_level_on_null_data():
    """The review's check: 200 SYNTHETIC null data sets of 28 subjects x 25 windows, half the subjects members,
    nothing memorised. The permutation test must not reject at 0.05 in >= 93 % of them; the subject bootstrap's
    coverage of 0.5 is printed for comparison."""
    n_null, quiet, covered = 200, 0, 0
    for seed in range(n_null):
        loss, groups, member = _membership_data(seed)
        args = (loss[member], loss[~member])
        res = membership_permutation_test(*args, groups[member], groups[~member], n_permutations=PERM,
                                          random_state=seed)
        quiet += res.p_value > ALPHA
        boot = membership_auc(*args, 1000, random_state=seed, groups_members=groups[member],
                              groups_nonmembers=groups[~member])
        covered += boot.ci[0] <= 0.5 <= boot.ci[1]
    print(f"\nmembership null, {n_null} data sets: permutation test does not reject in {quiet / n_null:.3f}; "
          f"subject bootstrap 95 % interval covers 0.5 in {covered / n_null:.3f}")
    assert quiet / n_null >= 0.93, f"the permutation test rejected in {n_null - quiet} of {n_null} null data sets"


# ---------------------------------------------------------------------------------------------------------------
# membership: paired against the random-init control


def test_paired_membership_recovers_memorisation_and_ignores_a_shared_artefact():
    attack, control, groups, member = _paired_membership_data(0, memorised=1.0, subjects=8)
    res = _paired_membership(attack, control, groups, member)
    assert res.exact and res.n_permutations == 256 and res.test == "sign-flip over 8 subjects (exact, 256)"
    assert res.p_value == pytest.approx(1 / 256)
    assert res.difference_ci[0] > 0 and res.difference_ci[0] <= res.statistic <= res.difference_ci[1]

    # member windows easier for *any* encoder: the attack alone looks like leakage, the paired test does not
    attack, control, groups, member = _paired_membership_data(1, artefact=1.0, subjects=16)
    alone = membership_auc(attack[member], attack[~member], 1000, groups_members=groups[member],
                           groups_nonmembers=groups[~member])
    assert alone.ci[0] > 0.5
    res = _paired_membership(attack, control, groups, member)
    assert not res.exact and res.n_permutations == 9999  # 2^16 patterns > 10,000: Monte Carlo
    assert res.p_value > 0.1
    assert res.difference_ci[0] < 0  # nor does the paired interval claim a positive difference


def test_paired_membership_enumeration_matches_brute_force():
    """5 subjects: every one of the 32 swaps of attack and control on whole subjects, scored from the windows."""
    attack, control, groups, member = _paired_membership_data(2, memorised=0.5, subjects=5, windows=6)

    def statistic(a, c):
        return np.mean([auroc(member[groups == s].astype(int), -a[groups == s])
                        - auroc(member[groups == s].astype(int), -c[groups == s]) for s in range(5)])

    brute = []
    for swap in itertools.product([False, True], repeat=5):
        flip = np.isin(groups, np.flatnonzero(swap))
        brute.append(statistic(np.where(flip, control, attack), np.where(flip, attack, control)))
    brute = np.array(brute)
    res = _paired_membership(attack, control, groups, member)
    assert res.exact and res.n_permutations == 32
    assert res.statistic == pytest.approx(statistic(attack, control))
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute), atol=1e-12)
    assert res.p_value == pytest.approx(np.sum(brute >= res.statistic - 1e-12) / 32)


def test_paired_membership_is_deterministic_and_checks_its_inputs():
    attack, control, groups, member = _paired_membership_data(3, subjects=16)
    a = _paired_membership(attack, control, groups, member, n_permutations=199, random_state=2)
    b = _paired_membership(attack, control, groups, member, n_permutations=199, random_state=2)
    c = _paired_membership(attack, control, groups, member, n_permutations=499, random_state=2)
    np.testing.assert_array_equal(a.null, b.null)
    assert a.difference_ci == b.difference_ci == c.difference_ci  # the interval does not depend on the draws
    with pytest.raises(ValueError, match="every subject on both sides"):
        paired_membership_test([0.1], [0.2], [0.1], [0.2], [0], [1])
    with pytest.raises(ValueError, match="same windows"):
        paired_membership_test([0.1, 0.2], [0.2], [0.1], [0.2], [0, 0], [0])


def test_paired_membership_holds_its_level_on_null_data():
    """100 SYNTHETIC null data sets (12 subjects, both encoders exchangeable, a shared member artefact)."""
    n_null, quiet = 100, 0
    for seed in range(n_null):
        attack, control, groups, member = _paired_membership_data(100 + seed, artefact=0.5)
        res = _paired_membership(attack, control, groups, member, n_permutations=PERM, n_bootstrap=200,
                                 random_state=seed)
        quiet += res.p_value > ALPHA
    print(f"\npaired membership null, {n_null} data sets: does not reject in {quiet / n_null:.3f}")
    assert quiet / n_null >= 0.9


# ---------------------------------------------------------------------------------------------------------------
# identification: candidate-label permutation


def test_bpid_result_carries_what_the_identity_tests_need():
    ref, qry, groups = _identity_data(0, signal=1.0, subjects=6, windows=5)
    res = bpid_at_1(ref, groups, qry, groups, n_bootstrap=50)
    np.testing.assert_array_equal(res.candidates, np.arange(6))
    np.testing.assert_array_equal(res.query_subjects, groups)
    np.testing.assert_array_equal(res.guess == res.query_subjects, res.correct)


def test_identity_permutation_recovers_a_planted_effect_and_is_quiet_without():
    ref, qry, groups = _identity_data(0, signal=1.0)
    res = _identity(bpid_at_1(ref, groups, qry, groups, n_bootstrap=50))
    assert res.statistic > 0.3 and res.p_value == pytest.approx(1 / 10_000)
    assert res.test == "candidate-label permutation over 28 candidates (9,999)"
    ref, qry, groups = _identity_data(1, signal=0.0)
    quiet = _identity(bpid_at_1(ref, groups, qry, groups, n_bootstrap=50))
    assert quiet.p_value > 0.1
    assert quiet.null.mean() == pytest.approx(1 / SUBJECTS, abs=0.005)


def test_identity_enumeration_matches_relabelled_reference_sets():
    """K = 5: for each of the 120 relabellings of the reference sets, BPID@1 recomputed from the embeddings."""
    ref, qry, groups = _identity_data(2, signal=0.4, subjects=5, windows=6)
    res = _identity(bpid_at_1(ref, groups, qry, groups, n_bootstrap=50))
    assert res.exact and res.n_permutations == 120 and res.test.endswith("(exact, 120)")
    brute = np.array([bpid_at_1(ref, np.asarray(pi)[groups], qry, groups, n_bootstrap=1).accuracy
                      for pi in itertools.permutations(range(5))])
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute), atol=1e-12)
    assert res.p_value == pytest.approx(np.sum(brute >= res.statistic - 1e-12) / 120)
    # candidates without queries are still relabelled
    sub = groups < 3
    part = bpid_at_1(ref, groups, qry[sub], groups[sub], n_bootstrap=1)
    res = _identity(part)
    brute = np.array([np.mean(np.asarray(pi)[part.guess] == part.query_subjects)
                      for pi in itertools.permutations(range(5))])
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute))


def test_identity_permutation_is_deterministic_and_checks_its_inputs():
    ref, qry, groups = _identity_data(3, signal=0.2)
    part = bpid_at_1(ref, groups, qry, groups, n_bootstrap=10)
    a, b = _identity(part, random_state=4), _identity(part, random_state=4)
    np.testing.assert_array_equal(a.null, b.null)
    assert not np.array_equal(a.null, _identity(part, random_state=5).null)
    with pytest.raises(ValueError, match="not among the candidates"):
        identity_permutation_test([0, 9], [0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="distinct"):
        identity_permutation_test([0, 1], [0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="query_subjects"):
        identity_permutation_test([0, 1], [0], [0, 1])


def test_identity_permutation_holds_its_level_on_null_data():
    """100 SYNTHETIC null data sets as in the BPID coverage check (independent styles on the two sides)."""
    n_null, quiet = 100, 0
    for seed in range(n_null):
        ref, qry, groups = _identity_data(10_000 + seed, signal=0.0)
        res = _identity(bpid_at_1(ref, groups, qry, groups, n_bootstrap=1), n_permutations=PERM,
                        random_state=seed)
        quiet += res.p_value > ALPHA
    print(f"\nidentity null, {n_null} data sets: does not reject in {quiet / n_null:.3f}")
    assert quiet / n_null >= 0.9


# ---------------------------------------------------------------------------------------------------------------
# identification: two encoders on the same queries


def _two_encoders(seed: int, gain: float, subjects: int = SUBJECTS, windows: int = WINDOWS):
    """SYNTHETIC: one data set with a real subject signal, seen by two random linear encoders; encoder a's view
    is ``gain`` times less noisy (gain 0 = the two encoders are exchangeable, the null)."""
    rng = np.random.default_rng(seed)
    ref, qry, groups = _identity_data(seed, signal=0.6, subjects=subjects, windows=windows)
    hits = []
    for g in (gain, 0.0):
        P = rng.normal(size=(8, 8))
        noise = 1.0 / (1.0 + g)
        za = ref @ P + noise * rng.normal(size=ref.shape)
        zq = qry @ P + noise * rng.normal(size=qry.shape)
        hits.append(bpid_at_1(za, groups, zq, groups, n_bootstrap=1).correct)
    return hits[0], hits[1], groups


def test_paired_identity_recovers_a_planted_difference_and_matches_the_pooled_accuracies():
    a, b, groups = _two_encoders(0, gain=0.0)
    a = a | (np.arange(a.size) % 3 == 0)  # encoder a also hits every third query
    res = paired_identity_test(a, b, groups)
    assert res.statistic == pytest.approx(a.mean() - b.mean())
    assert res.p_value < 0.001 and res.difference_ci[0] > 0
    assert res.test == "sign-flip over 28 query subjects (9,999)"
    a, b, groups = _two_encoders(1, gain=0.0)
    quiet = paired_identity_test(a, b, groups)
    assert quiet.p_value > 0.1 and quiet.difference_ci[0] < 0 < quiet.difference_ci[1]


def test_paired_identity_enumeration_matches_brute_force_and_is_deterministic():
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(4), [3, 5, 2, 6])
    a, b = rng.random(groups.size) < 0.6, rng.random(groups.size) < 0.4
    res = paired_identity_test(a, b, groups)
    assert res.exact and res.n_permutations == 16 and res.test == "sign-flip over 4 query subjects (exact, 16)"
    brute = []
    for swap in itertools.product([False, True], repeat=4):
        flip = np.isin(groups, np.flatnonzero(swap))
        brute.append(np.where(flip, b, a).mean() - np.where(flip, a, b).mean())
    np.testing.assert_allclose(np.sort(res.null), np.sort(brute), atol=1e-12)
    assert res.p_value == pytest.approx(np.sum(np.array(brute) >= res.statistic - 1e-12) / 16)
    groups = np.repeat(np.arange(20), 3)
    a, b = rng.random(60) < 0.6, rng.random(60) < 0.4
    x, y = paired_identity_test(a, b, groups, random_state=1), paired_identity_test(a, b, groups, random_state=1)
    np.testing.assert_array_equal(x.null, y.null)
    assert x.difference_ci == y.difference_ci
    with pytest.raises(ValueError, match="same queries"):
        paired_identity_test([1, 0], [1], [0, 1])
    with pytest.raises(ValueError, match="0/1"):
        paired_identity_test([1, 0.5], [1, 0], [0, 1])


def test_paired_identity_holds_its_level_on_null_data():
    """100 SYNTHETIC null data sets: two exchangeable encoders of the same data (hits correlated within subject)."""
    n_null, quiet = 100, 0
    for seed in range(n_null):
        a, b, groups = _two_encoders(20_000 + seed, gain=0.0)
        res = paired_identity_test(a, b, groups, n_permutations=PERM, n_bootstrap=200, random_state=seed)
        quiet += res.p_value > ALPHA
    print(f"\npaired identity null, {n_null} data sets: does not reject in {quiet / n_null:.3f}")
    assert quiet / n_null >= 0.9


def test_every_test_gives_both_tails_and_a_two_sided_p():
    """Issue 46: an effect in the other direction is significant too. A paired identity difference far below 0
    has a large upper-tail p, a small lower-tail p, and a two-sided p twice the smaller tail."""
    from eegprivacy.evaluation.permutation import paired_identity_test, two_sided

    rng = np.random.default_rng(0)
    subjects = np.repeat(np.arange(30), 5)
    worse = rng.random(subjects.size) < 0.2
    better = rng.random(subjects.size) < 0.8
    t = paired_identity_test(worse, better, subjects, n_permutations=999, random_state=0)
    assert t.p_value > 0.99 and t.p_value_lower == pytest.approx(1 / 1000)
    assert t.p_value_two_sided == pytest.approx(2 / 1000) and t.direction == "below"
    assert two_sided(0.3, 0.8) == pytest.approx(0.6) and two_sided(0.9, 0.7) == 1.0
    assert np.isnan(two_sided(np.nan, 0.1))
