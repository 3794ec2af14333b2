"""Study A's sample-size sweep (issue 47, SYNTHETIC): the generator's effect scale is calibrated to a target AUROC,
a cohort is a function of (n, seed), a no-signal generator keeps no utility, and the summary's power, horizon and
"patients needed" follow from the anchor's standard errors scaled by √(n_anchor / n)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from eegprivacy.data.feature_generator import FeatureTableGenerator
from eegprivacy.studies.release.config import ComponentSweep, DPEndToEndConfig, DPSampleSizeConfig
from eegprivacy.studies.release.sample_size import (
    calibrate_effect_scale,
    horizon_at,
    run_plan,
    sample_size_cell,
    sample_size_plan,
    summarise,
    synthetic_cohort,
)
from eegprivacy.studies.release.table import PatientTable


def _cohort(n=60, d=10, shift=1.0, seed=0):
    """SYNTHETIC: n patients × d features, the label shifting the first two features."""
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1], n // 2)
    X = rng.normal(size=(n, d))
    X[:, :2] += shift * (y[:, None] - 0.5) * 2
    return X, y


def _designs() -> DPEndToEndConfig:
    return DPEndToEndConfig(
        datasets=["toy"], mechanisms=["public_pls", "public_pca"], release_noise="gaussian_analytic",
        total_epsilons=[5.0, 50.0], noise_seeds=2, reference_seeds=2, mc_error_fraction=0.25, kfold_splits=3,
        power=0.8, pca_components=2, pls_components=1, dp_pca_components=2, dp_pca_fraction=0.5,
        synthesis_components=1, synthesis_bins=4, synthesis_pairs="label",
        component_sweep=ComponentSweep(mechanisms=["public_pca"], n_components=[1], total_epsilons=[5.0],
                                       noise_seeds=2), n_jobs=1)


def test_horizon_is_the_unbroken_run_of_powered_epsilons_from_the_top():
    assert horizon_at([1, 5, 10, 20], [0.9, 0.5, 0.85, 0.95], 0.8) == 10
    assert horizon_at([1, 5, 10, 20], [0.9, 0.9, 0.9, 0.9], 0.8) == 1
    assert math.isnan(horizon_at([1, 5, 10, 20], [0.99, 0.99, 0.99, 0.1], 0.8))


def test_a_cohort_is_a_function_of_n_and_seed():
    gen = FeatureTableGenerator(random_state=0).fit(*_cohort())
    a, b = synthetic_cohort(gen, 40, 3), synthetic_cohort(gen, 40, 3)
    np.testing.assert_array_equal(a[0], b[0]) and np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], synthetic_cohort(gen, 40, 4)[0])
    assert len(synthetic_cohort(gen, 80, 3)[1]) == 80


def test_the_effect_scale_is_fitted_to_the_target_auroc():
    gen = FeatureTableGenerator(random_state=0).fit(*_cohort(shift=1.5))
    scale, reached = calibrate_effect_scale(gen, 40, 0.75, draws=3, splits=3, steps=5)
    assert 0 < scale < 1 and gen.effect_scale == scale
    assert reached == pytest.approx(0.75, abs=0.06)


def test_power_mde_and_patients_needed_follow_the_anchor():
    """Hand-made rows: a mean difference of 0.1 at every n; the anchor's MDE 0.2 at n = 50 (so 0.1 at n = 200)."""
    rows = []
    for n in (50, 200, 800):
        for seed in range(4):
            for eps in (5.0, 10.0):
                rows.append({"arm": "matched_null", "mechanism": "public_pls", "n_private": n, "epsilon": eps,
                             "seed": seed, "value": 0.5})
                rows.append({"arm": "release", "mechanism": "public_pls", "n_private": n, "epsilon": eps,
                             "seed": seed, "value": 0.6 + 0.01 * (seed - 1.5)})
    anchor = pd.DataFrame({"mechanism": ["public_pls"] * 2, "epsilon": [5.0, 10.0], "mde": [0.2, 0.2]})
    summary = summarise(pd.DataFrame(rows), anchor, n_anchor=50, alpha=0.01, power=0.8, confidence=0.95,
                        targets=[10.0, 5.0, 1.0])
    diff = summary[summary.arm == "release_minus_null"].set_index(["n_private", "epsilon"])
    assert diff.loc[(50, 10.0), "value"] == pytest.approx(0.1)
    assert diff.loc[(200, 10.0), "mde"] == pytest.approx(0.1)
    assert diff.loc[(200, 10.0), "power"] == pytest.approx(0.8, abs=1e-9)  # the effect is the MDE at n = 200
    z = norm.ppf(0.99) + norm.ppf(0.8)
    assert diff.loc[(50, 10.0), "power"] == pytest.approx(norm.cdf(0.1 / (0.2 / z) - norm.ppf(0.99)))
    horizon = summary[summary.arm == "horizon"].set_index("n_private")["value"]
    assert math.isnan(horizon[50]) and horizon[200] == 5.0 and horizon[800] == 5.0
    needed = summary[summary.arm == "patients_needed"].set_index("epsilon")["value"]
    assert needed[10.0] == 200 and needed[5.0] == 200 and math.isnan(needed[1.0])


def test_a_no_signal_generator_keeps_no_utility(tmp_path):
    """SYNTHETIC, effect scale 0: the cells' baseline sits at chance under stratified k-fold and no release beats
    its matched null; through the stage's plan, cells and summary."""
    X, y = _cohort(n=60, d=8, shift=1.0)
    gen = FeatureTableGenerator(effect_scale=0.0, random_state=0).fit(X, y)
    X_public, y_public = _cohort(n=24, d=8, shift=1.0, seed=9)
    table = PatientTable("toy", "synthetic", "synthetic", True, pd.DataFrame(X[:40]), y[:40], np.arange(40))
    config = DPSampleSizeConfig(datasets=["toy"], designs=["public_pls"], n_patients=[40, 60], total_epsilons=[50.0],
                                seeds=4, horizon_targets=[10.0], calibration_draws=2, n_jobs=1)
    plan = sample_size_plan(table, config, _designs(), n_public=24, cells_dir=tmp_path / "cells", progress=False,
                            params={}, delta=1e-5, clip_norm=2.0, effect_scale=0.0)
    cell = lambda c, s: sample_size_cell(c, s, generator=gen, X_public=X_public, y_public=y_public)  # noqa: E731
    rows = pd.concat(run_plan(plan, cell, 1), ignore_index=True)
    assert set(rows.arm) == {"baseline", "noise_free", "release", "matched_null"}
    assert rows[rows.arm == "baseline"].value.mean() == pytest.approx(0.5, abs=0.08)
    anchor = pd.DataFrame({"mechanism": ["public_pls"], "epsilon": [50.0], "mde": [0.3]})
    summary = summarise(rows, anchor, n_anchor=40, alpha=0.05, power=0.8, confidence=0.95, targets=[10.0])
    diffs = summary[summary.arm == "release_minus_null"]
    assert (diffs.ci_low <= 0).all() and (diffs.ci_high >= 0).all()
    assert math.isnan(summary[summary.arm == "patients_needed"].value.iloc[0])


def test_the_learning_sentence_does_not_depend_on_the_order_of_the_runs():
    """The store returns runs in any order; the sentence lists no-DP first, then each noise-free design."""
    from eegprivacy.reporting.sample_size import learning_lines

    rows = pd.DataFrame([{"arm": arm, "mechanism": mech, "n": n, "value": v}
                         for arm, mech, v0 in (("noise_free", "public_pls", 0.68), ("baseline", "none", 0.8))
                         for n, v in ((56, v0), (112, v0 + 0.01))])
    lines = learning_lines(rows)
    assert lines == learning_lines(rows.iloc[::-1]) and lines[0].index("no-DP") < lines[0].index("noise-free")
