"""The one-run audit bound (attacks/one_run_audit.py): independent values, its size on an exact ε-DP mechanism,
and the guesses."""

import math
from fractions import Fraction

import numpy as np
import pytest

from eegprivacy.attacks.one_run_audit import epsilon_lower_bound, guesses, max_certifiable_epsilon, p_value


def _tail_exact(r: int, v: int, q: Fraction) -> Fraction:
    return sum((Fraction(math.comb(r, j)) * q**j * (1 - q) ** (r - j) for j in range(v, r + 1)), Fraction(0))


def test_the_p_value_matches_exact_rational_arithmetic():
    """Theorem 5.2's bound recomputed in exact fractions (q rational: ε = ln 3, q = 3/4), δ = 0 and δ > 0."""
    m, r, v, delta = 40, 12, 10, Fraction(1, 1000)
    q = Fraction(3, 4)
    tail = _tail_exact(r, v, q)
    alpha = max(sum((Fraction(math.comb(r, v - j)) * q ** (v - j) * (1 - q) ** (r - v + j) for j in range(1, i + 1)),
                    Fraction(0)) / i for i in range(1, v + 1))
    assert p_value(m, r, v, math.log(3)) == pytest.approx(float(tail), rel=1e-9)
    assert p_value(m, r, v, math.log(3), float(delta)) == pytest.approx(float(tail + 2 * m * delta * alpha), rel=1e-9)


def test_the_bound_at_delta_zero_is_the_binomial_tail_inverted():
    """All 100 guesses of 100 right: ε̂ solves q^100 = 0.05, q = e^ε/(1+e^ε), so ε̂ = logit(0.05^(1/100))."""
    q = 0.05 ** (1 / 100)
    assert max_certifiable_epsilon(100) == pytest.approx(math.log(q / (1 - q)), abs=1e-5)
    assert epsilon_lower_bound(100, 100, 50) == 0.0  # half right: nothing refuted
    assert epsilon_lower_bound(100, 100, 80, delta=1e-5) <= epsilon_lower_bound(100, 100, 80)
    assert epsilon_lower_bound(1000, 100, 80) == epsilon_lower_bound(100, 100, 80)  # m enters only through δ


def test_the_bound_exceeds_the_true_epsilon_at_most_at_its_level_on_an_exact_dp_mechanism():
    """Randomized response on each canary's inclusion bit is exactly ε-DP per canary: over 400 audits the 95 %
    bound lies above the true ε in at most 5 % (+ Monte Carlo slack) of them, and it is clearly positive."""
    rng = np.random.default_rng(0)
    epsilon, m, above, bounds = 2.0, 200, 0, []
    for _ in range(400):
        included = rng.random(m) < 0.5
        truthful = rng.random(m) < math.exp(epsilon) / (1 + math.exp(epsilon))
        seen = np.where(truthful, included, ~included).astype(float)
        r, v = guesses(seen + 1e-3 * rng.random(m), included, m // 2, m // 2)
        bounds.append(epsilon_lower_bound(m, r, v))
        above += bounds[-1] > epsilon
    assert above / 400 <= 0.05 + 0.02
    assert np.median(bounds) > 1.0


def test_guesses_count_the_top_in_and_bottom_out():
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.2])
    included = np.array([True, False, True, False, True])
    assert guesses(scores, included, 2, 2) == (4, 2)  # in: 0.9 (right), 0.8 (wrong); out: 0.1 (right), 0.2 (wrong)
    with pytest.raises(ValueError):
        guesses(scores, included, 3, 3)


@pytest.mark.parametrize("separation", [0.0, 0.8, 3.0])
def test_the_bound_equals_opake_auditing_where_the_two_methods_coincide(separation):
    """The field implementation (``opake-auditing``, Xiang et al. 2025's order-statistics audit) guesses every
    canary at one threshold; at δ = 0 with the threshold fixed in advance its p-value is the same binomial tail as
    Steinke et al.'s Theorem 5.2 with r = m guesses, so both must refute the same ε (to the two bisections'
    tolerances). SYNTHETIC scores: in-canaries shifted by ``separation``."""
    import opake.auditing as auditing  # pinned in requirements.txt: a missing field implementation fails here
    from opake.random import key

    m = 400
    flip = auditing.coin_flip(range(m), num_canaries=m, key=key(7))
    included = np.isin(flip.canary_indices, flip.in_indices)
    scores = np.random.default_rng(3).normal(size=m) + separation * included
    estimate = auditing.one_run(auditing.canary_scores(scores, canary_indices=flip.canary_indices), coin_flip=flip)
    threshold = separation / 2
    theirs = estimate.eps_delta().epsilon_at(delta=0.0, significance=0.05, threshold=threshold)
    k_in = int((scores >= threshold).sum())
    r, v = guesses(scores, included, k_in, m - k_in)
    assert r == m
    ours = epsilon_lower_bound(m, r, v, delta=0.0, confidence=0.95)
    assert ours == pytest.approx(theirs, abs=2e-4)
    assert (ours > 0.5) == (separation == 3.0)
