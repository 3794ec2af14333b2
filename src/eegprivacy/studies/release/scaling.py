"""The ``dp_scaling`` sweep: what an end-to-end guarantee for the scaling step costs in utility.

The paper's ε covers the noise only: median/IQR are fitted on the private cohort and treated as fixed. On one
private cohort the sweep releases with three sources of scaling statistics and the same total ε:

- ``private`` — the paper: statistics of the private cohort, release ε = total ε, no end-to-end guarantee;
- ``public_reference`` — statistics of a public reference cohort, release ε = total ε, end to end;
- ``dp_quantiles`` — DP median/IQR of the private cohort spending ``scaling_fraction`` × total ε, the release the
  rest; end to end with the total by basic composition.

The public reference cohort is simulated: a seeded, label-stratified share of the dataset's patients, kept out
of every release and every evaluation.

Every row goes through dp_utility's protocol (:mod:`eegprivacy.studies.release.utility`): a LOSO MLP scored
threshold-free (LOSO AUROC, the headline) and with the paper's optimistic threshold protocol on the one grid
:data:`~eegprivacy.studies.release.utility.THRESHOLD_GRID`, the no-DP reference included. Each release cell
(arm ``release``) has a *matched null* (arm ``matched_null``): the same scaling source, mechanism, release ε and
noise draw applied to a zero-signal table (``np.zeros_like``) and evaluated the same way, so what the protocol
scores on noise alone is measured, not assumed to be chance. The public-reference and DP-quantile scalers map the
zero table to one constant row: still no signal. Per-patient predictions are kept beside the cell cache for the
patient+seed bootstrap of :mod:`eegprivacy.studies.release.scaling_summary`.

Noise: every cell draws from :func:`~eegprivacy.studies.release.table.noise_generator` keyed by (mechanism,
*release* ε, seed), honouring ``dp_release.common_random_numbers``; so two total εs (or mechanisms) never share a
draw rescaled. The scaling source is deliberately *not* in the key: ``private`` and ``public_reference`` at the
same (mechanism, total ε, seed) release at the same ε and draw the same noise, with the same MLP seed — a paired
design in which their difference is the scaling statistics alone. ``dp_quantiles`` releases at a smaller ε and so
draws its own noise (pairing over seeds and patients still holds). A release and its matched null share the draw
by construction.

Also per release cell: intrinsic utility against the mechanism's input, clipping, and the scaling statistics'
error against the private ones (an evaluation-only diagnostic, never released).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedShuffleSplit

from eegprivacy.evaluation import LOSOEvaluation
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, expand_grid
from eegprivacy.privacy import DPFeatureReleaser, RobustFeatureScaler, make_mechanism
from eegprivacy.privacy.accounting import basic_composition, split_budget
from eegprivacy.privacy.scaling import DPQuantileScaler, PublicReferenceScaler, public_bounds
from eegprivacy.studies.release.config import DPReleaseConfig, DPScalingConfig
from eegprivacy.studies.release.intrinsic import noise_scale_row, quality_rows
from eegprivacy.studies.release.table import PatientTable, noise_generator, sweep_runner
from eegprivacy.studies.release.utility import (
    PREDICTIONS,
    THRESHOLD_GRID,
    evaluation_rows,
    run_keeping_predictions,
)

SOURCES = ("private", "public_reference", "dp_quantiles")
ARMS = ("release", "matched_null")
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


def scaling_release(config: dict, seed: int, X: np.ndarray, reference: PublicReferenceScaler,
                    bounds) -> tuple[DPFeatureReleaser, np.ndarray]:
    """One release of ``X`` with the cell's scaling source, mechanism and release ε; its noise from
    :func:`~eegprivacy.studies.release.table.noise_generator` (module docstring: why the source is not in the
    key). A release and its matched null call this with the same (config, seed): same quantile stream, same draw."""
    mechanism, source = config["mechanism"], config["scaling_source"]
    scaler = {"private": None, "public_reference": reference}.get(source)
    if source == "dp_quantiles":
        quantile_seed = int(np.random.SeedSequence([_QUANTILE_STREAM_TAG, seed]).generate_state(1)[0])
        scaler = DPQuantileScaler(config["scaling_epsilon"], bounds, random_state=quantile_seed)
    rng = noise_generator(mechanism, config["release_epsilon"], seed,
                          bool(config.get("common_random_numbers", False)))
    releaser = DPFeatureReleaser(make_mechanism(mechanism, config["release_epsilon"], config["delta"]),
                                 clip_norm=float(config["clip_norm"]), random_state=rng, scaler=scaler)
    released = releaser.fit_transform(np.asarray(X, dtype=float))
    info = releaser.release_info()
    end_to_end = bool(info["end_to_end_guarantee"] and info["formal_guarantee"])
    if end_to_end != config["end_to_end"]:
        raise RuntimeError(f"{source}/{mechanism}: release says end_to_end={end_to_end}, "
                           f"the budget said {config['end_to_end']}")
    if source == "public_reference" and releaser.scaler_ is not reference:
        raise RuntimeError("the public reference scaler was refitted on the private cohort")
    return releaser, released


def loso_rows(features: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int) -> list[dict]:
    """dp_utility's evaluation rows of one table (AUROC + optimistic protocol on THRESHOLD_GRID), then the
    per-patient predictions item (``metric == "_predictions"``) that :func:`keeping_predictions` stores."""
    result = LOSOEvaluation(threshold_grid=THRESHOLD_GRID, random_state=seed, nested=False,
                            n_jobs=1).evaluate(features, y, groups)
    return [*evaluation_rows(result, y),
            {"metric": PREDICTIONS, "proba": result.proba.astype(float),
             "pred_optimistic": result.protocols["optimistic"].y_pred.astype(float),
             "y": np.asarray(result.y_true, dtype=int)}]


def scaling_cell(config: dict, seed: int, X: np.ndarray, y: np.ndarray, groups: np.ndarray,
                 reference: PublicReferenceScaler, bounds, private_stats: RobustFeatureScaler) -> list[dict]:
    """One cell: the no-DP reference (arm ``baseline``), or one mechanism × scaling source × total ε's release
    (arm ``release``) or its matched null (arm ``matched_null``: the zero table, same source and draw).
    Module-level and a pure function of (config, seed), so worker processes can run it."""
    arm = config["arm"]
    if arm == "baseline":  # the private cohort's original features, no DP (the MLP standardises internally)
        return loso_rows(X, y, groups, seed)
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; one of {('baseline', *ARMS)}")
    table = X if arm == "release" else np.zeros_like(X)
    releaser, released = scaling_release(config, seed, table, reference, bounds)
    rows = []
    if arm == "release":  # diagnostics of the real release only (the null's would describe the zero table)
        rows += quality_rows(releaser, released)
        rows += [{"protocol": "scaling", "metric": k, "value": v}
                 for k, v in scaling_error(releaser.center_, releaser.scale_, private_stats).items()]
        rows.append(noise_scale_row(float(releaser.release_info()["noise_scale"])))
    return rows + loso_rows(released, y, groups, seed)


def source_cells(config: DPScalingConfig, mechanism: str, source: str, *, delta: float, delta_param: float,
                 clip_norm: float, n_features: int, base: dict) -> list[Cell]:
    """One mechanism × scaling source over the total εs and seeds, each (ε, seed) as a release and its matched
    null; each cell carries its ε split and whether the whole pipeline is end to end (a formally calibrated
    release with covered scaling statistics). ``delta`` is the mechanism's own δ, ``delta_param`` the study's."""
    cells = []
    for total in config.total_epsilons:
        own = {"mechanism": mechanism, "scaling_source": source, "delta": delta,
               **budget(source, total, delta, config.scaling_fraction)}
        formal = make_mechanism(mechanism, own["release_epsilon"], delta_param).calibrate(
            clip_norm, n_features).formal_guarantee
        own["end_to_end"] = bool(own["end_to_end"] and formal)
        if source == "dp_quantiles":
            own.update(scaling_fraction=config.scaling_fraction, bounds_margin=float(config.bounds_margin))
        cells += [Cell({**cell.config, "arm": arm}, cell.seed)
                  for cell in expand_grid({"epsilon": [float(total)]}, range(config.noise_seeds), {**base, **own})
                  for arm in ARMS]
    return cells


def predictions_dir(cells_dir: str | Path, dataset: str) -> Path:
    """Where the dataset's per-patient predictions are kept (beside its cell cache, never tracked or logged)."""
    return Path(cells_dir) / "dp_scaling" / dataset


def scaling_plan(table: PatientTable, config: DPScalingConfig, release: DPReleaseConfig, label: str, *,
                 n_public: int, cells_dir: str | Path, progress: bool) -> list[tuple]:
    """(runner, cells) of the no-DP reference and of one sweep per mechanism × scaling source (an MLflow parent
    run each) on the private cohort ``table``."""
    clip_norm, delta_param = float(release.clip_norm), float(release.delta)
    base = {**table.base_config, "n_public": n_public, "public_fraction": config.public_fraction,
            "split_seed": config.split_seed, "clip_norm": clip_norm,
            "common_random_numbers": bool(release.common_random_numbers), "code_hash": code_hash("dp_scaling")}
    run_params = {"dp_scaling": config.to_dict(), "label": label, "delta": delta_param, **base}
    sweep = dict(cells_dir=cells_dir, params=run_params, progress=progress, model="mlp")
    # Reference point: the private cohort's original features, no DP, through the same protocol and grid.
    none_config = {**base, "arm": "baseline", "mechanism": "none", "scaling_source": "none",
                   "total_epsilon": math.inf, "release_epsilon": math.inf, "scaling_epsilon": math.nan,
                   "end_to_end": False, "delta": 0.0}
    plan = [(sweep_runner(table, "dp_scaling", "none", mechanism="none", **sweep),
             expand_grid({"epsilon": [math.inf]}, range(config.noise_seeds), none_config))]
    for mechanism in config.mechanisms:
        delta = make_mechanism(mechanism, 1.0, delta_param).delta  # 0 for the pure-ε mechanisms
        for source in SOURCES:
            plan.append((sweep_runner(table, "dp_scaling", f"{mechanism}-{source}", mechanism=mechanism, delta=delta,
                                      defense=f"scaling_{source}", **sweep),
                         source_cells(config, mechanism, source, delta=delta, delta_param=delta_param,
                                      clip_norm=clip_norm, n_features=table.X.shape[1], base=base)))
    return plan


def scaling_sweeps(full: PatientTable, config: DPScalingConfig, release: DPReleaseConfig, label: str, *,
                   cells_dir: str | Path, progress: bool) -> tuple[list, list[pd.DataFrame], ScalingCohorts]:
    """Run :func:`scaling_plan` on the private cohort of ``full``, pending cells computed ahead in
    ``config.n_jobs`` processes (whole cells, each fitting one seeded single-threaded MLP at a time, so n_jobs
    changes no number); returns the plan, each sweep's per-seed rows and the cohorts. A cell whose kept
    predictions were lost is computed again."""
    cohorts = scaling_cohorts(full, config)
    table = cohorts.private
    plan = scaling_plan(table, config, release, label, n_public=cohorts.n_public, cells_dir=cells_dir,
                        progress=progress)
    cell_fn = functools.partial(scaling_cell, X=table.X.to_numpy(), y=table.y, groups=table.groups,
                                reference=cohorts.reference, bounds=cohorts.bounds,
                                private_stats=cohorts.private_stats)
    frames = run_keeping_predictions(plan, cell_fn, predictions_dir(cells_dir, table.dataset), config.n_jobs)
    return plan, frames, cohorts
