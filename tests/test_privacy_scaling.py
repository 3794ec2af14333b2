"""Scaling statistics that keep the release's guarantee end to end (public reference, DP quantiles), the budget
accounting that composes them with the release, and the dp-scaling stage on a tiny in-memory cohort."""

from __future__ import annotations

import json
import math
import warnings

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from diffprivlib.accountant import BudgetAccountant
from diffprivlib.tools import quantile
from sklearn.base import clone

from eegprivacy.privacy import DPFeatureReleaser, RobustFeatureScaler, make_mechanism
from eegprivacy.privacy.accounting import basic_composition, split_budget
from eegprivacy.privacy.scaling import DPQuantileScaler, PublicReferenceScaler, public_bounds
from eegprivacy.studies.release.config import DPReleaseConfig, DPScalingConfig
from eegprivacy.studies.release.scaling import scaling_sweeps, split_cohort
from eegprivacy.studies.release.table import write_rows


@pytest.fixture
def cohorts():
    """A 'public' and a 'private' table from different distributions, so their statistics visibly differ."""
    rng = np.random.default_rng(7)
    public = rng.normal(10.0, 3.0, size=(15, 6))
    private = rng.normal(12.0, 5.0, size=(20, 6))
    return public, private


# --- public reference ------------------------------------------------------------------------------------------

def test_public_scaler_matches_robust_scaler(cohorts):
    public, _ = cohorts
    ours, robust = PublicReferenceScaler().fit(public), RobustFeatureScaler().fit(public)
    np.testing.assert_array_equal(ours.center_, robust.center_)
    np.testing.assert_array_equal(ours.scale_, robust.scale_)
    np.testing.assert_array_equal(ours.transform(public), robust.transform(public))
    constant = np.ones((5, 2))  # the IQR floor is the robust scaler's: a constant feature is centred, not blown up
    np.testing.assert_array_equal(PublicReferenceScaler().fit(constant).scale_, [1.0, 1.0])


def test_releaser_uses_fitted_public_stats_unchanged(cohorts):
    public, private = cohorts
    reference = PublicReferenceScaler().fit(public)
    center, scale = reference.center_.copy(), reference.scale_.copy()
    releaser = DPFeatureReleaser(make_mechanism("gaussian_analytic", 5.0, 1e-5), random_state=0, scaler=reference)
    releaser.fit(private)
    assert releaser.scaler_ is reference  # used as is, not cloned and refitted on the private table
    np.testing.assert_array_equal(releaser.center_, center)
    np.testing.assert_array_equal(reference.center_, center)  # and not mutated by the private fit
    assert not np.allclose(releaser.center_, RobustFeatureScaler().fit(private).center_)
    np.testing.assert_allclose(releaser.scaled_, (private - center) / scale)
    info = releaser.release_info()
    assert info["scaling_source"] == "public_reference"
    assert info["end_to_end_guarantee"] is True and info["scaling_epsilon"] == 0.0
    assert info["scaling_data_dependent"] is False and info["scaling_reference_patients"] == 15
    # the paper's default still says it has no end-to-end guarantee
    default = DPFeatureReleaser(make_mechanism("gaussian_analytic", 5.0, 1e-5), random_state=0).fit(private)
    assert default.release_info()["end_to_end_guarantee"] is False


def test_unfitted_public_scaler_is_never_fitted_on_private_data(cohorts):
    public, private = cohorts
    releaser = DPFeatureReleaser(make_mechanism("gaussian_analytic", 5.0, 1e-5), scaler=PublicReferenceScaler())
    with pytest.raises(ValueError, match="public reference cohort"):
        releaser.fit(private)  # the releaser would clone it and fit the clone on the private table
    fitted = PublicReferenceScaler().fit(public)
    copy = clone(DPFeatureReleaser(make_mechanism("gaussian_analytic", 5.0, 1e-5), scaler=fitted)).fit(private)
    np.testing.assert_array_equal(copy.center_, fitted.center_)  # cloning a releaser keeps the public statistics


def test_public_bounds_cover_public_data_with_margin():
    X = np.array([[0.0, 5.0], [10.0, 5.0]])
    low, high = public_bounds(X, margin=0.1)
    np.testing.assert_allclose(low, [-1.0, 4.5])  # constant feature: range max(|5|, 1) = 5
    np.testing.assert_allclose(high, [11.0, 5.5])
    with pytest.raises(ValueError):
        public_bounds(X, margin=-0.1)
    with pytest.raises(ValueError):
        public_bounds(np.array([[np.nan, 1.0]]))


# --- DP quantiles -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bounds", [
    None,                                               # diffprivlib would take min/max of the private data
    (np.zeros(6),),                                     # not a pair
    (np.zeros(5), np.ones(5)),                          # wrong number of features
    (np.ones(6), np.zeros(6)),                          # low above high
    (np.zeros(6), np.full(6, np.inf)),                  # not finite
])
def test_dp_quantiles_refuse_missing_or_invalid_bounds(cohorts, bounds):
    _, private = cohorts
    with pytest.raises(ValueError):
        DPQuantileScaler(1.0, bounds, random_state=0).fit(private)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_dp_quantiles_refuse_invalid_epsilon(cohorts, epsilon):
    public, private = cohorts
    with pytest.raises(ValueError):
        DPQuantileScaler(epsilon, public_bounds(public), random_state=0).fit(private)


def test_dp_quantiles_seeded_and_no_leak_warning(cohorts):
    public, private = cohorts
    bounds = public_bounds(public, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # diffprivlib's PrivacyLeakWarning (or any other) would fail the test
        a = DPQuantileScaler(1.0, bounds, random_state=3).fit(private)
        b = clone(a).fit(private)
        c = DPQuantileScaler(1.0, bounds, random_state=4).fit(private)
    np.testing.assert_array_equal(a.center_, b.center_)
    np.testing.assert_array_equal(a.scale_, b.scale_)
    assert not np.array_equal(a.center_, c.center_)
    assert np.all(a.scale_ > 0)  # sorted quantiles never give a negative IQR
    np.testing.assert_allclose(a.transform(private), (private - a.center_) / a.scale_)


def test_dp_quantiles_converge_to_true_median_and_iqr():
    rng = np.random.default_rng(0)
    X = rng.normal([0.0, 100.0, 1e-3], [1.0, 20.0, 1e-4], size=(2001, 3))  # incl. a small-unit feature
    bounds = (np.array([-10.0, 0.0, 0.0]), np.array([10.0, 200.0, 2e-3]))
    robust = RobustFeatureScaler().fit(X)
    precise = DPQuantileScaler(1e6, bounds, random_state=0).fit(X)
    assert np.all(np.abs(precise.center_ - robust.center_) < 0.02 * robust.scale_)
    np.testing.assert_allclose(precise.scale_, robust.scale_, rtol=0.02)
    # at a tiny ε the answer is close to a draw from the bounds: far worse than the high-ε one
    errors = [np.abs(DPQuantileScaler(1e-3, bounds, random_state=s).fit(X).center_ - robust.center_) / robust.scale_
              for s in range(5)]
    assert np.mean(errors) > 10 * np.mean(np.abs(precise.center_ - robust.center_) / robust.scale_)


def test_dp_quantiles_spend_epsilon_over_3d_per_query(cohorts, monkeypatch):
    """The docstring's split is what diffprivlib's mechanisms actually receive: 3·d draws at ε/(3d), summing to ε."""
    import diffprivlib.tools.quantiles as quantiles_module

    seen = []
    original = quantiles_module.Exponential

    class Recording(original):
        def __init__(self, *, epsilon, **kwargs):
            seen.append(epsilon)
            super().__init__(epsilon=epsilon, **kwargs)

    monkeypatch.setattr(quantiles_module, "Exponential", Recording)
    public, private = cohorts
    d = private.shape[1]
    scaler = DPQuantileScaler(1.2, public_bounds(public), random_state=0).fit(private)
    assert len(seen) == scaler.n_queries_ == 3 * d
    np.testing.assert_allclose(seen, 1.2 / (3 * d))
    assert scaler.epsilon_per_query_ == pytest.approx(1.2 / (3 * d))
    assert scaler.epsilon_spent_ == pytest.approx(1.2) and math.fsum(seen) == pytest.approx(1.2)
    info = scaler.scaling_info()
    assert info["scaling_source"] == "dp_quantiles" and info["scaling_epsilon"] == 1.2
    assert info["scaling_data_dependent"] is True and info["end_to_end_guarantee"] is True


def test_diffprivlib_splits_quantile_list_and_axis_once():
    """diffprivlib itself: a list of q quantiles over axis 0 of d columns is q·d spends of ε/(q·d), no more."""
    accountant = BudgetAccountant()
    X = np.random.default_rng(0).uniform(size=(30, 4))
    quantile(X, [0.25, 0.5, 0.75], epsilon=0.6, bounds=(np.zeros(4), np.ones(4)), axis=0, random_state=0,
             accountant=accountant)
    spent = [e for e, _ in accountant.spent_budget]
    assert len(spent) == 12 and np.allclose(spent, 0.05)
    assert accountant.total()[0] == pytest.approx(0.6)


# --- accounting and the composed release -----------------------------------------------------------------------

def test_basic_composition_and_split():
    assert basic_composition((0.2, 0.0), (0.8, 1e-5)) == pytest.approx((1.0, 1e-5))
    assert basic_composition(0.5, 0.25, (1.0, 1e-6)) == pytest.approx((1.75, 1e-6))
    scaling, release = split_budget(10.0, 0.2)
    assert (scaling, release) == pytest.approx((2.0, 8.0))
    assert basic_composition(scaling, release)[0] == pytest.approx(10.0)
    for bad in [(), ((-1.0, 0.0),), ((1.0, 1.0),), ((math.inf, 0.0),), ((1.0, 0.6), (1.0, 0.6))]:
        with pytest.raises(ValueError):
            basic_composition(*bad)
    for fraction in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            split_budget(1.0, fraction)
    with pytest.raises(ValueError):
        split_budget(0.0, 0.5)


def test_release_with_dp_quantiles_totals_by_composition(cohorts):
    public, private = cohorts
    total, delta = 5.0, 1e-5
    scaling_eps, release_eps = split_budget(total, 0.2)
    unfitted = DPQuantileScaler(scaling_eps, public_bounds(public), random_state=1)
    releaser = DPFeatureReleaser(make_mechanism("gaussian_analytic", release_eps, delta), random_state=0,
                                 scaler=unfitted).fit(private)
    assert releaser.scaler_ is not unfitted and not hasattr(unfitted, "center_")  # cloned, fitted on private X
    np.testing.assert_array_equal(releaser.center_, clone(unfitted).fit(private).center_)
    info = releaser.release_info()
    assert info["end_to_end_guarantee"] is True and info["formal_guarantee"] is True
    composed = basic_composition((info["scaling_epsilon"], 0.0), (info["epsilon"], info["delta"]))
    assert composed == pytest.approx((total, delta))


# --- the stage on a tiny cohort ---------------------------------------------------------------------------------

TINY = {"dp_scaling": {"datasets": ["synthetic_clinical"], "public_fraction": 0.3333, "split_seed": 0,
                       "bounds_margin": 0.1, "mechanisms": ["gaussian_analytic", "laplace_formal"],
                       "total_epsilons": [50], "scaling_fraction": 0.2, "noise_seeds": 2, "n_jobs": 1}}
# Only clip_norm, delta and the label are read from study A's release params; the rest completes the section.
RELEASE = DPReleaseConfig.from_mapping({"clip_norm": 2.0, "delta": 1.0e-5, "epsilons": [1],
                                        "mechanisms": ["gaussian_analytic"], "noise_seeds": 1,
                                        "datasets": {"synthetic_clinical": {"label": "label"}}})


def _scaling_rows(table, config: dict, folder) -> pd.DataFrame:
    """The dp_scaling stage's tidy rows of ``table`` (as its CSV reads back)."""
    frames, _ = scaling_sweeps(table, DPScalingConfig.from_mapping(config), RELEASE, "label",
                               cells_dir=folder / "cells", progress=False)
    write_rows(frames, folder / "metrics" / "dp_scaling_synthetic_clinical.csv")
    return pd.read_csv(folder / "metrics" / "dp_scaling_synthetic_clinical.csv")


def test_split_cohort_is_seeded_stratified_and_disjoint():
    y = np.array([0] * 12 + [1] * 6)
    public, private = split_cohort(y, 1 / 3, 0)
    assert len(public) == 6 and len(private) == 12 and not set(public) & set(private)
    assert y[public].sum() == 2 and y[private].sum() == 4
    np.testing.assert_array_equal(split_cohort(y, 1 / 3, 0)[0], public)
    with pytest.raises(ValueError):
        split_cohort(np.array([0] * 10 + [1]), 0.3, 0)  # one class would be missing from a part


@pytest.mark.slow
def test_dp_scaling_stage_end_to_end(tmp_path):
    from _patient_tables import synthetic_patient_table

    from eegprivacy.cli import main

    table = synthetic_patient_table(12, 6, 5, seed=0)
    rows = _scaling_rows(table, TINY["dp_scaling"], tmp_path)
    assert {"scaling_source", "total_epsilon", "release_epsilon", "scaling_epsilon", "end_to_end"} <= set(rows)
    cells = rows.drop_duplicates(["mechanism", "scaling_source", "seed"]).set_index(["mechanism", "scaling_source",
                                                                                       "seed"])
    assert len(cells) == 2 + 2 * 3 * 2  # no-DP baseline × seeds + mechanisms × sources × seeds
    dpq = cells.loc[("gaussian_analytic", "dp_quantiles", 0)]
    assert (dpq.scaling_epsilon, dpq.release_epsilon, dpq.total_epsilon) == pytest.approx((10.0, 40.0, 50.0))
    assert bool(dpq.end_to_end) and not bool(cells.loc[("gaussian_analytic", "private", 0)].end_to_end)
    assert bool(cells.loc[("laplace_formal", "public_reference", 1)].end_to_end)
    assert rows.n_patients.iloc[0] == 12 and rows.n_public.iloc[0] == 6  # the public cohort is never evaluated
    ba = rows[rows.metric == "balanced_accuracy"]
    assert set(ba.protocol) == {"optimistic"} and ba.value.between(0, 1).all()

    client = mlflow.MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("study-a-dp-release").experiment_id], max_results=100)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags and r.data.tags["mechanism"] != "none"]
    assert len(children) == 12
    for child in children:
        tags = child.data.tags
        assert float(tags["epsilon"]) == 50.0 and tags["synthetic"] == "true"  # the total ε
        assert float(tags["delta"]) == (1e-5 if tags["mechanism"] == "gaussian_analytic" else 0.0)
        assert tags["defense"].startswith("scaling_")

    metrics_dir, params = tmp_path / "metrics", tmp_path / "dp_scaling.yaml"
    params.write_text(yaml.safe_dump(TINY))
    assert main(["dp-scaling-aggregate", "--params", str(params), "--metrics-dir", str(metrics_dir),
                 "--figures-dir", str(tmp_path / "fig"), "--plots-dir", str(tmp_path / "plots")]) == 0
    summary = json.loads((metrics_dir / "dp_scaling.json").read_text())["synthetic_clinical"]
    entry = summary["results"]["gaussian_analytic"]["dp_quantiles"]["epsilon_50"]
    assert entry["total_epsilon"] == 50.0 and entry["end_to_end"] is True and entry["balanced_accuracy"]["n"] == 2
    assert "utility_cost_vs_private_scaling" in entry
    assert summary["results"]["gaussian_analytic"]["private"]["epsilon_50"]["end_to_end"] is False
    assert (tmp_path / "fig" / "dp_scaling.png").stat().st_size > 0


@pytest.mark.slow
def test_dp_scaling_rows_do_not_depend_on_the_number_of_processes(tmp_path):
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(12, 6, 5, seed=1)
    tables = {n_jobs: _scaling_rows(table, {**TINY["dp_scaling"], "mechanisms": ["laplace_formal"], "n_jobs": n_jobs},
                                    tmp_path / f"jobs{n_jobs}") for n_jobs in (1, 2)}
    assert set(tables[1]["scaling_source"]) == {"none", "private", "public_reference", "dp_quantiles"}
    pd.testing.assert_frame_equal(tables[1], tables[2])
