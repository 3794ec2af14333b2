"""Issue 34, item 2: horizon tests that hold up.

The fixed-sequence horizon test (from the largest ε down at α/m, stopping at the first non-rejection), the
Monte-Carlo error of a bootstrap p-value, and study A's ``dp_utility`` summary built on them: α split over the
table's mechanisms, monotone decisions, ``decision_stable``, no horizon read off one seed, the noise-free scaled
and clipped arm, a permuted-label control of ``permutations`` seeds bootstrapped on its own labels, and what ε
covers beside every horizon. The summary tests write synthetic per-patient predictions straight into the cell
cache (no MLP is fitted), so they take well under a second each.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _summaries import summary_row

from eegprivacy.evaluation import fixed_sequence_horizon, p_value_mc_error
from eegprivacy.evaluation.cluster_bootstrap import bootstrap_indices
from eegprivacy.pipeline.sweep import Cell
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.utility import (
    HORIZON_CORRECTION,
    arm_table,
    per_seed_replicates,
    predictions_path,
    summarise,
    utility_plan,
)

REPO = Path(__file__).resolve().parents[1]


# --- fixed_sequence_horizon ----------------------------------------------------------------------------------------

def test_fixed_sequence_stops_at_the_first_non_rejection():
    # ε = 5 would reject on its own, but ε = 20 above it does not: the sequence never reaches it (no hole)
    horizon, decisions = fixed_sequence_horizon([1, 5, 20, 50], [0.5, 0.001, 0.2, 0.001], 0.05)
    assert horizon == 50.0 and decisions == [False, False, False, True]
    horizon, decisions = fixed_sequence_horizon([1, 5, 20, 50], [0.5, 0.001, 0.01, 0.001], 0.05)
    assert horizon == 5.0 and decisions == [False, True, True, True]


def test_fixed_sequence_is_monotone_and_independent_of_input_order():
    rng = np.random.default_rng(0)
    for _ in range(200):
        eps = rng.permutation([0.5, 1, 2, 5, 10, 20, 50, 100, 200]).astype(float)
        p = rng.uniform(0, 0.08, size=eps.size)
        horizon, decisions = fixed_sequence_horizon(eps, p, 0.025)
        kept = sorted(e for e, d in zip(eps, decisions) if d)
        # monotone: what is kept is every ε from the horizon up, nothing below it
        assert kept == sorted(e for e in eps if horizon is not None and e >= horizon)
        order = rng.permutation(eps.size)
        again, shuffled = fixed_sequence_horizon(eps[order], p[order], 0.025)
        assert again == horizon and shuffled == [decisions[i] for i in order]  # decisions follow the caller's order


def test_fixed_sequence_level_is_the_callers_alpha_split():
    eps, p = [10.0, 50.0], [0.03, 0.03]
    assert fixed_sequence_horizon(eps, p, 0.05) == (10.0, [True, True])
    assert fixed_sequence_horizon(eps, p, 0.05 / 2) == (None, [False, False])  # α/m with m = 2 mechanisms
    assert fixed_sequence_horizon(eps, [0.05, 0.0], 0.05) == (50.0, [False, True])  # p < α, strictly
    assert fixed_sequence_horizon(eps, [0.001, math.nan], 0.05) == (None, [False, False])  # NaN: not rejected
    assert fixed_sequence_horizon([], [], 0.05) == (None, [])
    with pytest.raises(ValueError):
        fixed_sequence_horizon([1.0, 2.0], [0.01], 0.05)
    with pytest.raises(ValueError):
        fixed_sequence_horizon([1.0], [0.01], 0.0)


def test_p_value_mc_error():
    assert p_value_mc_error(0.025, 10_000) == pytest.approx(math.sqrt(0.025 * 0.975 / 10_000))
    assert p_value_mc_error(0.0, 2000) == pytest.approx(1 / 2000)  # a floor, not a claim of no error
    assert p_value_mc_error(1.0, 2000) == pytest.approx(1 / 2000)
    assert math.isnan(p_value_mc_error(math.nan, 100))
    assert p_value_mc_error(0.5, 100) > p_value_mc_error(0.5, 10_000)
    with pytest.raises(ValueError):
        p_value_mc_error(0.5, 0)


# --- the dp_utility summary on synthetic per-patient predictions --------------------------------------------------

N_POS, N_NEG = 14, 16
Y = np.r_[np.ones(N_POS, int), np.zeros(N_NEG, int)]
BASE = {"nested_inner": 2, "clip_norm": 2.0, "delta": 1e-5}


def _predictions(strength: float, seed: int, labels: np.ndarray) -> np.ndarray:
    """Probabilities that separate ``labels`` with the given strength (0: pure noise)."""
    rng = np.random.default_rng(seed)
    return 1 / (1 + np.exp(-(strength * (2 * labels - 1) + rng.normal(size=labels.size))))


def _cache(folder: Path, signal: dict, *, seeds: int = 5, permutations: int = 6, nested_seeds: int = 5,
           epsilons=(1.0, 5.0, 20.0, 50.0)) -> list:
    """Cells of a table (baseline, clipped, permuted, release and null per mechanism and ε) with synthetic kept
    predictions: ``signal[(arm, mechanism, ε)]`` is the strength (release default: 0; null: 0)."""
    cells = []

    def add(arm, mechanism, epsilon, n_seeds, strength):
        for seed in range(n_seeds):
            cell = Cell({**BASE, "arm": arm, "mechanism": mechanism, "epsilon": float(epsilon),
                         "nested_seeds": nested_seeds}, seed)
            labels = np.random.default_rng([99, seed]).permutation(Y) if arm == "permuted" else Y
            code = abs(hash((arm, mechanism, float(epsilon)))) % 10_000
            proba = _predictions(strength, 1000 * code + seed, labels)
            nested = (proba > 0.5).astype(float) if seed < nested_seeds else np.full(Y.size, np.nan)
            path = predictions_path(folder, cell.key)
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, proba=proba, pred_optimistic=(proba > 0.5).astype(float), pred_nested=nested, y=labels)
            cells.append(cell)

    add("baseline", "none", math.inf, seeds, signal.get("baseline", 3.0))
    add("clipped", "none", math.inf, seeds, signal.get("clipped", 2.0))
    add("permuted", "permuted_labels", math.inf, permutations, 0.0)
    for mechanism in ("gaussian_analytic", "laplace_formal"):
        for epsilon in epsilons:
            add("release", mechanism, epsilon, seeds, signal.get((mechanism, epsilon), 0.0))
            add("matched_null", mechanism, epsilon, seeds, 0.0)
    return cells


def _summary(folder, cells, epsilons=(1.0, 5.0, 20.0, 50.0), n_resamples=2000):
    return summarise([(None, cells)], folder, Y, n_resamples=n_resamples, confidence=0.95, epsilons=list(epsilons))


def test_summary_horizon_is_a_fixed_sequence_at_alpha_over_m(tmp_path):
    """Two mechanisms: each sequence runs at 0.05 / 2; gaussian keeps utility at 50 and 20, not at 5 (so not at 1
    either, however strong its 1 is: the sequence stopped), laplace only at 50."""
    signal = {("gaussian_analytic", 50.0): 3.0, ("gaussian_analytic", 20.0): 3.0,
              ("gaussian_analytic", 1.0): 3.0, ("laplace_formal", 50.0): 3.0}
    summary = _summary(tmp_path, _cache(tmp_path, signal))
    diffs = summary[(summary.arm == "release_minus_null") & (summary.metric == "auroc")]
    assert np.allclose(diffs.alpha_tested, 0.025)
    assert diffs.correction.str.startswith(HORIZON_CORRECTION).all() and diffs.correction.str.contains("m = 2").all()
    kept = {(r.mechanism, r.epsilon) for r in diffs.itertuples() if r.keeps_utility}
    assert kept == {("gaussian_analytic", 50.0), ("gaussian_analytic", 20.0), ("laplace_formal", 50.0)}
    assert summary_row(summary, "release_minus_null", mechanism="gaussian_analytic", epsilon=1.0).p_value < 0.025
    # keeps_utility is p_adjusted < α, and p_adjusted only grows as ε falls
    assert (diffs.keeps_utility.astype(bool) == (diffs.p_adjusted < 0.05)).all()
    for _, mine in diffs.groupby("mechanism"):
        assert np.all(np.diff(mine.sort_values("epsilon", ascending=False).p_adjusted.to_numpy()) >= 0)
    assert summary_row(summary, "horizon", "auroc_horizon_epsilon", "gaussian_analytic").value == 20.0
    assert summary_row(summary, "horizon", "auroc_horizon_epsilon", "laplace_formal").value == 50.0
    # every p-value reports its Monte-Carlo error; far from α/m, no decision can flip
    assert np.allclose(diffs.p_mc_error, [p_value_mc_error(p, 2000) for p in diffs.p_value])
    strong = summary_row(summary, "release_minus_null", mechanism="laplace_formal", epsilon=50.0)
    assert bool(strong.decision_stable) == (abs(strong.p_value - 0.025) > 3 * strong.p_mc_error)
    horizon = summary_row(summary, "horizon", "auroc_horizon_epsilon", "laplace_formal")
    assert horizon.eps_covers == "features"
    assert horizon.eps_covers_note == ("features only: the scaling statistics are fitted on the private patients "
                                       "outside ε and the labels travel in the clear")


def test_summary_without_signal_has_no_horizon(tmp_path):
    summary = _summary(tmp_path, _cache(tmp_path, {"baseline": 0.0, "clipped": 0.0}))
    diffs = summary[summary.arm == "release_minus_null"]
    assert not diffs.keeps_utility.astype(bool).any()
    horizons = summary[summary.arm == "horizon"]
    assert len(horizons) == 4 and horizons.value.isna().all() and horizons.horizon_tested.astype(bool).all()
    for arm in ("baseline", "clipped", "permuted"):  # chance-level rows, intervals across 0.5
        row = summary_row(summary, arm)
        assert row.ci_low < 0.5 < row.ci_high and abs(row.value - 0.5) < 0.15


def test_no_horizon_from_one_nested_seed(tmp_path):
    """One seed ran the nested protocol: the balanced-accuracy horizon is "not tested", with the reason; AUROC (on
    every seed) is tested as usual."""
    signal = {("gaussian_analytic", 50.0): 3.0, ("laplace_formal", 50.0): 3.0}
    summary = _summary(tmp_path, _cache(tmp_path, signal, nested_seeds=1))
    for mechanism in ("gaussian_analytic", "laplace_formal"):
        ba = summary_row(summary, "horizon", "balanced_accuracy_horizon_epsilon", mechanism)
        assert math.isnan(ba.value) and not bool(ba.horizon_tested)
        assert "fewer than 2" in ba.note and "nested protocol ran on 1 seed" in ba.note
        diffs = summary[(summary.arm == "release_minus_null") & (summary.metric == "balanced_accuracy")
                        & (summary.mechanism == mechanism)]
        assert not diffs.keeps_utility.astype(bool).any() and diffs.p_adjusted.isna().all()
        auroc = summary_row(summary, "horizon", "auroc_horizon_epsilon", mechanism)
        assert auroc.value == 50.0 and bool(auroc.horizon_tested)


def test_clipped_arm_and_its_loss_are_in_the_summary(tmp_path):
    summary = _summary(tmp_path, _cache(tmp_path, {"baseline": 3.0, "clipped": 1.0}))
    clipped = summary_row(summary, "clipped")
    assert clipped.mechanism == "none" and clipped.ci_over == "subjects+seeds" and clipped.n_seeds == 5
    loss = summary_row(summary, "baseline_minus_clipped")
    assert loss.value > 0 and loss.ci_low <= loss.value <= loss.ci_high


def test_permuted_control_counts_and_bootstrap_on_its_own_labels(tmp_path):
    cells = _cache(tmp_path, {}, permutations=40)
    summary = _summary(tmp_path, cells)
    assert summary_row(summary, "permuted").n_seeds == 40
    permuted = [c for c in cells if c.config["arm"] == "permuted"]
    idx = bootstrap_indices(Y, 500)
    # every resample of every permutation keeps the class counts of the labels it is scored against
    _, positives, seeds = per_seed_replicates(tmp_path, permuted, "proba", lambda v, lab: lab.sum(-1), Y, idx,
                                              own_labels=True)
    assert len(seeds) == 40 and (positives == N_POS).all()
    # the true-label resamples would not (the old behaviour): a check that this test can fail
    labels = np.random.default_rng([99, 0]).permutation(Y)
    assert (labels[idx].sum(-1) != N_POS).any()


def test_plan_runs_the_permutations_and_the_clipped_arm():
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(6, 4, 3, seed=0)
    release = DPReleaseConfig.from_mapping({"clip_norm": 2.0, "delta": 1e-5, "epsilons": [1, 10],
                                            "mechanisms": ["gaussian_analytic"], "noise_seeds": 10,
                                            "datasets": {"synthetic_clinical": {"label": "label"}}})
    utility = DPUtilityConfig.from_mapping({"mechanisms": ["gaussian_analytic"], "baseline_mlp_seeds": 3,
                                            "nested_seeds": 2, "n_jobs": 1, "figure_epsilon": 10,
                                            "permutations": 40})
    plan = utility_plan(table, release, utility, "label", cells_dir="/nonexistent", progress=False)
    cells = [cell for _, group in plan for cell in group]
    by_arm = {arm: [c for c in cells if c.config["arm"] == arm] for arm in ("baseline", "clipped", "permuted",
                                                                            "release", "matched_null")}
    assert sorted(c.seed for c in by_arm["permuted"]) == list(range(40))
    assert sorted(c.seed for c in by_arm["clipped"]) == [0, 1, 2]
    assert {c.config["mechanism"] for c in by_arm["clipped"]} == {"none"}
    assert len(by_arm["release"]) == len(by_arm["matched_null"]) == 2 * 10
    X, y = table.X.to_numpy(), table.y
    first, second = (arm_table(c.config, c.seed, X, y)[1] for c in by_arm["permuted"][:2])
    assert not np.array_equal(first, second)  # each permutation its own seed
    clipped = [arm_table(c.config, c.seed, X, y)[0] for c in by_arm["clipped"][:2]]
    assert np.array_equal(*clipped)  # no noise: scaling and clipping only
    assert np.linalg.norm(clipped[0], axis=1).max() <= 2.0 + 1e-9 and not np.allclose(clipped[0], X)


def test_shipped_default_profile_meets_the_issue():
    """Issue 34: ≥ 10 noise seeds per cell, ≥ 40 permutations, a nested horizon from ≥ 2 seeds, and a bootstrap
    whose smallest p-value times the family is far below α and whose Monte-Carlo error near α/m is small."""
    release = DPReleaseConfig.load(REPO / "params/dp_release.yaml", "dp_release")
    utility = DPUtilityConfig.load(REPO / "params/dp_release.yaml", "dp_utility")
    assert release.noise_seeds >= 10 and utility.permutations >= 40 and utility.nested_seeds >= 2
    m = len(utility.mechanisms)
    alpha_m = (1 - utility.confidence) / m
    assert m / (1 + utility.bootstrap) < (1 - utility.confidence) / 10
    assert 3 * p_value_mc_error(alpha_m, utility.bootstrap) < alpha_m / 5


def test_study_a_report_prints_the_test_and_what_epsilon_covers_beside_every_horizon():
    """The report reads the summary run: ``p_adj`` beside each release − null, and each horizon with the test that
    decided it and one sentence on what its ε covers (from the run's tags)."""
    import pandas as pd

    from eegprivacy.reporting import study_reports as report
    from eegprivacy.reporting import study_runs

    note = ("features only: the scaling statistics are fitted on the private patients outside ε and the labels "
            "travel in the clear")
    prefix = "metrics.release_minus_null/gaussian_analytic/eps_50/threshold_free/auroc"
    run = {"run_id": "a" * 32, "tags.mlflow.runName": "dp_utility-msu_schizophrenia-summary",
           "tags.dataset": "msu_schizophrenia", "tags.dataset_version": "v" * 64, "tags.synthetic": "false",
           prefix: 0.12, f"{prefix}_ci_low": 0.05, f"{prefix}_ci_high": 0.2, f"{prefix}_p_adjusted": 0.0004,
           "metrics.clipped/threshold_free/auroc": 0.7,
           "tags.utility_horizon/gaussian_analytic/auroc": "50",
           "tags.utility_horizon/gaussian_analytic/balanced_accuracy": "not tested",
           "tags.utility_horizon_test": "fixed sequence from the largest ε, α/m per mechanism (m = 2, α = 0.05)",
           "tags.eps_covers": "features", "tags.eps_covers_note": note}
    rows = study_runs.tidy_a(pd.DataFrame([run]))
    assert "none, scaled + clipped (no noise)" in set(rows["mechanism"])
    text = report.render("a", rows, "sqlite:///x.db", None)
    assert "(p_adj 0.000)" in text and "p_Holm" not in text.split("## Utility horizons")[0].split("|", 1)[1]
    horizons = text.split("## Utility horizons")[1].split("## Runs")[0]
    assert "fixed sequence from the largest ε, α/m per mechanism (m = 2, α = 0.05)" in horizons
    assert f"| 50 | features | {note} |" in horizons
