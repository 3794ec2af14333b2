"""The ``dp_scaling`` sweep: what an end-to-end guarantee for the scaling step costs in utility.

The paper's ε covers the noise only: median/IQR are fitted on the private cohort and treated as fixed. On one
private cohort the sweep releases with three sources of scaling statistics and the same total ε:

- ``private`` — the paper: statistics of the private cohort, release ε = total ε, no end-to-end guarantee;
- ``public_reference`` — statistics of a public reference cohort, release ε = total ε, end to end;
- ``dp_quantiles`` — DP median/IQR of the private cohort spending ``scaling_fraction`` × total ε, the release the
  rest; end to end with the total by basic composition.

The public reference cohort is simulated: a seeded, label-stratified share of the dataset's patients, kept out
of every release and every evaluation. Utility: LOSO MLP (optimistic threshold protocol) on the released private
cohort, intrinsic utility against the mechanism's input, clipping, and the scaling statistics' error against the
private ones (an evaluation-only diagnostic, never released).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedShuffleSplit

from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import expand_grid, run_prefetched
from eegprivacy.privacy import DPFeatureReleaser, RobustFeatureScaler, make_mechanism
from eegprivacy.privacy.accounting import basic_composition, split_budget
from eegprivacy.privacy.scaling import DPQuantileScaler, PublicReferenceScaler, public_bounds
from eegprivacy.studies.release.config import DPReleaseConfig, DPScalingConfig
from eegprivacy.studies.release.intrinsic import noise_scale_row, quality_rows
from eegprivacy.studies.release.table import PatientTable, sweep_runner
from eegprivacy.studies.release.utility import evaluation_rows

SOURCES = ("private", "public_reference", "dp_quantiles")
# diffprivlib draws from a legacy RandomState; mixing in this tag keeps its stream apart from the MLP's
# (which is seeded with the plain seed).
_QUANTILE_STREAM_TAG = 0x44505154


def split_cohort(y: np.ndarray, public_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(public, private) row positions: a seeded label-stratified split; both parts must hold both classes."""
    y = np.asarray(y)
    if not 0.0 < float(public_fraction) < 1.0:
        raise ValueError(f"public_fraction must lie strictly between 0 and 1, got {public_fraction}")
    splitter = StratifiedShuffleSplit(n_splits=1, test_size=float(public_fraction), random_state=int(seed))
    private, public = next(splitter.split(np.zeros((y.size, 1)), y))
    for name, part in (("public", public), ("private", private)):
        if np.unique(y[part]).size < 2:
            raise ValueError(f"the {name} cohort holds one class only; change public_fraction or split_seed")
    return np.sort(public), np.sort(private)


def budget(source: str, total_epsilon: float, delta: float, scaling_fraction: float) -> dict:
    """The cell's ε split and whether the scaling step is covered. ``delta`` is the mechanism's own (0 for
    Laplace); ``end_to_end`` here still needs a formally calibrated release mechanism (checked by the caller)."""
    total_epsilon = float(total_epsilon)
    if source == "private":
        return {"total_epsilon": total_epsilon, "release_epsilon": total_epsilon, "scaling_epsilon": math.nan,
                "end_to_end": False}
    if source == "public_reference":
        scaling_epsilon, release_epsilon = 0.0, total_epsilon
    elif source == "dp_quantiles":
        scaling_epsilon, release_epsilon = split_budget(total_epsilon, scaling_fraction)
    else:
        raise ValueError(f"unknown scaling source {source!r}; known: {SOURCES}")
    composed, _ = basic_composition((scaling_epsilon, 0.0), (release_epsilon, delta))
    return {"total_epsilon": composed, "release_epsilon": release_epsilon, "scaling_epsilon": scaling_epsilon,
            "end_to_end": True}


def scaling_error(center: np.ndarray, scale: np.ndarray, reference: RobustFeatureScaler) -> dict:
    """How far the scaling statistics are from the private ones, in units of the private IQR (median over
    features). Evaluation only: it reads private statistics, so it is never part of a release."""
    return {"center_error_iqr": float(np.median(np.abs(center - reference.center_) / reference.scale_)),
            "scale_abs_log_ratio": float(np.median(np.abs(np.log(scale / reference.scale_))))}


@dataclasses.dataclass
class ScalingCohorts:
    """The private cohort (released and evaluated; positions 0..n-1 are its LOSO groups) and what the public
    one contributes: its scaler, fitted once and used as is, and the DP-quantile bounds."""

    private: PatientTable
    n_public: int
    reference: PublicReferenceScaler
    bounds: np.ndarray
    private_stats: RobustFeatureScaler  # only for the scaling-error diagnostic


def scaling_cohorts(full: PatientTable, config: DPScalingConfig) -> ScalingCohorts:
    """Split ``full`` into the public and private cohorts and fit what the public one gives."""
    public, private = split_cohort(full.y, config.public_fraction, config.split_seed)
    X_public = full.X.to_numpy()[public]
    table = dataclasses.replace(full, X=full.X.iloc[private].reset_index(drop=True), y=full.y[private],
                                groups=np.arange(private.size))
    return ScalingCohorts(table, int(public.size), PublicReferenceScaler().fit(X_public),
                          public_bounds(X_public, config.bounds_margin), RobustFeatureScaler().fit(table.X.to_numpy()))


def scaling_cell(config: dict, seed: int, X: np.ndarray, y: np.ndarray, groups: np.ndarray,
                 reference: PublicReferenceScaler, bounds, private_stats: RobustFeatureScaler,
                 clip_norm: float) -> list[dict]:
    """One cell (the no-DP reference or one mechanism × scaling source × ε), module-level so worker processes
    can run it."""
    def evaluate(features, grid):
        evaluation = LOSOEvaluation(threshold_grid=grid, random_state=seed, nested=False, n_jobs=1)
        return evaluation_rows(evaluation.evaluate(features, y, groups), y)

    mechanism, source = config["mechanism"], config["scaling_source"]
    if mechanism == "none":  # the private cohort's original features, no DP (the MLP standardises internally)
        return evaluate(X, ORIGINAL_GRID)
    scaler = {"private": None, "public_reference": reference}.get(source)
    if source == "dp_quantiles":
        quantile_seed = int(np.random.SeedSequence([_QUANTILE_STREAM_TAG, seed]).generate_state(1)[0])
        scaler = DPQuantileScaler(config["scaling_epsilon"], bounds, random_state=quantile_seed)
    releaser = DPFeatureReleaser(make_mechanism(mechanism, config["release_epsilon"], config["delta"]),
                                 clip_norm=clip_norm, random_state=seed, scaler=scaler)
    released = releaser.fit_transform(X)
    info = releaser.release_info()
    end_to_end = bool(info["end_to_end_guarantee"] and info["formal_guarantee"])
    if end_to_end != config["end_to_end"]:
        raise RuntimeError(f"{source}/{mechanism}: release says end_to_end={end_to_end}, "
                           f"the budget said {config['end_to_end']}")
    if source == "public_reference" and releaser.scaler_ is not reference:
        raise RuntimeError("the public reference scaler was refitted on the private cohort")
    rows = quality_rows(releaser, released)
    rows += [{"protocol": "scaling", "metric": k, "value": v}
             for k, v in scaling_error(releaser.center_, releaser.scale_, private_stats).items()]
    rows.append(noise_scale_row(float(info["noise_scale"])))
    return rows + evaluate(released, DP_GRID)


def source_cells(config: DPScalingConfig, mechanism: str, source: str, *, delta: float, delta_param: float,
                 clip_norm: float, n_features: int, base: dict) -> list:
    """One mechanism × scaling source over the total εs and seeds; each cell carries its ε split and whether
    the whole pipeline is end to end (a formally calibrated release with covered scaling statistics). ``delta``
    is the mechanism's own δ, ``delta_param`` the study's."""
    cells = []
    for total in config.total_epsilons:
        own = {"mechanism": mechanism, "scaling_source": source, "delta": delta,
               **budget(source, total, delta, config.scaling_fraction)}
        formal = make_mechanism(mechanism, own["release_epsilon"], delta_param).calibrate(
            clip_norm, n_features).formal_guarantee
        own["end_to_end"] = bool(own["end_to_end"] and formal)
        if source == "dp_quantiles":
            own.update(scaling_fraction=config.scaling_fraction, bounds_margin=float(config.bounds_margin))
        cells += expand_grid({"epsilon": [float(total)]}, range(config.noise_seeds), {**base, **own})
    return cells


def scaling_sweeps(full: PatientTable, config: DPScalingConfig, release: DPReleaseConfig, label: str, *,
                   cells_dir: str | Path, progress: bool) -> tuple[list[pd.DataFrame], ScalingCohorts]:
    """The no-DP reference and one sweep per mechanism × scaling source on the private cohort of ``full``, their
    cells computed ahead in ``config.n_jobs`` processes; returns each sweep's per-seed rows and the cohorts."""
    cohorts = scaling_cohorts(full, config)
    table = cohorts.private
    clip_norm, delta_param = float(release.clip_norm), float(release.delta)
    base = {**table.base_config, "n_public": cohorts.n_public, "public_fraction": config.public_fraction,
            "split_seed": config.split_seed, "clip_norm": clip_norm, "code_hash": code_hash("dp_scaling")}
    run_params = {"dp_scaling": config.to_dict(), "label": label, "delta": delta_param, **base}
    sweep = dict(cells_dir=cells_dir, params=run_params, progress=progress, model="mlp")
    # Reference point: the private cohort's original features, no DP.
    none_config = {**base, "mechanism": "none", "scaling_source": "none", "total_epsilon": math.inf,
                   "release_epsilon": math.inf, "scaling_epsilon": math.nan, "end_to_end": False, "delta": 0.0}
    plan = [(sweep_runner(table, "dp_scaling", "none", mechanism="none", **sweep),
             expand_grid({"epsilon": [math.inf]}, range(config.noise_seeds), none_config))]
    for mechanism in config.mechanisms:
        delta = make_mechanism(mechanism, 1.0, delta_param).delta  # 0 for the pure-ε mechanisms
        for source in SOURCES:
            plan.append((sweep_runner(table, "dp_scaling", f"{mechanism}-{source}", mechanism=mechanism, delta=delta,
                                      defense=f"scaling_{source}", **sweep),
                         source_cells(config, mechanism, source, delta=delta, delta_param=delta_param,
                                      clip_norm=clip_norm, n_features=table.X.shape[1], base=base)))
    cell_fn = functools.partial(scaling_cell, X=table.X.to_numpy(), y=table.y, groups=table.groups,
                                reference=cohorts.reference, bounds=cohorts.bounds,
                                private_stats=cohorts.private_stats, clip_norm=clip_norm)
    return run_prefetched(plan, cell_fn, n_jobs=config.n_jobs), cohorts
