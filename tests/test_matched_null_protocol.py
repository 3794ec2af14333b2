"""Study A's utility protocol against its matched null: one grid and one protocol for every arm (the noise-free
scaled and clipped table included), intervals over patients and seeds, release − null paired, the utility horizon
as a fixed-sequence test per mechanism at α/m — and the check the issue asks for: a zero-signal release lands
inside its control's interval under the same protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _summaries import summary_row

from eegprivacy.evaluation.cluster_bootstrap import bootstrap_p_value, bootstrap_p_value_two_sided, holm
from eegprivacy.pipeline.sweep import Cell
from eegprivacy.studies.release.table import noise_generator, release
from eegprivacy.studies.release.utility import keeping_predictions, summarise, utility_cell

EPSILONS = [0.5, 50.0]


def _cells(mechanism="gaussian_analytic", seeds=range(2), epsilons=EPSILONS, nested_seeds=1, permutations=2,
           clipped=True):
    base = {"nested_seeds": nested_seeds, "nested_inner": 2, "clip_norm": 2.0, "delta": 1e-5}
    arms = (("baseline", "none"), ("clipped", "none")) if clipped else (("baseline", "none"),)
    cells = [Cell({**base, "arm": arm, "mechanism": m, "epsilon": math.inf}, s) for arm, m in arms for s in seeds]
    cells += [Cell({**base, "arm": "permuted", "mechanism": "permuted_labels", "epsilon": math.inf}, s)
              for s in range(permutations)]
    cells += [Cell({**base, "arm": arm, "mechanism": mechanism, "epsilon": e}, s)
              for e in epsilons for s in seeds for arm in ("release", "matched_null")]
    return cells


def _summary(X, y, tmp_path, **kwargs):
    cells = _cells(**kwargs)
    compute = keeping_predictions(lambda config, seed: utility_cell(config, seed, X=X, y=y), tmp_path)
    for cell in cells:
        rows = compute(dict(cell.config), cell.seed)
        assert all(r["metric"] != "_predictions" for r in rows)  # per-patient values never reach the rows
    return summarise([(None, cells)], tmp_path, y, n_resamples=400, confidence=0.95, epsilons=EPSILONS)


def test_zero_signal_release_lands_inside_the_controls_interval(tmp_path):
    """Features independent of the label: the release, its matched null and the non-private table all sit inside
    the permuted-label control's interval, and no difference clears 0 — the protocol invents no utility."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(24, 10))
    y = np.r_[np.ones(10, int), np.zeros(14, int)]
    summary = _summary(X, y, tmp_path, clipped=False)
    control = summary_row(summary, "permuted")
    assert control.ci_over == "subjects+seeds"
    assert control.ci_low < 0.5 < control.ci_high
    for arm, eps in (("matched_null", 0.5), ("matched_null", 50.0), ("release", 0.5), ("release", 50.0)):
        point = summary_row(summary, arm, epsilon=eps).value
        assert control.ci_low <= point <= control.ci_high, (arm, eps, point, control.ci_low, control.ci_high)
    assert control.ci_low <= summary_row(summary, "baseline").value <= control.ci_high
    diffs = summary[summary.arm == "release_minus_null"]
    assert len(diffs) == 2 * len(EPSILONS)  # AUROC and nested balanced accuracy per ε
    assert not diffs.keeps_utility.astype(bool).any()
    auroc_diffs = diffs[diffs.metric == "auroc"]
    assert (auroc_diffs.ci_low < 0).all() and (auroc_diffs.ci_high > 0).all()
    horizon = summary_row(summary, "horizon", "auroc_horizon_epsilon")  # no signal, no horizon: tested, and None
    assert math.isnan(horizon.value) and bool(horizon.horizon_tested)
    nested = summary_row(summary, "horizon", "balanced_accuracy_horizon_epsilon")  # the nested protocol ran on 1 seed
    assert math.isnan(nested.value) and not bool(nested.horizon_tested) and "fewer than 2" in nested.note


def test_signal_is_kept_at_large_epsilon_and_lost_at_small(tmp_path):
    """A learnable label: the baseline clears its permuted control, the ε = 50 release clears its null (so the
    horizon is 50), the ε = 0.5 release does not."""
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(12, int), np.zeros(12, int)]
    X = rng.normal(size=(24, 8)) + 2.0 * y[:, None] * np.r_[np.ones(4), np.zeros(4)]
    summary = _summary(X, y, tmp_path, clipped=False, nested_seeds=0)  # AUROC only: the nested fits cost 3x
    assert summary_row(summary, "baseline_minus_permuted").ci_low > 0
    assert summary_row(summary, "baseline").value > 0.9
    strong = summary_row(summary, "release_minus_null", epsilon=50.0)
    assert strong.ci_low > 0 and bool(strong.keeps_utility) and strong.p_adjusted < 0.05
    assert strong.alpha_tested == pytest.approx(0.05)  # one mechanism: α/1
    assert 0 < strong.p_mc_error < 0.01 and strong.p_value < strong.alpha_tested
    weak = summary_row(summary, "release_minus_null", epsilon=0.5)
    assert not bool(weak.keeps_utility) and weak.p_adjusted >= strong.p_adjusted  # monotone from the top
    horizon = summary_row(summary, "horizon", "auroc_horizon_epsilon")
    assert horizon.value == 50.0 and "fixed sequence from the largest ε, α/m per mechanism" in horizon.correction
    assert horizon.eps_covers == "features" and "labels travel in the clear" in horizon.eps_covers_note
    assert "scaling statistics are fitted on the private patients outside ε" in strong.eps_covers_note


def test_noise_is_independent_per_mechanism_epsilon_and_seed_unless_common_random_numbers():
    X = np.zeros((40, 30))  # zero signal: the release is the noise
    noise = {(m, e): release(X, m, e, 1e-5, 2.0, seed=0)[1].ravel()
             for m in ("gaussian_analytic", "gaussian_classic") for e in (0.5, 20.0)}
    r = np.corrcoef(noise[("gaussian_analytic", 0.5)], noise[("gaussian_analytic", 20.0)])[0, 1]
    assert abs(r) < 0.1  # not one draw rescaled
    r = np.corrcoef(noise[("gaussian_analytic", 0.5)], noise[("gaussian_classic", 0.5)])[0, 1]
    assert abs(r) < 0.1
    assert not np.array_equal(release(X, "gaussian_analytic", 1.0, 1e-5, 2.0, seed=0)[1],
                              release(X, "gaussian_analytic", 1.0, 1e-5, 2.0, seed=1)[1])
    shared = [release(X, "gaussian_analytic", e, 1e-5, 2.0, seed=0, common_random_numbers=True)[1].ravel()
              for e in (0.5, 20.0)]
    assert np.corrcoef(*shared)[0, 1] > 0.999  # the named option: one stream rescaled
    a = noise_generator("laplace_formal", 1.0, 4).standard_normal(5)
    assert np.array_equal(a, noise_generator("laplace_formal", 1.0, 4).standard_normal(5))  # deterministic


def test_every_arm_uses_one_threshold_grid(tmp_path):
    """The optimistic and nested thresholds of every arm (the noise-free scaled and clipped table included) come from
    the same grid (0.05..0.95)."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 6)), np.r_[np.ones(8, int), np.zeros(12, int)]
    cells = _cells(seeds=[0], epsilons=[1.0], permutations=1)
    assert {c.config["arm"] for c in cells} == {"baseline", "clipped", "permuted", "release", "matched_null"}
    for cell in cells:
        rows = utility_cell(dict(cell.config), cell.seed, X=X, y=y)
        thresholds = [r["value"] for r in rows if r.get("metric") == "threshold" and r["protocol"] == "optimistic"]
        assert thresholds and all(0.05 - 1e-9 <= t <= 0.95 + 1e-9 for t in thresholds)
        assert {r.get("protocol") for r in rows if "protocol" in r} >= {"threshold_free", "optimistic", "nested"}


def test_holm_and_bootstrap_p_values():
    assert np.allclose(holm([0.01, 0.04, 0.03, 0.5]), [0.04, 0.09, 0.09, 0.5])
    assert np.isnan(holm([np.nan, 0.01])[0]) and holm([np.nan, 0.01])[1] == pytest.approx(0.01)
    assert bootstrap_p_value(np.ones(99)) == pytest.approx(0.01)
    assert bootstrap_p_value(-np.ones(99)) == 1.0
    # two-sided: a difference far below 0 is as significant as one far above it
    assert bootstrap_p_value_two_sided(np.ones(99)) == pytest.approx(0.02)
    assert bootstrap_p_value_two_sided(-np.ones(99)) == pytest.approx(0.02)
    assert bootstrap_p_value_two_sided(np.r_[-np.ones(50), np.ones(49)]) == 1.0


def test_the_two_sided_bootstrap_test_holds_its_size_on_a_null_difference():
    """Replicates of a difference centred on 0 (the sampling distribution under the null, shifted by a null
    estimate): the two-sided test rejects at about α, split over both tails."""
    rng = np.random.default_rng(0)
    p = np.array([bootstrap_p_value_two_sided(rng.normal() + rng.normal(size=999)) for _ in range(2000)])
    assert 0.035 <= np.mean(p < 0.05) <= 0.065


def test_label_dp_trains_on_randomized_labels_and_scores_against_the_truth():
    """Label DP (randomized response) at ε_label = ∞ is the clear-label release exactly; at a tiny ε_label the
    models learn from coin flips, so the AUROC against the true labels falls toward chance."""
    rng = np.random.default_rng(5)
    y = np.r_[np.ones(10, int), np.zeros(10, int)]
    X = rng.normal(size=(20, 6)) + 3.0 * y[:, None] * np.r_[np.ones(3), np.zeros(3)]
    base = {"arm": "release", "mechanism": "gaussian_analytic", "epsilon": 50.0, "delta": 1e-5, "clip_norm": 2.0,
            "nested_seeds": 0, "nested_inner": 2}

    def auroc(config, seed=0):
        return next(r["value"] for r in utility_cell(config, seed, X=X, y=y) if r.get("metric") == "auroc")

    clear = auroc(base)
    assert auroc({**base, "label_epsilon": math.inf}) == clear
    noisy = np.mean([auroc({**base, "label_epsilon": 0.01}, seed) for seed in range(3)])
    assert clear > 0.9 and noisy < clear - 0.2
