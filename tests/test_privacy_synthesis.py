"""The marginal-based DP synthesiser (privacy/synthesis.py): calibration and its accounting, determinism, a planted
signal that survives at ε = 10 and no signal where there is none, the sampler's range, and input checks."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from eegprivacy.privacy.mechanisms import GaussianAnalytic
from eegprivacy.privacy.synthesis import MarginalSynthesizer, public_bin_edges

K = 4
DELTA = 1e-5


def planted(n: int, shift: float, seed: int, k: int = K):
    """Balanced 0/1 labels; feature 0 is shifted by ``shift`` SD in class 1, the rest is noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    Z = rng.normal(size=(n, k))
    Z[:, 0] += shift * y
    return Z, y


@pytest.fixture(scope="module")
def edges():
    """Public bin edges from a separate 'public' cohort."""
    Z_public, _ = planted(400, 2.0, seed=100)
    return public_bin_edges(Z_public, 8)


def real_auroc_of_synthetic(pairs: str, shift: float, edges) -> float:
    """Train a logistic regression on the synthetic table, score it on the real (private) one."""
    Z, y = planted(200, shift, seed=0)
    Z_syn, y_syn = MarginalSynthesizer(10.0, DELTA, pairs=pairs, random_state=0).fit(Z, y, edges).sample()
    assert set(np.unique(y_syn)) == {0, 1}
    clf = LogisticRegression().fit(Z_syn, y_syn)
    return roc_auc_score(y, clf.predict_proba(Z)[:, 1])


@pytest.mark.parametrize("pairs", ["all", "label"])
def test_planted_signal_survives_synthesis_at_eps_10(pairs, edges):
    assert real_auroc_of_synthetic(pairs, 2.0, edges) > 0.8


def test_no_signal_in_gives_chance_auroc_out(edges):
    assert abs(real_auroc_of_synthetic("all", 0.0, edges) - 0.5) < 0.15


@pytest.mark.parametrize("pairs, model", [("all", "auto"), ("label", "auto"), ("all", "pgm")])
def test_same_inputs_and_seed_give_identical_synthetic_tables(pairs, model, edges):
    Z, y = planted(60, 1.0, seed=3)
    a = MarginalSynthesizer(1.0, DELTA, pairs=pairs, model=model, random_state=7, iterations=200).fit(Z, y, edges)
    b = clone(a).fit(Z, y, edges)
    for (Za, ya), (Zb, yb) in [(a.sample(), b.sample()), (a.sample(), a.sample()),
                               (a.sample(30, random_state=1), b.sample(30, random_state=1))]:
        np.testing.assert_array_equal(Za, Zb)
        np.testing.assert_array_equal(ya, yb)
    c = MarginalSynthesizer(1.0, DELTA, pairs=pairs, model=model, random_state=8, iterations=200).fit(Z, y, edges)
    assert not np.array_equal(a.sample()[0], c.sample()[0])


@pytest.mark.parametrize("pairs, m", [("all", 1 + K + K * (K - 1) // 2), ("label", 1 + K)])
def test_sensitivity_is_sqrt_2m_and_sigma_the_analytic_calibration(pairs, m, edges):
    Z, y = planted(50, 1.0, seed=4)
    s = MarginalSynthesizer(2.0, DELTA, pairs=pairs, random_state=0, iterations=50).fit(Z, y, edges)
    assert len(s.marginals_) == m
    assert s.marginals_[0] == ("y",) and all("y" in c for c in s.marginals_[1:K + 1])
    assert s.sensitivity_ == pytest.approx(math.sqrt(2 * m))
    cells = 2 + K * 16 + (m - 1 - K) * 64
    expected = GaussianAnalytic(epsilon=2.0, delta=DELTA).calibrate(math.sqrt(2 * m) / 2, cells).noise_scale
    assert s.sigma_ == pytest.approx(expected, rel=1e-12)
    assert s.n_records_ == 50


def test_one_replaced_patient_moves_the_concatenated_counts_by_at_most_sqrt_2m(edges):
    """The sensitivity claim itself, on two neighbouring tables whose replaced patient differs in every bin."""
    Z, y = planted(30, 1.0, seed=5)
    Z2, y2 = Z.copy(), y.copy()
    Z[0], y[0] = -5.0, 0
    Z2[0], y2[0] = 5.0, 1

    def counts(Z, y):
        codes = [np.digitize(Z[:, i], edges[i]) for i in range(K)] + [y]
        sizes = [8] * K + [2]
        cliques = [(K,)] + [(i, K) for i in range(K)] + [(i, j) for i in range(K) for j in range(i + 1, K)]
        return np.concatenate([np.bincount(np.ravel_multi_index([codes[a] for a in c], [sizes[a] for a in c]),
                                           minlength=math.prod(sizes[a] for a in c)) for c in cliques]), len(cliques)

    (a, m), (b, _) = counts(Z, y), counts(Z2, y2)
    assert np.linalg.norm(a - b) == pytest.approx(math.sqrt(2 * m))


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 10.0])
def test_dp_accounting_pld_confirms_the_requested_epsilon(epsilon, edges):
    """A Gaussian mechanism with noise multiplier σ/Δ2 spends at most the requested ε at δ (PLD accountant)."""
    Z, y = planted(40, 1.0, seed=6)
    s = MarginalSynthesizer(epsilon, DELTA, random_state=0, iterations=50).fit(Z, y, edges)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=s.sigma_ / s.sensitivity_))
    spent = accountant.get_epsilon(DELTA)
    assert spent <= epsilon * (1 + 1e-6)
    assert spent >= 0.95 * epsilon  # the analytic calibration is tight, not merely safe


def test_samples_lie_within_the_public_edge_span(edges):
    Z, y = planted(80, 2.0, seed=8)
    Z[:5] *= 100.0  # private outliers fall into the end bins, never outside the public span
    s = MarginalSynthesizer(1.0, DELTA, random_state=0, iterations=200).fit(Z, y, edges)
    Z_syn, y_syn = s.sample(500)
    assert Z_syn.shape == (500, K) and y_syn.shape == (500,) and set(np.unique(y_syn)) <= {0, 1}
    for i, e in enumerate(edges):
        width = (e[-1] - e[0]) / (len(e) - 1)
        assert Z_syn[:, i].min() >= e[0] - width and Z_syn[:, i].max() <= e[-1] + width
    assert s.sample()[0].shape == (80, K)  # the private n by default


def test_privacy_info_states_scope_and_labels(edges):
    Z, y = planted(40, 1.0, seed=9)
    info = MarginalSynthesizer(1.0, DELTA, random_state=0, iterations=50).fit(Z, y, edges).privacy_info()
    assert info["mechanism"] == "marginal_synthesis" and info["eps_covers"] == "end_to_end"
    assert info["epsilon"] == 1.0 and info["delta"] == DELTA and info["marginals"] == 1 + K + K * (K - 1) // 2
    assert info["sigma"] > 0 and info["sensitivity"] > 0 and "labels" in info["note"]


def test_public_bin_edges_are_sorted_quantiles_and_refuse_a_constant_feature():
    Z, _ = planted(100, 0.0, seed=10)
    edges = public_bin_edges(Z, 5)
    assert len(edges) == K and all(e.shape == (4,) and np.all(np.diff(e) >= 0) for e in edges)
    np.testing.assert_allclose(edges[1], np.quantile(Z[:, 1], [0.2, 0.4, 0.6, 0.8]))
    Z[:, 2] = 1.0
    with pytest.raises(ValueError, match="feature"):
        public_bin_edges(Z, 5)


@pytest.mark.parametrize("change, match", [
    (dict(y=np.r_[np.zeros(10), 2 * np.ones(10)]), "0/1"),
    (dict(y=np.zeros(19)), "one label per row"),
    (dict(Z=np.full((20, K), np.nan)), "finite"),
    (dict(edges="drop_one"), "list of 4"),
    (dict(edges="short"), "interior edges"),
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(pairs="some"), "pairs"),
    (dict(n_bins=2), "n_bins"),
])
def test_bad_inputs_are_refused_with_a_clear_error(change, match, edges):
    Z, y = planted(20, 1.0, seed=11)
    args = dict(Z=Z, y=y, edges=list(edges), epsilon=1.0, delta=DELTA, pairs="all", n_bins=8)
    args.update(change)
    if args["edges"] == "drop_one":
        args["edges"] = list(edges)[:-1]
    elif args["edges"] == "short":
        args["edges"] = [e[:-1] for e in edges]
    s = MarginalSynthesizer(args["epsilon"], args["delta"], n_bins=args["n_bins"], pairs=args["pairs"])
    with pytest.raises(ValueError, match=match):
        s.fit(args["Z"], args["y"], args["edges"])


def test_exact_model_over_all_pairs_refuses_a_table_too_large_to_build(edges):
    Z, y = planted(20, 1.0, seed=12, k=8)
    wide = [edges[0]] * 8
    with pytest.raises(ValueError, match="mixture"):
        MarginalSynthesizer(1.0, DELTA, pairs="all", model="pgm").fit(Z, y, wide)


def test_jax_runs_on_cpu_beside_torch(edges):
    """mbi's JAX and the models' torch share a process: a fit, then a torch forward pass."""
    import jax
    import torch

    Z, y = planted(30, 1.0, seed=13)
    MarginalSynthesizer(1.0, DELTA, random_state=0, iterations=50).fit(Z, y, edges)
    assert jax.default_backend() == "cpu"
    assert torch.nn.Linear(K, 1)(torch.ones(2, K)).shape == (2, 1)
