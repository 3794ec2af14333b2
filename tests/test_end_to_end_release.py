"""Study A's end-to-end private releases (issue 34): projections fitted on public patients or paid for in ε, DP-PCA's
composition, the public split kept out of every evaluation, a planted low-dimensional signal, and a no-signal input
that must stay at chance."""

from __future__ import annotations

import math
import re

import dp_accounting
import numpy as np
import pandas as pd
import pytest

from eegprivacy.privacy import make_mechanism
from eegprivacy.privacy.mechanisms import gaussian_sigma
from eegprivacy.privacy.projection import (
    AnalyzeGaussPCA,
    ProjectedReleaser,
    PublicProjection,
    composed_epsilon,
    second_moment_sensitivity,
)
from eegprivacy.privacy.scaling import PublicReferenceScaler
from eegprivacy.studies.release.config import ComponentSweep, DPEndToEndConfig, DPReleaseConfig, PatientLabel
from eegprivacy.studies.release.end_to_end import (
    DESIGNS,
    budget,
    end_to_end_cell,
    end_to_end_cohorts,
    end_to_end_sweeps,
    exact_total,
    log_summary,
    pld_total,
    predictions_dir,
    summarise,
)
from eegprivacy.studies.release.table import PatientTable


def _config(**overrides) -> DPEndToEndConfig:
    values = dict(datasets=["synthetic_planted"], mechanisms=["paper_public_scaling", "public_pls"],
                  release_noise="gaussian_analytic", total_epsilons=[5.0], noise_seeds=2, noise_seeds_high=2,
                  reference_seeds=2,
                  mc_error_fraction=0.25, kfold_splits=3, power=0.8, pca_components=2,
                  pls_components=1, dp_pca_components=2, dp_pca_fraction=0.5, synthesis_components=1,
                  synthesis_bins=4, synthesis_pairs="label",
                  component_sweep=ComponentSweep(mechanisms=["public_pca"], n_components=[1], total_epsilons=[5.0],
                                                 noise_seeds=2), n_jobs=1)
    values.update(overrides)
    return DPEndToEndConfig(**values)


def _release_config() -> DPReleaseConfig:
    return DPReleaseConfig(clip_norm=2.0, delta=1e-5, epsilons=[5.0], mechanisms=["gaussian_analytic"], noise_seeds=2,
                           datasets={"synthetic_planted": PatientLabel(label="label")})


def planted(n: int = 90, d: int = 120, shift: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SYNTHETIC: n patients × d features, the label moving the patients along one fixed direction only."""
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1], n // 2)
    direction = rng.normal(size=d)
    direction /= np.linalg.norm(direction)
    X = rng.normal(size=(n, d)) + shift * np.outer(y - 0.5, direction) * 2
    return X, y


def _table(X, y, name="synthetic_planted") -> PatientTable:
    return PatientTable(name, "synthetic", "synthetic", True, pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]),
                        np.asarray(y, dtype=int), np.arange(len(y)))


# ---- privacy/projection.py -------------------------------------------------------------------------------------
def test_public_projection_is_orthonormal_and_refuses_to_be_cloned_unfitted():
    from sklearn.base import clone

    X, y = planted(40, 30)
    for method in ("pca", "pls"):
        P = PublicProjection(method, 3).fit(X, y).components_
        np.testing.assert_allclose(P @ P.T, np.eye(3), atol=1e-10)
    with pytest.raises(ValueError, match="fit PublicProjection on the public patients"):
        clone(PublicProjection("pca", 2))
    with pytest.raises(ValueError, match="labels"):
        PublicProjection("pls", 2).fit(X)
    with pytest.raises(ValueError, match="n_components"):
        PublicProjection("pca", 50).fit(X)


def test_second_moment_sensitivity_bounds_every_replaced_patient():
    rng = np.random.default_rng(1)
    C = 1.7
    bound = second_moment_sensitivity(C)
    worst = 0.0
    for _ in range(2000):
        x, x2 = rng.normal(size=(2, 6))
        x *= C / np.linalg.norm(x) * rng.uniform(0.5, 1.0)
        x2 *= C / np.linalg.norm(x2) * rng.uniform(0.5, 1.0)
        worst = max(worst, np.linalg.norm(np.outer(x, x) - np.outer(x2, x2)))
    assert worst <= bound * (1 + 1e-12)
    x = np.array([C, 0.0])  # orthogonal unit rows reach the bound
    x2 = np.array([0.0, C])
    assert np.linalg.norm(np.outer(x, x) - np.outer(x2, x2)) == pytest.approx(bound)


def test_analyze_gauss_is_seeded_and_calibrated_to_its_sensitivity():
    X, _ = planted(40, 10)
    a = AnalyzeGaussPCA(1.0, 1e-5, 3, clip_norm=2.0, random_state=7).fit(X)
    b = AnalyzeGaussPCA(1.0, 1e-5, 3, clip_norm=2.0, random_state=7).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert a.sensitivity_ == pytest.approx(math.sqrt(2) * 4.0)
    assert a.sigma_ == pytest.approx(gaussian_sigma(1.0, 1e-5, a.sensitivity_))
    np.testing.assert_allclose(a.components_ @ a.components_.T, np.eye(3), atol=1e-10)
    with pytest.raises(ValueError, match="delta"):
        AnalyzeGaussPCA(1.0, 0.0, 2).fit(X)


def test_dp_pca_plus_release_composes_as_dp_accounting_says():
    """The composed ε of DP-PCA + release is dp_accounting's PLD composition of the two Gaussian steps, and it
    spends the stated total (issue 47: not the 73 % basic composition of the split left spent), never more."""
    config = _config(mechanisms=["dp_pca"], dp_pca_fraction=0.4)
    total, delta, C, k = 5.0, 1e-5, 2.0, 2
    own = budget("dp_pca", total, delta, config)
    assert own["projection_epsilon"] == pytest.approx(0.4 * total)
    assert own["projection_epsilon"] + own["release_epsilon"] > total  # the parts' ε add up to more: μ composes
    assert own["projection_delta"] + own["release_delta"] == pytest.approx(delta)
    exact = exact_total("dp_pca", own, clip_norm=C, release_noise="gaussian_analytic", k=k)
    assert total * (1 - 1e-4) <= exact <= total
    ours = pld_total("dp_pca", own, clip_norm=C, release_noise="gaussian_analytic", k=k)
    assert ours == pytest.approx(exact, rel=1e-5)
    # a Laplace release composes by the basic rule (no μ to complete)
    laplace = budget("dp_pca", total, delta, _config(mechanisms=["dp_pca"], dp_pca_fraction=0.4,
                                                     release_noise="laplace_formal"))
    assert laplace["projection_epsilon"] + laplace["release_epsilon"] == pytest.approx(total)
    s_pca = second_moment_sensitivity(C)
    sigma_pca = gaussian_sigma(own["projection_epsilon"], own["projection_delta"], s_pca)
    release = make_mechanism("gaussian_analytic", own["release_epsilon"], own["release_delta"]).calibrate(C, k)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(sigma_pca / s_pca),
        dp_accounting.GaussianDpEvent(release.noise_scale / release.sensitivity)]))
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=1e-3)
    assert ours <= total + 1e-9
    # and the releaser states the same two steps
    X, _ = planted(30, 8)
    releaser = ProjectedReleaser(PublicReferenceScaler().fit(X[:10]),
                                 AnalyzeGaussPCA(own["projection_epsilon"], own["projection_delta"], k, C,
                                                 random_state=0),
                                 make_mechanism("gaussian_analytic", own["release_epsilon"], own["release_delta"]),
                                 clip_norm=C, random_state=0).fit(X[10:])
    assert composed_epsilon(releaser.events(), delta) == pytest.approx(ours, rel=1e-6)


def test_projected_release_is_clipped_in_k_dimensions_and_says_what_it_covers():
    X, y = planted(40, 20)
    scaler = PublicReferenceScaler().fit(X[:20])
    projection = PublicProjection("pls", 2).fit(scaler.transform(X[:20]), y[:20])
    releaser = ProjectedReleaser(scaler, projection, make_mechanism("gaussian_analytic", 5.0, 1e-5), clip_norm=1.5,
                                 random_state=3)
    released = releaser.fit_transform(X[20:])
    assert released.shape == (20, 2)
    assert np.linalg.norm(releaser.clipped_, axis=1).max() <= 1.5 * (1 + 1e-12)
    info = releaser.release_info()
    assert info["projection_source"] == "public_pls" and info["projection_epsilon"] == 0.0
    assert info["scaling_source"] == "public_reference" and info["dim"] == 2
    with pytest.raises(TypeError, match="projection"):
        ProjectedReleaser(scaler, "pca", make_mechanism("gaussian_analytic", 5.0, 1e-5)).fit(X)


# ---- studies/release/end_to_end.py -----------------------------------------------------------------------------
def test_the_public_split_never_enters_the_evaluation_set():
    X, y = planted(60, 10)
    ids = np.array([f"patient-{i:03d}" for i in range(60)])
    table = _table(X, y)
    cohorts = end_to_end_cohorts(table, 1 / 3, 0)
    # identify rows by their content: no public patient is a private (released, evaluated) row
    private_rows = {tuple(r) for r in cohorts.private.X.to_numpy()}
    public_rows = {tuple(r) for r in cohorts.X_public}
    assert not private_rows & public_rows
    assert len(private_rows) + len(public_rows) == 60
    private_ids = {ids[i] for i in range(60) if tuple(X[i]) in private_rows}
    public_ids = {ids[i] for i in range(60) if tuple(X[i]) in public_rows}
    assert private_ids.isdisjoint(public_ids) and len(private_ids) == len(cohorts.private.y) == 40
    np.testing.assert_array_equal(cohorts.private.groups, np.arange(40))
    # a cell's per-patient predictions are over the private patients only
    config = {"arm": "release", "mechanism": "public_pls", "epsilon": 5.0, "n_components": 1,
              "release_noise": "gaussian_analytic", "clip_norm": 2.0, "delta": 1e-5, "kfold_splits": 5,
              **budget("public_pls", 5.0, 1e-5, _config())}
    rows = end_to_end_cell(config, 0, X=cohorts.private.X.to_numpy(), y=cohorts.private.y,
                           X_public=cohorts.X_public, y_public=cohorts.y_public)
    kept = [r for r in rows if r.get("metric") == "_predictions"][0]
    assert len(kept["proba"]) == len(kept["proba_kfold"]) == len(kept["y"]) == 40


def _cell(design, arm, eps, seed, data, k=1):
    config = {"arm": arm, "mechanism": design, "epsilon": eps, "n_components": k,
              "release_noise": "gaussian_analytic", "clip_norm": 2.0, "delta": 1e-5, "kfold_splits": 3,
              **budget(design, eps, 1e-5, _config())}
    rows = end_to_end_cell(config, seed, **data)
    return next(r for r in rows if r.get("metric") == "auroc")["value"]


def test_a_planted_low_dimensional_signal_survives_the_projection_where_the_full_release_fails():
    """SYNTHETIC: the label lives in one direction of 120. At ε = 5 per patient, the public-PLS release (k = 1)
    keeps it far above its matched null; the paper's full-dimensional release (public scaling) does not."""
    X, y = planted(120, 120, shift=1.5, seed=2)
    cohorts = end_to_end_cohorts(_table(X, y), 1 / 3, 0)
    data = dict(X=cohorts.private.X.to_numpy(), y=cohorts.private.y, X_public=cohorts.X_public,
                y_public=cohorts.y_public)
    gain = {}
    for design in ("public_pls", "paper_public_scaling"):
        diffs = [_cell(design, "release", 5.0, s, data) - _cell(design, "matched_null", 5.0, s, data)
                 for s in range(2)]
        gain[design] = float(np.mean(diffs))
    assert gain["public_pls"] > 0.25, gain
    assert gain["paper_public_scaling"] < 0.15, gain


def _sweep(tmp_path, X, y, **overrides):
    config = _config(**overrides)
    plan, frames, cohorts = end_to_end_sweeps(_table(X, y), config, _release_config(), "label", public_fraction=1 / 3,
                                              split_seed=0, cells_dir=tmp_path / "cells", progress=False)
    summary = summarise(plan, predictions_dir(tmp_path / "cells", "synthetic_planted"), cohorts.private.y,
                        n_resamples=400, confidence=0.95, headline=config.mechanisms)
    return plan, summary


def test_a_no_signal_input_keeps_no_utility_and_its_nulls_sit_at_chance(tmp_path):
    """SYNTHETIC, no signal: every release sits on its matched null, no horizon is found, and the summary carries
    the fixed-sequence test, the Monte-Carlo error and what ε covers."""
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(60, 12)), np.tile([0, 1], 30)
    _, summary = _sweep(tmp_path, X, y, mechanisms=["public_pls"], total_epsilons=[5.0, 50.0])
    horizon = summary[summary.arm == "horizon"].iloc[0]
    assert math.isnan(horizon.value)
    assert "fixed sequence" in horizon.correction and "labels travel in the clear" in horizon.eps_covers_note
    diffs = summary[(summary.arm == "release_minus_null") & summary.keeps_utility.notna()]
    assert len(diffs) == 2 and not diffs.keeps_utility.astype(bool).any()
    assert (diffs.p_mc_error > 0).all()
    assert (diffs.ci_low <= 0.05).all()
    k_sweep = summary[(summary.arm == "release_minus_null") & summary.keeps_utility.isna()
                      & (summary.protocol == "threshold_free")]
    assert set(k_sweep.mechanism) == {"public_pca"} and (k_sweep.correction.str.contains("not tested")).all()
    # issue 47: every tested difference carries its seed rule, power and minimum detectable effect
    assert diffs[["mc_error", "se", "mde", "power_observed", "half_width"]].notna().all().all()
    assert (diffs.mde > 0).all() and diffs.power_observed.between(0, 1).all()
    from scipy.stats import norm

    assert np.allclose(diffs.mde, (norm.ppf(1 - diffs.alpha) + norm.ppf(0.8)) * diffs.se)  # one design: α/1
    # and a stratified k-fold reading beside every LOSO arm, not tested
    kfold = summary[summary.protocol == "kfold"]
    assert set(kfold.arm) >= {"release", "matched_null", "release_minus_null", "noise_free", "baseline"}
    assert kfold[kfold.arm == "release_minus_null"].correction.str.contains("k-fold").all()

    # the summary run and the report's lead table read back from it (every number from MLflow)
    from eegprivacy.reporting.study_reports import write_report
    from eegprivacy.tracking.runs import tracking_uri

    table = _table(X, y)
    log_summary(end_to_end_cohorts(table, 1 / 3, 0).private, summary.assign(n_public=20, delta=1e-5), _config(
        mechanisms=["public_pls"]), "label")
    report, _ = write_report("a", tmp_path / "reports", tracking_uri())
    text = report.read_text()
    assert "## End-to-end private releases (the lead result, stage `dp_end_to_end`)" in text
    assert "public PLS projection" in text
    assert "fixed sequence from the largest ε" in text and "fitted on 20 public patients" in text
    lead = text[text.index("| design"):].splitlines()[2]
    assert "| none " in lead
    assert "δ = 1e-05" in text and "replace-one" in text and "assumed* public" in text and "floating point" in text
    assert "stages `dp_end_to_end`" in text.splitlines()[2]  # the header names the stage the lead comes from
    cells = [line for line in text.splitlines() if line.startswith("| ")]
    header = next(line for line in cells if "MDE (80 %)" in line)
    assert "seeds (rule)" in header and "release / null AUROC (k-fold)" in header
    assert any("could not have detected" in line for line in cells)
    assert (tmp_path / "reports" / "study-a-end-to-end.png").stat().st_size > 0
    # issue 47: every run the report cites is in the store it was written from
    import mlflow

    runs = {r.info.run_id for r in mlflow.search_runs(search_all_experiments=True, output_format="list")}
    cited = set(re.findall(r"(?:`|\| )([0-9a-f]{8})(?:`| \|)", text))
    assert cited and all(any(run.startswith(c) for run in runs) for c in cited), cited


def test_every_design_is_registered_with_its_evaluation():
    assert set(DESIGNS) == {"paper_public_scaling", "public_pca", "public_pls", "dp_pca", "marginal_synthesis"}
    assert DESIGNS["marginal_synthesis"].evaluation == "tstr" and DESIGNS["marginal_synthesis"].labels_covered
    assert all(d.evaluation == "loso" and not d.labels_covered for n, d in DESIGNS.items() if n != "marginal_synthesis")


def test_the_committed_summary_reports_every_seed_the_params_run():
    """Issue 47: every number of the committed end-to-end summary is over all the seeds params/ asks for (a
    headline difference from a block of them could be the lucky block), and every tested difference carries its
    Monte-Carlo error, power and minimum detectable effect."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((root / "params/dp_end_to_end.yaml").read_text())["dp_end_to_end"]
    summary = pd.read_csv(root / "metrics/dp_end_to_end_summary_msu_schizophrenia.csv")
    k = summary[summary.arm == "horizon"].set_index("mechanism")["n_components"]
    headline = summary[summary.mechanism.isin(k.index) & (summary.n_components == summary.mechanism.map(k))]
    noisy = headline[headline.arm.isin(["release", "matched_null", "release_minus_null"])]
    assert set(noisy.mechanism) == set(params["mechanisms"])
    config = DPEndToEndConfig.load(root / "params/dp_end_to_end.yaml", "dp_end_to_end")
    assert (noisy.n_seeds == noisy.epsilon.map(config.seeds_at)).all()
    assert (noisy[noisy.epsilon <= 10].n_seeds >= 40).all()  # the minimum at ε ≤ 10
    for design, part in noisy.groupby("mechanism"):
        assert set(part.epsilon) == set(config.epsilons_of(design))
    reference = summary[summary.arm.isin(["baseline", "noise_free"])]
    assert (reference.n_seeds == params["reference_seeds"]).all()
    tested = noisy[(noisy.arm == "release_minus_null") & (noisy.protocol == "threshold_free")]
    assert tested[["mc_error", "mde", "power_observed", "se"]].notna().all().all()
    assert set(summary.protocol) == {"threshold_free", "kfold"}


def test_the_mde_column_states_the_power_the_calibration_measured():
    """The lead table's MDE paragraph prints the power the calibration stage measured at the MDE (not the stated
    80 %), and says so when that stage has not run; the stage's MDE is the formula the calibration plants."""
    from scipy.stats import norm

    from eegprivacy.reporting.end_to_end import mde_check_text
    from eegprivacy.studies.release.end_to_end import minimum_detectable_effect

    assert "not yet run" in mde_check_text({})
    text = mde_check_text({0.5: 0.31, 1.0: 0.86})
    assert "0.86 at the MDE" in text and "0.31 at 0.5 × MDE" in text
    assert minimum_detectable_effect(0.03, alpha=0.01, power=0.8) == pytest.approx(
        (norm.ppf(0.99) + norm.ppf(0.8)) * 0.03)
