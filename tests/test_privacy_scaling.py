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
from eegprivacy.studies.release.scaling import (
    SOURCES,
    budget,
    predictions_dir,
    scaling_cell,
    scaling_release,
    scaling_sweeps,
    split_cohort,
)
from eegprivacy.studies.release.scaling_summary import summarise, summary_path
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
# Only the label, clip_norm, delta and common_random_numbers are read from study A's release params; the rest
# completes the section.
RELEASE = DPReleaseConfig.from_mapping({"clip_norm": 2.0, "delta": 1.0e-5, "epsilons": [1],
                                        "mechanisms": ["gaussian_analytic"], "noise_seeds": 1,
                                        "datasets": {"synthetic_clinical": {"label": "label"}}})
def _run_stage(table, config: dict, folder, *, n_resamples: int = 400,
               confidence: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The dp_scaling stage on ``table``: its tidy rows and its summary rows, as their CSVs read back."""
    plan, frames, cohorts = scaling_sweeps(table, DPScalingConfig.from_mapping(config), RELEASE, "label",
                                           cells_dir=folder / "cells", progress=False)
    metrics = folder / "metrics"
    write_rows(frames, metrics / "dp_scaling_synthetic_clinical.csv")
    summary = summarise(plan, predictions_dir(folder / "cells", table.dataset), cohorts.private.y,
                        n_resamples=n_resamples, confidence=confidence)
    summary = summary.assign(dataset=table.dataset, dataset_version=table.dataset_version, synthetic=table.synthetic,
                             n_public=cohorts.n_public, n_features=int(table.X.shape[1]), eps_unit="subject")
    write_rows([summary], summary_path(metrics, table.dataset))
    return (pd.read_csv(metrics / "dp_scaling_synthetic_clinical.csv"),
            pd.read_csv(summary_path(metrics, table.dataset)))


def _cell_config(source: str, total: float, mechanism: str = "gaussian_analytic") -> dict:
    delta = make_mechanism(mechanism, 1.0, 1e-5).delta
    return {"mechanism": mechanism, "scaling_source": source, "delta": delta, "clip_norm": 2.0,
            **budget(source, total, delta, 0.2)}


def test_split_cohort_is_seeded_stratified_and_disjoint():
    y = np.array([0] * 12 + [1] * 6)
    public, private = split_cohort(y, 1 / 3, 0)
    assert len(public) == 6 and len(private) == 12 and not set(public) & set(private)
    assert y[public].sum() == 2 and y[private].sum() == 4
    np.testing.assert_array_equal(split_cohort(y, 1 / 3, 0)[0], public)
    with pytest.raises(ValueError):
        split_cohort(np.array([0] * 10 + [1]), 0.3, 0)  # one class would be missing from a part


def test_epsilon_cells_draw_independent_noise_and_sources_share_a_draw(cohorts):
    """Each total ε draws its own noise (not one draw rescaled); the private and public-reference sources at one
    (mechanism, ε, seed) share theirs (the paired design); a release and its matched null share theirs."""
    public, private = cohorts
    reference, bounds = PublicReferenceScaler().fit(public), public_bounds(public)

    def noise(source, total, X=private, seed=0):
        releaser, released = scaling_release(_cell_config(source, total), seed, X, reference, bounds)
        return (released - releaser.clipped_) / releaser.release_info()["noise_scale"]  # the standardised draw

    draws = [noise("private", eps) for eps in (1.0, 5.0, 10.0)]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert abs(np.corrcoef(draws[a].ravel(), draws[b].ravel())[0, 1]) < 0.5  # independent, not rescaled
    assert not np.allclose(noise("private", 5.0, seed=1), draws[1])  # and every seed its own
    np.testing.assert_allclose(noise("public_reference", 5.0), draws[1])  # same release ε: the same draw
    np.testing.assert_allclose(noise("private", 5.0, X=np.zeros_like(private)), draws[1])  # the matched null's
    np.testing.assert_allclose(noise("dp_quantiles", 5.0, X=np.zeros_like(private)), noise("dp_quantiles", 5.0))
    assert abs(np.corrcoef(noise("dp_quantiles", 5.0).ravel(), draws[1].ravel())[0, 1]) < 0.5  # release ε 4


def test_matched_null_is_a_zero_signal_table(cohorts):
    """Every source maps the zero table to one row repeated (no patient differs from another before the noise)."""
    public, private = cohorts
    reference, bounds = PublicReferenceScaler().fit(public), public_bounds(public)
    for source in SOURCES:
        releaser, _ = scaling_release(_cell_config(source, 5.0), 0, np.zeros_like(private), reference, bounds)
        assert np.ptp(releaser.clipped_, axis=0).max() == 0.0, source


def test_every_arm_uses_the_one_threshold_grid(cohorts, monkeypatch):
    """The no-DP reference, a release and its matched null all choose thresholds from THRESHOLD_GRID (the paper
    used a narrower grid for the non-private row)."""
    from eegprivacy.studies.release import scaling
    from eegprivacy.studies.release.utility import THRESHOLD_GRID

    grids = []

    class Recording(scaling.LOSOEvaluation):
        def __init__(self, **kwargs):
            grids.append(kwargs["threshold_grid"])
            super().__init__(**kwargs)

    monkeypatch.setattr(scaling, "LOSOEvaluation", Recording)
    public, private = cohorts
    y = np.arange(len(private)) % 2
    kwargs = dict(X=private, y=y, groups=np.arange(len(y)), reference=PublicReferenceScaler().fit(public),
                  bounds=public_bounds(public), private_stats=RobustFeatureScaler().fit(private))
    for arm in ("baseline", "release", "matched_null"):
        scaling_cell({**_cell_config("private", 5.0), "arm": arm}, 0, **kwargs)
    assert len(grids) == 3 and all(np.array_equal(g, THRESHOLD_GRID) for g in grids)


@pytest.mark.slow
def test_dp_scaling_stage_end_to_end(tmp_path):
    from _patient_tables import synthetic_patient_table

    from eegprivacy.cli import main

    table = synthetic_patient_table(24, 12, 5, seed=0)
    table.X.loc[:, :] = table.X.to_numpy() + 2.0 * table.y[:, None]  # a 3-SD label shift: learnable through DP
    rows, summary = _run_stage(table, TINY["dp_scaling"], tmp_path)
    assert {"arm", "scaling_source", "total_epsilon", "release_epsilon", "scaling_epsilon", "end_to_end"} <= set(rows)
    cells = rows.drop_duplicates(["arm", "mechanism", "scaling_source", "seed"]).set_index(
        ["arm", "mechanism", "scaling_source", "seed"])
    assert len(cells) == 2 + 2 * 2 * 3 * 2  # baseline × seeds + (release, null) × mechanisms × sources × seeds
    dpq = cells.loc[("release", "gaussian_analytic", "dp_quantiles", 0)]
    assert (dpq.scaling_epsilon, dpq.release_epsilon, dpq.total_epsilon) == pytest.approx((10.0, 40.0, 50.0))
    assert bool(dpq.end_to_end) and not bool(cells.loc[("release", "gaussian_analytic", "private", 0)].end_to_end)
    assert bool(cells.loc[("matched_null", "laplace_formal", "public_reference", 1)].end_to_end)
    assert rows.n_patients.iloc[0] == 24 and rows.n_public.iloc[0] == 12  # the public cohort is never evaluated
    ba = rows[rows.metric == "balanced_accuracy"]
    assert set(ba.protocol) == {"optimistic"} and ba.value.between(0, 1).all()
    auroc = rows[rows.metric == "auroc"]
    assert set(auroc.protocol) == {"threshold_free"} and len(auroc) == len(cells)  # every cell, baseline included
    assert rows[(rows.arm == "matched_null") & (rows.protocol == "intrinsic")].empty  # diagnostics: releases only

    # the summary: intervals over patients and seeds; a learnable table at ε = 50 clears its null
    diff = summary[(summary.arm == "release_minus_null") & (summary.metric == "auroc")]
    assert len(diff) == 2 * 3 and (diff.ci_over == "subjects+seeds").all() and (diff.n_seeds == 2).all()
    assert (diff.ci_low <= diff.value).all() and (diff.value <= diff.ci_high).all()
    assert diff.correction.str.startswith("fixed sequence from the largest ε").all()
    assert diff.correction.str.contains("m = 6").all() and np.allclose(diff.alpha_tested, 0.05 / 6)
    assert (diff.p_mc_error > 0).all()
    private = diff[(diff.scaling_source == "private") & (diff.mechanism == "gaussian_analytic")].iloc[0]
    assert private.ci_low > 0 and bool(private.keeps_utility)
    cost = summary[(summary.arm == "cost_vs_private") & (summary.metric == "auroc")]
    assert set(cost.scaling_source) == {"public_reference", "dp_quantiles"} and len(cost) == 4
    release = summary[(summary.arm == "release") & (summary.metric == "auroc")].set_index(["mechanism",
                                                                                          "scaling_source"])
    for r in cost.itertuples():
        assert r.value == pytest.approx(release.loc[(r.mechanism, "private")].value
                                        - release.loc[(r.mechanism, r.scaling_source)].value)

    client = mlflow.MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("study-a-dp-release").experiment_id], max_results=100)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags and r.data.tags["mechanism"] != "none"]
    assert len(children) == 24
    for child in children:
        tags = child.data.tags
        assert float(tags["epsilon"]) == 50.0 and tags["synthetic"] == "true"  # the total ε
        assert float(tags["delta"]) == (1e-5 if tags["mechanism"] == "gaussian_analytic" else 0.0)
        assert tags["defense"].startswith("scaling_")

    metrics_dir, params = tmp_path / "metrics", tmp_path / "dp_scaling.yaml"
    params.write_text(yaml.safe_dump(TINY))
    assert main(["dp-scaling-aggregate", "--params", str(params), "--metrics-dir", str(metrics_dir),
                 "--figures-dir", str(tmp_path / "fig"), "--plots-dir", str(tmp_path / "plots")]) == 0
    headline = json.loads((metrics_dir / "dp_scaling.json").read_text())["synthetic_clinical"]
    assert headline["n_private_patients"] == 24 and headline["n_public_patients"] == 12
    entry = headline["results"]["gaussian_analytic"]["dp_quantiles"]["epsilon_50"]
    assert entry["total_epsilon"] == 50.0 and entry["end_to_end"] is True
    assert set(entry["auroc"]) == {"release", "matched_null", "release_minus_null", "cost_vs_private"}
    assert headline["intervals"] == {"ci_over": "subjects+seeds", "confidence": 0.95, "n_patients": 24, "n_seeds": 2}
    assert headline["corrections"]["release_minus_null"] == ("fixed sequence from the largest ε, α/m per (mechanism, "
                                                             "scaling source) (m = 6, α = 0.05)")
    assert isinstance(entry["auroc"]["cost_vs_private"]["costs_utility"], bool)
    paper = headline["results"]["gaussian_analytic"]["private"]["epsilon_50"]
    assert paper["end_to_end"] is False and "cost_vs_private" not in paper["auroc"]
    assert paper["auroc"]["release_minus_null"]["keeps_utility"] is True
    assert headline["utility_horizons"]["gaussian_analytic"]["private"]["auroc"] == 50.0
    assert headline["baseline_no_dp_private_cohort"]["auroc"]["value"] > 0.5
    plot = pd.read_csv(tmp_path / "plots" / "dp_scaling.csv")
    assert {"auroc", "total_epsilon", "arm"} <= set(plot) and set(plot.arm) == {"release", "matched_null",
                                                                                "release_minus_null"}
    assert (tmp_path / "fig" / "dp_scaling.png").stat().st_size > 0


@pytest.mark.slow
def test_a_zero_signal_table_sits_at_its_matched_null(tmp_path):
    """No signal in the table (features independent of the label): no source keeps utility under the table's
    fixed-sequence horizon test, and at the table's family-wise level (Bonferroni over its 6 cells per metric) every
    release − null interval covers 0 (single 95% intervals may miss 0 now and then: that is what the correction
    is for). At ε = 50 the noise hides least of the table: the hardest case for a null built from zeros."""
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(24, 12, 5, seed=3)
    table.X.loc[:, :] = np.random.default_rng(3).normal(size=table.X.shape)  # the label-shift removed
    config = {**TINY["dp_scaling"], "mechanisms": ["gaussian_analytic"], "total_epsilons": [5, 50],
              "noise_seeds": 3}
    _, summary = _run_stage(table, config, tmp_path, n_resamples=1000, confidence=1 - 0.05 / 6)
    diff = summary[summary.arm == "release_minus_null"]
    assert len(diff) == 2 * 3 * 2  # metrics × sources × ε
    assert ((diff.ci_low <= 0) & (diff.ci_high >= 0)).all(), diff[["scaling_source", "epsilon", "metric", "value",
                                                                   "ci_low", "ci_high"]]
    assert not diff.keeps_utility.astype(str).eq("True").any()
    assert (diff.p_value >= diff.alpha_tested).any() and diff.correction.str.startswith("fixed sequence").all()
    horizons = summary[summary.arm == "horizon"]
    assert len(horizons) == 2 * 3 and horizons.value.isna().all()


@pytest.mark.slow
def test_dp_scaling_rows_do_not_depend_on_the_number_of_processes(tmp_path):
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(12, 6, 5, seed=1)
    tables = {n_jobs: _run_stage(table, {**TINY["dp_scaling"], "mechanisms": ["laplace_formal"], "n_jobs": n_jobs},
                                 tmp_path / f"jobs{n_jobs}") for n_jobs in (1, 2)}
    assert set(tables[1][0]["scaling_source"]) == {"none", "private", "public_reference", "dp_quantiles"}
    pd.testing.assert_frame_equal(tables[1][0], tables[2][0])
    pd.testing.assert_frame_equal(tables[1][1], tables[2][1])
