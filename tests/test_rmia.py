"""RMIA (attacks/rmia.py) and the reference-attack registry (attacks/reference.py): a known answer, a null, and
the population and reference-selection rules."""

import numpy as np
import pytest

from eegprivacy.attacks.metrics import auroc, tpr_at_fpr
from eegprivacy.attacks.reference import REFERENCE_ATTACKS, feasible, fit_attack, score_attack, select_references
from eegprivacy.attacks.rmia import RMIA


def _gaussian_mean_game(seed: int, signal: bool = True, d: int = 40, n: int = 20, targets: int = 100,
                        references: int = 200, population: int = 200):
    """The Gaussian-mean model, where the exact likelihood-ratio test is known: a target θ is the mean of n points
    of N(0, I_d), half of 2n candidates; Pr(x|θ) ∝ exp(−|x − θ|²/2). Reference models are means of n fresh
    population points (offline: none saw a candidate). Given θ and x, members have θ ~ N(x/n, (n−1)/n² I) and
    non-members θ ~ N(0, I/n): the exact log-LR is computable. ``signal=False`` trains θ on fresh points (no
    candidate is a member in fact): every attack must sit at chance."""
    rng = np.random.default_rng(seed)
    refs = rng.normal(size=(references, n, d)).mean(1)
    rmia, exact, member = [], [], []
    for _ in range(targets):
        candidates = rng.normal(size=(2 * n, d))
        m = np.zeros(2 * n, dtype=bool)
        m[rng.permutation(2 * n)[:n]] = True
        theta = candidates[m].mean(0) if signal else rng.normal(size=(n, d)).mean(0)
        points = np.vstack([candidates, rng.normal(size=(population, d))])
        p_ref = np.exp(-((points[None] - refs[:, None]) ** 2).sum(-1) / 2)
        p_target = np.exp(-((points - theta) ** 2).sum(-1) / 2)
        fitted = RMIA("offline", offline_a=1.0).fit(p_ref, np.zeros(p_ref.shape, dtype=bool))
        z = np.r_[np.zeros(2 * n, dtype=bool), np.ones(population, dtype=bool)]
        rmia.append(fitted.score_samples(p_target, z)[: 2 * n])
        v_in, v_out = (n - 1) / n**2, 1 / n
        exact.append(-((theta - candidates / n) ** 2).sum(1) / (2 * v_in) + (theta**2).sum() / (2 * v_out))
        member.append(m)
    return np.concatenate(member).astype(int), np.concatenate(rmia), np.concatenate(exact)


def test_rmia_reaches_the_exact_likelihood_ratio_test_on_the_gaussian_mean_model():
    """4,000 candidates: RMIA with 200 offline references within 0.02 AUROC and 0.06 TPR at 5 % FPR of the
    exact (Neyman-Pearson) test, which no attack can beat; measured 0.848 against 0.852."""
    member, rmia, exact = _gaussian_mean_game(0)
    assert auroc(member, exact) > 0.8  # the game has a signal to find
    assert abs(auroc(member, rmia) - auroc(member, exact)) < 0.02
    assert abs(tpr_at_fpr(member, rmia, 0.05) - tpr_at_fpr(member, exact, 0.05)) < 0.06


def test_rmia_is_at_chance_when_no_candidate_was_trained_on():
    member, rmia, exact = _gaussian_mean_game(1, signal=False)
    assert abs(auroc(member, rmia) - 0.5) < 0.04
    assert abs(auroc(member, exact) - 0.5) < 0.04


def test_the_score_is_the_share_of_population_points_beaten_by_gamma():
    p_ref = np.full((2, 4), 0.5)
    fitted = RMIA("online", gamma=1.0).fit(p_ref, np.zeros((2, 4), dtype=bool))
    p = np.array([0.9, 0.1, 0.3, 0.6])  # ratios 1.8, 0.2, 0.6, 1.2
    scores = fitted.score_samples(p)  # every example a population point; x is never its own z
    np.testing.assert_allclose(scores, [3 / 3, 0 / 3, 1 / 3, 2 / 3])
    strict = RMIA("online", gamma=2.5).fit(p_ref, np.zeros((2, 4), dtype=bool)).score_samples(p)
    np.testing.assert_allclose(strict, [2 / 3, 0, 1 / 3, 1 / 3])  # 1.8/2.5 = 0.72 beats 0.2 and 0.6; 0.24 beats 0.2


def test_groups_keep_a_subjects_own_trials_out_of_its_population():
    fitted = RMIA("online").fit(np.full((1, 4), 0.5), np.zeros((1, 4), dtype=bool))
    p = np.array([0.9, 0.8, 0.1, 0.2])
    scores = fitted.score_samples(p, population=np.ones(4, dtype=bool), groups=np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(scores, [1.0, 1.0, 0.0, 0.0])  # group 0 sees only group 1's z, and vice versa
    with pytest.raises(ValueError, match="no population point"):
        fitted.score_samples(p, population=np.array([True, True, False, False]), groups=np.array([0, 0, 1, 1]))


def test_offline_reads_only_out_references_with_the_linear_in_approximation():
    p_ref = np.array([[0.9, 0.2], [0.5, 0.4]])
    in_mask = np.array([[True, False], [False, False]])
    fitted = RMIA("offline", offline_a=0.5).fit(p_ref, in_mask)
    pr_out = np.array([0.5, 0.3])  # example 0: only the second reference is OUT
    np.testing.assert_allclose(np.exp(fitted.log_marginal_), 0.5 * (1.5 * pr_out + 0.5))
    online = RMIA("online").fit(p_ref, in_mask)
    np.testing.assert_allclose(np.exp(online.log_marginal_), [0.7, 0.3])


@pytest.mark.parametrize("bad", [dict(mode="both"), dict(offline_a=1.5), dict(gamma=0.5)])
def test_rmia_rejects_bad_settings(bad):
    with pytest.raises(ValueError):
        RMIA(**bad).fit(np.full((2, 3), 0.5), np.zeros((2, 3), dtype=bool))


def test_k_references_are_each_trials_own_in_and_out_shadows():
    """Online: ⌊k/2⌋ IN and ⌈k/2⌉ OUT shadows of each trial; offline: its first k OUT ones; None: all as drawn."""
    in_mask = np.array([[1, 0, 1], [1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 1, 1]], dtype=bool)
    phi = np.arange(15.0).reshape(5, 3)  # phi[j, t] = 3j + t: the shadow j of every slot can be read back
    picked, mask = select_references(phi, in_mask, 2, offline=False)
    np.testing.assert_array_equal(picked, [[0, 7, 2], [6, 1, 8]])  # IN: shadows 0, 2, 0; OUT: 2, 0, 2
    np.testing.assert_array_equal(mask, [[True] * 3, [False] * 3])
    picked, mask = select_references(phi, in_mask, 2, offline=True)
    np.testing.assert_array_equal(picked, [[6, 1, 8], [12, 4, 11]])  # OUT: shadows 2 and 4, 0 and 1, 2 and 3
    assert not mask.any()
    assert feasible(in_mask, 2, offline=True) and not feasible(in_mask, 3, offline=True)
    with pytest.raises(ValueError, match="too few"):
        select_references(phi, in_mask, 3, offline=True)
    everything, same = select_references(phi, in_mask, None, offline=True)
    np.testing.assert_array_equal(everything, phi)
    np.testing.assert_array_equal(same, in_mask)


def test_every_registry_attack_fits_and_scores_and_sits_at_chance_without_signal():
    rng = np.random.default_rng(3)
    n_refs, n = 16, 2000
    in_mask = rng.random((n_refs, n)) < 0.5
    phi_ref = rng.normal(size=(n_refs, n))
    phi_target = rng.normal(size=n)
    member = rng.random(n) < 0.5
    groups = np.arange(n) % 8
    for name in REFERENCE_ATTACKS:
        fitted = fit_attack(name, phi_ref, in_mask, k=None)
        scores = score_attack(name, fitted, phi_target, population=~member, groups=groups)
        assert scores.shape == (n,) and np.isfinite(scores).all()
        assert abs(auroc(member.astype(int), scores) - 0.5) < 0.05, name
    with pytest.raises(ValueError, match="unknown reference attack"):
        fit_attack("nope", phi_ref, in_mask)
