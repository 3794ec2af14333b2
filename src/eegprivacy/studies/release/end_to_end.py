"""The ``dp_end_to_end`` sweep: release designs whose every data-dependent step is public or paid for in ε.

The paper's mechanism noises all d feature coordinates of a patient and fits its scaling on the private patients,
outside ε. Here every design is end to end for the feature table (ε per patient of the whole pipeline):

- ``paper_public_scaling`` — the reference row: the paper's clip-and-noise of all d features, its robust scaling
  taken from the public patients (``PublicReferenceScaler``), so no private statistic is left outside ε;
- ``public_pca`` / ``public_pls`` — public scaling and a k-dimensional PCA (or PLS, on the public patients'
  labels) fitted on the public patients, then clip to C and noise in k dimensions
  (:class:`~eegprivacy.privacy.projection.ProjectedReleaser`);
- ``dp_pca`` — the k directions learned on the *private* patients with Analyze-Gauss
  (:class:`~eegprivacy.privacy.projection.AnalyzeGaussPCA`) at ``dp_pca_fraction`` of the total ε and half of δ;
  the Gaussian release spends *all* the rest: two Gaussian steps compose exactly in μ = Δ/σ (μ² adds up), so the
  release gets the μ that brings the pair to the total ε at the study's δ
  (:func:`~eegprivacy.privacy.mechanisms.gaussian_mu`). Adding the parts' ε (basic composition) would leave about a
  quarter of the budget unspent (ε = 10 stated, 7.3 composed). Logged: ``composed_epsilon_exact`` (the μ
  composition of the two calibrated σ, ≤ the total) and dp_accounting's PLD bound ``composed_epsilon_pld``;
- ``marginal_synthesis`` — a table of synthetic patients from a marginal-based synthesiser
  (:class:`~eegprivacy.privacy.synthesis.MarginalSynthesizer`, ``mbi``) on the public-PLS coordinates discretised
  at public quantiles; the labels are attributes of the synthetic table, so its ε covers them too.

The public patients are the dp_scaling stage's split (same ``public_fraction`` and ``split_seed``): they give the
scaling, the projections and the bin edges, and are never released nor evaluated — every utility number is over
the private patients only (:func:`end_to_end_cohorts` asserts the two id sets are disjoint).

Protocol (dp_utility's): the released table goes through the leave-one-patient-out MLP, scored by LOSO AUROC
(threshold-free), and beside it through a stratified ``kfold_splits``-fold split of the same MLP (each seed its own
split; :func:`~eegprivacy.evaluation.loso.stratified_kfold_proba`): LOSO's held-out patient shifts the training
prevalence against its own label, so a no-signal table reads well below 0.5 under LOSO and ≈ 0.5 under stratified
folds. The tests are on LOSO (calibrated; the matched-null difference cancels the shift); k-fold gives the
absolute readings; a synthetic table has no patient rows, so its MLP is trained on the synthetic patients and scored
on every private patient's (public-transformed) features (train-synthetic-test-real). Every release cell (arm
``release``) has its *matched null* (arm ``matched_null``): the same design, projection and noise draw applied to
a zero-signal table (``np.zeros_like``); for the synthesiser, fitted on the zero table and scored on the real
private patients like its release. Arm ``noise_free`` is each design's mechanism input without noise (scaled,
projected and clipped; for dp_pca the private PCA without noise, an evaluation-only reference), and ``baseline``
the private patients' original features: together they split utility loss into projection/clipping and noise.

Summary (:func:`summarise`): every arm's AUROC with an interval over ``subjects+seeds`` (stratified patient
cluster bootstrap crossed with a seed bootstrap), release − null paired by seed and patient resample with its
one-sided bootstrap p-value and that p-value's Monte-Carlo error, and per headline design the utility horizon: the
smallest total ε kept by a fixed-sequence test from the largest ε down at α / (number of designs)
(:func:`~eegprivacy.evaluation.cluster_bootstrap.fixed_sequence_horizon`). The k sweep's cells are reported with
their intervals and p-values, not tested (they choose nothing in the headline family).

Beside every difference (issue 47), :func:`difference_diagnostics`:

- ``mc_error``: the Monte-Carlo error of the point estimate over the noise seeds (SD of the per-seed differences /
  √seeds) — how far another block of as many seeds would move it; the seed rule asks for it to be at most
  ``mc_error_fraction`` of the interval's half-width (``seeds_settle``), and ``seeds_needed`` is the seed count the
  measured spread asks for (the patient part of the interval's variance is what seeds cannot shrink);
- ``se``: the SD of the patients × seeds bootstrap replicates; ``mde``: the minimum detectable effect of the cell's
  one-sided test at α / designs with ``power`` (:func:`minimum_detectable_effect`, normal approximation on ``se``;
  the calibration stage plants the MDE this formula gives in null data shaped like the cohort and measures the power
  the real summary reaches there, ``study_a.end_to_end_mde``); ``power_observed``: the power for the effect
  observed (a function of p: below 0.5 exactly when the estimate is under the critical value — "could not have
  detected");
  ``power_noise_free``: the power for the largest effect the design could show, its noise-free AUROC minus the
  matched null's.

One idea over about 650 lines: the sweep over the end-to-end designs, whose plan, cell and summary share the
designs' table and the public/private split; the designs' mechanisms themselves live in :mod:`eegprivacy.privacy`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from eegprivacy.evaluation.cluster_bootstrap import (
    auroc_along,
    bootstrap_indices,
    bootstrap_p_value,
    combine_seeds,
    fixed_sequence_horizon,
    p_value_mc_error,
    percentile_interval,
    seed_indices,
)
from eegprivacy.evaluation.loso import stratified_kfold_proba
from eegprivacy.pipeline.keys import config_key
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, expand_grid
from eegprivacy.privacy import DPFeatureReleaser, make_mechanism
from eegprivacy.privacy.projection import (
    AnalyzeGaussPCA,
    ProjectedReleaser,
    PublicProjection,
    composed_epsilon,
    gaussian_event,
    mechanism_event,
    second_moment_sensitivity,
)
from eegprivacy.privacy.mechanisms import gaussian_epsilon, gaussian_mu, gaussian_sigma
from eegprivacy.privacy.scaling import PublicReferenceScaler
from eegprivacy.studies.release.config import DPEndToEndConfig, DPReleaseConfig
from eegprivacy.studies.release.scaling import loso_rows, split_cohort
from eegprivacy.studies.release.table import PatientTable, noise_generator, sweep_runner
from eegprivacy.studies.release.utility import (
    PREDICTIONS,
    load_predictions,
    per_seed_replicates,
    run_keeping_predictions,
)

STAGE = "dp_end_to_end"
ARMS = ("baseline", "noise_free", "release", "matched_null")
CI_OVER = "subjects+seeds"
# Streams of the private steps besides the release noise (which comes from table.noise_generator): each mixed with
# the design's name code, ε and the seed, so no two steps ever share a draw.
_PCA_STREAM_TAG = 0x44504341
_SYNTH_STREAM_TAG = 0x53594E54
_SEED_STREAMS = {"arm": 1, "release_minus_null": 4}
_BUDGET_COLUMNS = ("release_epsilon", "projection_epsilon", "composed_epsilon_pld", "composed_epsilon_exact")
#: The columns :func:`difference_diagnostics` adds to every release − null row.
DIAGNOSTICS = ("mc_error", "seed_spread", "half_width", "se", "seeds_settle", "seeds_needed", "mde", "power_observed",
               "power_noise_free")


@dataclasses.dataclass(frozen=True)
class Design:
    """One end-to-end release design: how it releases, how its release is evaluated, what its ε covers."""

    name: str
    kind: str  # "full" (all d features), "projection" (k dimensions), "synthesis" (synthetic patients)
    evaluation: str  # "loso" (the released table, leave one patient out) or "tstr" (train synthetic, test real)
    labels_covered: bool  # whether the released labels are inside the guarantee
    summary: str

    @property
    def eps_covers_note(self) -> str:
        labels = ("the synthetic labels are inside the guarantee" if self.labels_covered else
                  "the labels travel in the clear (ε covers the feature table, not the label)")
        return f"end to end: {self.summary}; {labels}"


DESIGNS: dict[str, Design] = {d.name: d for d in (
    Design("paper_public_scaling", "full", "loso", False,
           "robust scaling from public patients, all d features clipped and noised (the paper's mechanism)"),
    Design("public_pca", "projection", "loso", False,
           "scaling and a k-dim PCA fitted on public patients, clipped and noised in k dimensions"),
    Design("public_pls", "projection", "loso", False,
           "scaling and a k-dim PLS (public labels) fitted on public patients, clipped and noised in k dimensions"),
    Design("dp_pca", "projection", "loso", False,
           "public scaling, k directions from the private patients by Analyze-Gauss (its ε composed with the "
           "release's), clipped and noised in k dimensions"),
    Design("marginal_synthesis", "synthesis", "tstr", True,
           "public scaling and PLS, public quantile bins, noisy label marginals (Gaussian), synthetic patients "
           "sampled from an mbi graphical model"),
)}


# ---------------------------------------------------------------------------------------------------------------
# Cohorts and budgets
# ---------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EndToEndCohorts:
    """The private cohort (released and evaluated; positions 0..n-1 are its LOSO groups) and the public one."""

    private: PatientTable
    X_public: np.ndarray
    y_public: np.ndarray


def end_to_end_cohorts(full: PatientTable, public_fraction: float, split_seed: int) -> EndToEndCohorts:
    """dp_scaling's seeded label-stratified split of ``full``; the public rows never reach the private table."""
    public, private = split_cohort(full.y, public_fraction, split_seed)
    if np.intersect1d(public, private).size or public.size + private.size != len(full.y):
        raise RuntimeError("the public and private patients overlap or miss a patient")
    table = dataclasses.replace(full, X=full.X.iloc[private].reset_index(drop=True), y=full.y[private],
                                groups=np.arange(private.size))
    return EndToEndCohorts(table, full.X.to_numpy()[public], full.y[public])


def components_of(config: DPEndToEndConfig, design: str) -> int:
    """The design's k in the headline table (0 for the full-dimensional reference row)."""
    return {"paper_public_scaling": 0, "public_pca": config.pca_components, "public_pls": config.pls_components,
            "dp_pca": config.dp_pca_components, "marginal_synthesis": config.synthesis_components}[design]


def budget(design: str, total_epsilon: float, delta: float, config: DPEndToEndConfig) -> dict:
    """The total ε's split over the design's private steps and their δ. A pure-ε release noise (Laplace) takes no
    δ. dp_pca: the covariance spends ``dp_pca_fraction`` of the total ε at δ/2; an analytic-Gaussian release spends
    the rest exactly (module docstring: its μ completes the pair's μ-composition to the total at the study's δ; it
    is calibrated at δ/2 and the ε that gives that μ, so the parts' ε add up to more than the total); any other
    release noise takes the remainder by basic composition (the parts add up to the total ε and δ)."""
    total_epsilon = float(total_epsilon)
    release_delta = 0.0 if config.release_noise == "laplace_formal" else delta
    if design == "dp_pca":
        projection_epsilon = config.dp_pca_fraction * total_epsilon
        projection_delta = delta / 2.0 if release_delta else delta
        release_epsilon = total_epsilon - projection_epsilon
        if config.release_noise == "gaussian_analytic":
            spent = 1.0 / gaussian_sigma(projection_epsilon, projection_delta, 1.0)  # μ of the covariance step
            # 1e-5 to the safe side: diffprivlib's σ search stops within ~1e-6 of the exact calibration
            rest = math.sqrt(max(gaussian_mu(total_epsilon, delta) ** 2 - spent ** 2, 0.0)) * (1.0 - 1e-5)
            release_epsilon = gaussian_epsilon(rest, projection_delta) if rest > 0 else release_epsilon
        return {"release_epsilon": release_epsilon, "release_delta": projection_delta
                if release_delta else 0.0, "projection_epsilon": projection_epsilon,
                "projection_delta": projection_delta}
    if design == "marginal_synthesis":
        return {"release_epsilon": total_epsilon, "release_delta": delta, "projection_epsilon": 0.0,
                "projection_delta": 0.0}
    return {"release_epsilon": total_epsilon, "release_delta": release_delta, "projection_epsilon": 0.0,
            "projection_delta": 0.0}


def pld_total(design: str, own: dict, *, clip_norm: float, release_noise: str, k: int) -> float:
    """dp_accounting's PLD composition of a dp_pca cell's two steps at the study's δ (NaN for one-step designs,
    whose total is their one mechanism's calibrated ε)."""
    if design != "dp_pca":
        return math.nan
    delta_total = own["projection_delta"] + own["release_delta"]
    sensitivity = second_moment_sensitivity(clip_norm)
    sigma = gaussian_sigma(own["projection_epsilon"], own["projection_delta"], sensitivity)
    release = make_mechanism(release_noise, own["release_epsilon"], own["release_delta"] or 1e-5)
    return composed_epsilon([gaussian_event(sigma, sensitivity), mechanism_event(release.calibrate(clip_norm, k))],
                            delta_total)


def exact_total(design: str, own: dict, *, clip_norm: float, release_noise: str, k: int) -> float:
    """The exact ε at the study's δ of a dp_pca cell whose release is Gaussian: μ² of the two calibrated steps
    add up (module docstring); NaN for one-step designs and for a Laplace release."""
    if design != "dp_pca" or release_noise not in ("gaussian_analytic", "gaussian_classic"):
        return math.nan
    sensitivity = second_moment_sensitivity(clip_norm)
    projection_mu = sensitivity / gaussian_sigma(own["projection_epsilon"], own["projection_delta"], sensitivity)
    release = make_mechanism(release_noise, own["release_epsilon"], own["release_delta"]).calibrate(clip_norm, k)
    release_mu = release.sensitivity / release.noise_scale
    return gaussian_epsilon(math.hypot(projection_mu, release_mu), own["projection_delta"] + own["release_delta"])


# ---------------------------------------------------------------------------------------------------------------
# One cell
# ---------------------------------------------------------------------------------------------------------------
def _stream(tag: int, config: dict, seed: int) -> int:
    """An integer seed for a private step of one cell (design, total ε, seed), apart from every other stream."""
    code = zlib.crc32(config["mechanism"].encode())
    eps = int(round(float(config["epsilon"]) * 1000)) if math.isfinite(float(config["epsilon"])) else 0
    return int(np.random.SeedSequence([tag, code, eps, int(seed)]).generate_state(1)[0])


def _public_parts(config: dict, X_public: np.ndarray, y_public: np.ndarray):
    """(public scaler, public projection or None) of a cell's design: fitted on the public patients only."""
    scaler = PublicReferenceScaler().fit(X_public)
    design = config["mechanism"]
    k = int(config["n_components"])
    if design in ("public_pca",):
        return scaler, PublicProjection("pca", k).fit(scaler.transform(X_public))
    if design in ("public_pls", "marginal_synthesis"):
        return scaler, PublicProjection("pls", k).fit(scaler.transform(X_public), y_public)
    return scaler, None


def released_table(config: dict, seed: int, X: np.ndarray, y: np.ndarray, X_public: np.ndarray,
                   y_public: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """(released features, released labels, release info) of one design at one (total ε, seed) on table ``X``
    (the private table, or the zero table of its matched null: same calls, same draws)."""
    design = config["mechanism"]
    scaler, projection = _public_parts(config, X_public, y_public)
    rng = noise_generator(design, config["epsilon"], seed)
    noise = config["release_noise"]
    if design == "paper_public_scaling":
        releaser = DPFeatureReleaser(make_mechanism(noise, config["release_epsilon"], config["delta"]),
                                     clip_norm=float(config["clip_norm"]), random_state=rng, scaler=scaler)
        released = releaser.fit_transform(X)
        return released, y, releaser.release_info()
    if design == "marginal_synthesis":
        from eegprivacy.privacy.synthesis import MarginalSynthesizer, public_bin_edges

        bins = int(config["synthesis_bins"])
        edges = public_bin_edges(projection.transform(scaler.transform(X_public)), bins)
        synthesizer = MarginalSynthesizer(config["release_epsilon"], config["delta"], n_bins=bins,
                                          pairs=config["synthesis_pairs"],
                                          random_state=_stream(_SYNTH_STREAM_TAG, config, seed))
        synthesizer.fit(projection.transform(scaler.transform(X)), y, edges)
        Z, labels = synthesizer.sample()
        return Z, labels, synthesizer.privacy_info()
    if design == "dp_pca":
        projection = AnalyzeGaussPCA(config["projection_epsilon"], config["projection_delta"],
                                     int(config["n_components"]), clip_norm=float(config["clip_norm"]),
                                     random_state=_stream(_PCA_STREAM_TAG, config, seed))
    mechanism = make_mechanism(noise, config["release_epsilon"], config["release_delta"] or config["delta"])
    releaser = ProjectedReleaser(scaler, projection, mechanism, clip_norm=float(config["clip_norm"]),
                                 random_state=rng)
    return releaser.fit_transform(X), y, releaser.release_info()


def noise_free_table(config: dict, X: np.ndarray, X_public: np.ndarray, y_public: np.ndarray) -> np.ndarray:
    """A design's mechanism input without noise (scaled, projected, clipped); dp_pca's directions from the private
    patients' exact PCA. Evaluation only: it is the private table, never released."""
    from eegprivacy.privacy import clip_rows_l2

    scaler, projection = _public_parts(config, X_public, y_public)
    scaled = scaler.transform(X)
    clip_norm = float(config["clip_norm"])
    if config["mechanism"] == "paper_public_scaling":
        return clip_rows_l2(scaled, clip_norm)
    if config["mechanism"] == "dp_pca":
        projection = PublicProjection("pca", int(config["n_components"])).fit(clip_rows_l2(scaled, clip_norm))
    return clip_rows_l2(projection.transform(scaled), clip_norm)


def tstr_rows(Z_train: np.ndarray, y_train: np.ndarray, Z_test: np.ndarray, y_test: np.ndarray,
              seed: int) -> list[dict]:
    """Train the study's MLP on a synthetic table, score every private patient: the AUROC row and the per-patient
    predictions item. A synthetic table with one class gives a constant score (AUROC 0.5)."""
    from eegprivacy.evaluation.loso import default_mlp

    if np.unique(y_train).size < 2:
        proba = np.full(len(y_test), 0.5)
    else:
        proba = default_mlp(seed).fit(Z_train, y_train).predict_proba(Z_test)[:, 1]
    y_test = np.asarray(y_test, dtype=int)
    return [{"protocol": "threshold_free", "metric": "auroc", "value": float(auroc_along(proba, y_test)),
             "chance": 0.5, "n": int(len(y_test))},
            {"metric": PREDICTIONS, "proba": proba.astype(float), "y": y_test}]


def evaluation_rows(features: np.ndarray, y: np.ndarray, seed: int, kfold_splits: int) -> list[dict]:
    """A table's LOSO rows and predictions (:func:`~eegprivacy.studies.release.scaling.loso_rows`), the
    predictions item also holding ``proba_kfold``: the same MLP's out-of-fold scores under a stratified
    ``kfold_splits``-fold split drawn from ``seed`` (module docstring)."""
    rows = loso_rows(features, y, np.arange(len(y)), seed)
    kept = next(r for r in rows if r.get("metric") == PREDICTIONS)
    kept["proba_kfold"] = stratified_kfold_proba(features, y, int(kfold_splits), seed).astype(float)
    return rows


def end_to_end_cell(config: dict, seed: int, X: np.ndarray, y: np.ndarray, X_public: np.ndarray,
                    y_public: np.ndarray) -> list[dict]:
    """One cell (module docstring), a pure function of (config, seed), so worker processes can run it."""
    arm = config["arm"]
    splits = int(config["kfold_splits"])
    if arm == "baseline":
        return evaluation_rows(X, y, seed, splits)
    if arm == "noise_free":
        return evaluation_rows(noise_free_table(config, X, X_public, y_public), y, seed, splits)
    if arm not in ("release", "matched_null"):
        raise ValueError(f"unknown arm {arm!r}; one of {ARMS}")
    table = X if arm == "release" else np.zeros_like(X)
    released, labels, info = released_table(config, seed, table, y, X_public, y_public)
    rows = [{"protocol": "release", "metric": "noise_scale", "value": float(info.get("noise_scale",
                                                                                      info.get("sigma", math.nan)))}]
    if DESIGNS[config["mechanism"]].evaluation == "tstr":
        # train on synthetic patients, score real ones: no patient is held out of its own training set, so there
        # is no prevalence shift to correct; the k-fold reading is the same scores
        scaler, projection = _public_parts(config, X_public, y_public)
        rows += tstr_rows(released, labels, projection.transform(scaler.transform(X)), y, seed)
        kept = next(r for r in rows if r.get("metric") == PREDICTIONS)
        kept["proba_kfold"] = kept["proba"]
        return rows
    return rows + evaluation_rows(released, y, seed, splits)


# ---------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------
def design_cells(config: DPEndToEndConfig, design: str, *, k: int, epsilons, seeds, base: dict,
                 delta: float, clip_norm: float, headline: bool) -> list[Cell]:
    """Release and matched-null cells of one design at one k over ``epsilons``; ``seeds`` a count, or a
    function of ε (the headline's :meth:`~DPEndToEndConfig.seeds_at`)."""
    seeds_of = seeds if callable(seeds) else (lambda _epsilon: seeds)
    cells = []
    extra = {"synthesis_bins": config.synthesis_bins, "synthesis_pairs": config.synthesis_pairs} \
        if design == "marginal_synthesis" else {}
    for total in epsilons:
        own = {**base, **extra, "mechanism": design, "n_components": int(k), "release_noise": config.release_noise,
               "delta": delta, **budget(design, total, delta, config)}
        own["composed_epsilon_pld"] = pld_total(design, own, clip_norm=clip_norm, release_noise=config.release_noise,
                                                k=int(k))
        own["composed_epsilon_exact"] = exact_total(design, own, clip_norm=clip_norm,
                                                    release_noise=config.release_noise, k=int(k))
        cells += [Cell({**cell.config, "arm": arm, "headline": headline}, cell.seed)
                  for cell in expand_grid({"epsilon": [float(total)]}, range(seeds_of(total)), own) for arm in
                  ("release", "matched_null")]
    return cells


def end_to_end_plan(table: PatientTable, config: DPEndToEndConfig, release: DPReleaseConfig, label: str, *,
                    n_public: int, public_fraction: float, split_seed: int, cells_dir: str | Path,
                    progress: bool) -> list[tuple]:
    """(runner, cells): the no-DP reference, then one sweep per design (an MLflow parent run each) holding its
    noise-free row, its headline cells and its k-sweep cells (a cell in both is computed once, flagged headline)."""
    clip_norm, delta = float(release.clip_norm), float(release.delta)
    base = {**table.base_config, "n_public": n_public, "public_fraction": public_fraction, "split_seed": split_seed,
            "clip_norm": clip_norm, "kfold_splits": config.kfold_splits, "code_hash": code_hash(STAGE)}
    params = {STAGE: config.to_dict(), "label": label, "delta": delta, **base}
    sweep = dict(cells_dir=cells_dir, params=params, progress=progress, model="mlp")
    reference = {**base, "arm": "baseline", "mechanism": "none", "n_components": 0, "delta": 0.0}
    plan = [(sweep_runner(table, STAGE, "none", mechanism="none", **sweep),
             expand_grid({"epsilon": [math.inf]}, range(config.reference_seeds), reference))]
    swept = config.component_sweep
    swept_designs = swept.mechanisms if swept.enabled else []
    for design in dict.fromkeys([*config.mechanisms, *swept_designs]):
        k = components_of(config, design)
        cells: list[Cell] = []
        if design in config.mechanisms:
            if DESIGNS[design].evaluation == "loso":
                cells += expand_grid({"epsilon": [math.inf]}, range(config.reference_seeds),
                                     {**base, "arm": "noise_free", "mechanism": design, "n_components": k,
                                      "delta": 0.0, "headline": True})
            cells += design_cells(config, design, k=k, epsilons=config.epsilons_of(design), seeds=config.seeds_at,
                                  base=base, delta=delta, clip_norm=clip_norm, headline=True)
        if design in swept_designs:
            seen = {(c.config["epsilon"], c.config["n_components"], c.config["arm"], c.seed) for c in cells}
            for k_swept in swept.n_components:
                cells += [c for c in design_cells(config, design, k=k_swept, epsilons=swept.total_epsilons,
                                                  seeds=swept.noise_seeds, base=base, delta=delta,
                                                  clip_norm=clip_norm, headline=False)
                          if (c.config["epsilon"], c.config["n_components"], c.config["arm"], c.seed) not in seen]
        noise = make_mechanism(config.release_noise, 1.0, delta)
        plan.append((sweep_runner(table, STAGE, design, mechanism=design, delta=noise.delta or delta,
                                  defense=f"end_to_end_{design}", **sweep), cells))
    return plan


def predictions_dir(cells_dir: str | Path, dataset: str) -> Path:
    """Where the dataset's per-patient predictions are kept (beside its cell cache, never tracked or logged)."""
    return Path(cells_dir) / STAGE / dataset


def end_to_end_sweeps(full: PatientTable, config: DPEndToEndConfig, release: DPReleaseConfig, label: str, *,
                      public_fraction: float, split_seed: int, cells_dir: str | Path,
                      progress: bool) -> tuple[list, list[pd.DataFrame], EndToEndCohorts]:
    """Split the cohort, run the plan (pending cells ahead in ``config.n_jobs`` processes; every fit seeded and
    single-threaded, so n_jobs changes no number); returns the plan, each sweep's per-seed rows, the cohorts."""
    cohorts = end_to_end_cohorts(full, public_fraction, split_seed)
    table = cohorts.private
    plan = end_to_end_plan(table, config, release, label, n_public=len(cohorts.y_public),
                           public_fraction=public_fraction, split_seed=split_seed, cells_dir=cells_dir,
                           progress=progress)
    cell_fn = functools.partial(end_to_end_cell, X=table.X.to_numpy(), y=table.y, X_public=cohorts.X_public,
                                y_public=cohorts.y_public)
    frames = run_keeping_predictions(plan, cell_fn, predictions_dir(cells_dir, table.dataset), config.n_jobs)
    return plan, frames, cohorts


# ---------------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------------
def minimum_detectable_effect(se: float, *, alpha: float, power: float) -> float:
    """The difference a one-sided test at ``alpha`` detects with ``power`` when its estimate's SD is ``se``
    (normal approximation, (z₁₋α + z_power)·se; the calibration stage measures the power it reaches through
    :func:`summarise`, ``study_a.end_to_end_mde``)."""
    return (float(norm.ppf(1.0 - alpha)) + float(norm.ppf(power))) * float(se)


def difference_diagnostics(per_seed_differences: np.ndarray, replicates: np.ndarray, interval: tuple, *,
                           alpha: float, power: float, mc_error_fraction: float, confidence: float,
                           noise_free_effect: float = math.nan, value: float = math.nan) -> dict:
    """Seed rule, power and minimum detectable effect of one release − null difference (module docstring).

    ``per_seed_differences``: each seed's difference on all patients; ``replicates``: the patients × seeds
    bootstrap replicates the interval and p-value come from; ``alpha`` the one-sided level of the cell's test."""
    d = np.asarray(per_seed_differences, dtype=float)
    seeds = d.size
    spread = float(np.std(d, ddof=1)) if seeds > 1 else math.nan
    mc_error = spread / math.sqrt(seeds) if seeds > 1 else math.nan
    half_width = (interval[1] - interval[0]) / 2.0
    se = float(np.std(replicates[np.isfinite(replicates)], ddof=1))
    z = float(norm.ppf(0.5 + confidence / 2.0))
    patient_variance = se ** 2 - spread ** 2 / seeds  # what more seeds cannot shrink
    f = mc_error_fraction * z
    needed = (math.ceil(spread ** 2 * (1.0 - f ** 2) / (f ** 2 * patient_variance))
              if patient_variance > 0 and f < 1 else math.inf)
    z_alpha = float(norm.ppf(1.0 - alpha))

    def power_at(effect: float) -> float:
        return float(norm.cdf(effect / se - z_alpha)) if se > 0 and math.isfinite(effect) else math.nan

    return {"mc_error": mc_error, "seed_spread": spread, "half_width": half_width, "se": se,
            "seeds_settle": bool(mc_error <= mc_error_fraction * half_width),
            "seeds_needed": float(max(needed, seeds)) if math.isfinite(needed) else math.inf,
            "mde": minimum_detectable_effect(se, alpha=alpha, power=power), "power_observed": power_at(value),
            "power_noise_free": power_at(noise_free_effect)}


def summarise(plan: list, folder: str | Path, y: np.ndarray, *, n_resamples: int, confidence: float,
              headline: list[str], power: float = 0.8, mc_error_fraction: float = 0.25) -> pd.DataFrame:
    """Tidy summary rows of one dataset's cells (module docstring). ``headline`` is the family of designs whose
    horizons are tested (α split across them); ``y`` the private patients' labels in the cells' order. LOSO rows
    are protocol ``threshold_free``, the stratified k-fold readings protocol ``kfold`` (not tested)."""
    y = np.asarray(y, dtype=int)
    idx = bootstrap_indices(y, n_resamples)
    alpha = 1.0 - confidence
    alpha_each = alpha / max(len(headline), 1)
    rows: list[dict] = []
    groups: dict[tuple, list[Cell]] = {}
    meta: dict[tuple, dict] = {}
    for _, cells in plan:
        for cell in cells:
            c = cell.config
            key = (c["arm"], c["mechanism"], float(c["epsilon"]), int(c["n_components"]))
            groups.setdefault(key, []).append(cell)
            meta.setdefault(key[1:], {k: c.get(k, math.nan) for k in _BUDGET_COLUMNS})
            meta[key[1:]]["headline"] = bool(meta[key[1:]].get("headline", False) or c.get("headline", False))

    def add(arm, mechanism, epsilon, k, value, interval, n_seeds, protocol="threshold_free", **extra):
        design = DESIGNS.get(mechanism)
        rows.append({"arm": arm, "mechanism": mechanism, "epsilon": float(epsilon), "n_components": int(k),
                     **{name: meta.get((mechanism, float(epsilon), int(k)), {}).get(name, math.nan) for name in
                        _BUDGET_COLUMNS},
                     "protocol": protocol, "metric": "auroc", "value": value,
                     "ci_low": interval[0], "ci_high": interval[1], "ci_over": CI_OVER if n_seeds else "",
                     "n": int(len(y)), "n_seeds": int(n_seeds), "confidence": confidence,
                     "evaluation": design.evaluation if design else "loso",
                     "eps_covers": "end_to_end" if design else "", **extra})

    stats: dict[tuple, tuple] = {}
    kept = {key: load_predictions(folder, cells) for key, cells in groups.items()}  # each file read once
    for protocol, values in (("threshold_free", "proba"), ("kfold", "proba_kfold")):
        for key, cells in groups.items():
            preds = kept[key]
            if not all(values in p for p in preds.values()):
                continue  # predictions kept without a k-fold reading (e.g. the calibration's simulated scores)
            point, per_seed, seeds = per_seed_replicates(folder, cells, values, auroc_along, y, idx, preds=preds)
            if len(seeds) != len(cells):  # a number from a subset of the seeds run is refused, not printed
                raise RuntimeError(f"{key}: {len(cells) - len(seeds)} of {len(cells)} seeds have no finite "
                                   f"{values}; delete the cell cache and rerun")
            each = np.array([float(auroc_along(preds[seed][values], y)) for seed in seeds])
            stats[(protocol, *key)] = (point, per_seed, seeds, each)
            reps = combine_seeds(per_seed, seed_indices(len(seeds), n_resamples, seed=_SEED_STREAMS["arm"]))
            add(key[0], key[1], key[2], key[3], point, percentile_interval(reps, confidence), len(seeds),
                protocol=protocol, chance=0.5)

    differences: dict[tuple, dict] = {}
    for (protocol, arm, mechanism, epsilon, k), release_stats in stats.items():
        null = stats.get((protocol, "matched_null", mechanism, epsilon, k))
        if arm != "release" or null is None:
            continue
        if release_stats[2] != null[2]:
            raise RuntimeError(f"{mechanism} ε={epsilon} k={k}: release and null differ in their seeds; rerun")
        reps = combine_seeds(release_stats[1] - null[1],
                             seed_indices(len(release_stats[2]), n_resamples, seed=_SEED_STREAMS["release_minus_null"]))
        p = bootstrap_p_value(reps)
        interval = percentile_interval(reps, confidence)
        value = release_stats[0] - null[0]
        noise_free = stats.get((protocol, "noise_free", mechanism, math.inf, k))
        diagnostics = difference_diagnostics(
            release_stats[3] - null[3], reps, interval, alpha=alpha_each, power=power,
            mc_error_fraction=mc_error_fraction, confidence=confidence, value=value,
            noise_free_effect=noise_free[0] - null[0] if noise_free else math.nan)
        differences[(protocol, mechanism, epsilon, k)] = {
            "value": value, "interval": interval, "p": p, "n_seeds": len(release_stats[2]),
            "p_mc_error": p_value_mc_error(p, n_resamples), **diagnostics}

    def add_difference(key, d, **extra):
        add("release_minus_null", *key[1:], d["value"], d["interval"], d["n_seeds"], protocol=key[0],
            p_value=d["p"], p_mc_error=d["p_mc_error"], chance=0.0,
            **{name: d[name] for name in DIAGNOSTICS}, **extra)

    for mechanism in headline:
        mine = sorted((key for key in differences if key[0] == "threshold_free" and key[1] == mechanism
                       and meta[key[1:]]["headline"]), key=lambda key: key[2])
        horizon, decisions = fixed_sequence_horizon([key[2] for key in mine], [differences[key]["p"] for key in mine],
                                                    alpha_each)
        tested = {key: ok for key, ok in zip(mine, decisions)}
        correction = (f"fixed sequence from the largest ε, α/{len(headline)} = {alpha_each:.4g} per design "
                      f"({len(headline)} designs)")
        for key in mine:
            d = differences.pop(key)
            add_difference(key, d, alpha=alpha_each, keeps_utility=bool(tested[key]),
                           decision_stable=bool(abs(d["p"] - alpha_each) > 3 * d["p_mc_error"]),
                           correction=correction)
        k = components_of_rows([key[1:] for key in mine])
        add("horizon", mechanism, math.inf, k, math.nan if horizon is None else horizon, (math.nan, math.nan), 0,
            correction=correction, eps_covers_note=DESIGNS[mechanism].eps_covers_note,
            labels_covered=DESIGNS[mechanism].labels_covered, chance=math.nan)
    for key, d in differences.items():  # the k sweep and every k-fold difference: effect sizes, not tested
        add_difference(key, d, correction="not tested (stratified k-fold reading)" if key[0] == "kfold" else
                       "not tested (k sweep, exploratory)")
    frame = pd.DataFrame(rows)
    for column in ("p_value", "p_mc_error", "alpha", "keeps_utility", "decision_stable", "correction",
                   "eps_covers_note", "labels_covered", *DIAGNOSTICS):
        if column not in frame:
            frame[column] = np.nan
    return frame


def components_of_rows(keys: list[tuple]) -> int:
    """The k of a design's headline cells (one k per design in the headline family)."""
    ks = {key[2] for key in keys}
    if len(ks) > 1:
        raise RuntimeError(f"a design's headline cells hold more than one k: {sorted(ks)}")
    return ks.pop() if ks else 0


def cell_keys(plan: list) -> list[str]:
    """Every cell's cache key (tests: two plans over the same cells hold the same keys)."""
    return [config_key({**cell.config, "seed": cell.seed}) for _, cells in plan for cell in cells]


def _number_key(value: float) -> str:
    return "inf" if not math.isfinite(float(value)) else f"{float(value):g}"


def summary_metrics(summary: pd.DataFrame) -> dict[str, float]:
    """The summary as flat MLflow metrics: ``<arm>/<design>/k_<k>/eps_<ε>/auroc`` (LOSO; ``auroc_kfold`` the
    stratified k-fold reading) with ``_ci_low``, ``_ci_high``, ``_n_seeds`` (and on release − null rows
    ``_p_value``, ``_p_mc_error``, ``_keeps_utility`` where tested, and every :data:`DIAGNOSTICS` column; an
    infinite ``seeds_needed`` is logged as -1); horizons as ``horizon/<design>/auroc`` (absent where no ε keeps
    utility) — what the study report reads back."""
    out = {}
    for r in summary.to_dict("records"):
        if r["arm"] == "horizon":
            if math.isfinite(float(r["value"])):
                out[f"horizon/{r['mechanism']}/auroc"] = float(r["value"])
            continue
        metric = "auroc_kfold" if r.get("protocol") == "kfold" else "auroc"
        key = f"{r['arm']}/{r['mechanism']}/k_{int(r['n_components'])}/eps_{_number_key(r['epsilon'])}/{metric}"
        columns = [("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"), ("_n_seeds", "n_seeds"),
                   ("_p_value", "p_value"), ("_p_mc_error", "p_mc_error"), ("_keeps_utility", "keeps_utility"),
                   *((f"_{name}", name) for name in DIAGNOSTICS)]
        for suffix, column in columns:
            value = r.get(column)
            if value is None or pd.isna(value):
                continue
            value = float(value)
            if column == "seeds_needed" and math.isinf(value):
                value = -1.0
            if math.isfinite(value):
                out[key + suffix] = value
    return out


def log_summary(table: PatientTable, summary: pd.DataFrame, config: DPEndToEndConfig, label: str) -> str:
    """One MLflow run per dataset (``dp_end_to_end-<dataset>-summary``): every summary number as a metric, each
    design's horizon, k, test and what its ε covers as tags (readable in the runs table); returns its run id."""
    import mlflow

    from eegprivacy.studies.release.table import tags
    from eegprivacy.tracking import assert_no_identifiers, log_metrics, start_run

    with start_run(study="a", tags=tags(table, STAGE, None, model="mlp"), run_name=f"{STAGE}-{table.dataset}-summary",
                   params={STAGE: config.to_dict(), "label": label, **table.base_config}) as run:
        log_metrics(summary_metrics(summary))
        n_public = summary["n_public"].iloc[0] if "n_public" in summary else math.nan
        design_tags = {"n_private_patients": str(len(table.y)),
                       "n_public_patients": "unknown" if pd.isna(n_public) else str(int(n_public)),
                       "noise_seeds": f"{config.noise_seeds} at ε ≤ {config.high_epsilon:g}, {config.noise_seeds_high} "
                                      "above", "kfold_splits": str(config.kfold_splits)}
        for name in ("delta", "clip_norm"):
            if name in summary and summary[name].notna().any():
                design_tags[name] = f"{float(summary[name].dropna().iloc[0]):g}"
        for r in summary[summary["arm"] == "horizon"].itertuples():
            design_tags[f"utility_horizon/{r.mechanism}"] = "none" if not math.isfinite(r.value) else f"{r.value:g}"
            design_tags[f"n_components/{r.mechanism}"] = str(int(r.n_components))
            design_tags[f"eps_covers_note/{r.mechanism}"] = str(r.eps_covers_note)[:5000]
            design_tags["horizon_test"] = str(r.correction)
        assert_no_identifiers(design_tags, "tag")
        mlflow.set_tags(design_tags)
        return run.info.run_id
