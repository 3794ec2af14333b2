"""Stage ``dp_scaling`` (study A): what an end-to-end guarantee for the scaling step costs in utility.

The paper's ε covers the noise only: median/IQR are fitted on the private cohort and treated as fixed. On one
private cohort this stage releases with three sources of scaling statistics and the same total ε:

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
import hashlib
import math
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedShuffleSplit

import eegprivacy.privacy as privacy_pkg
from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.evaluation.utility import clipping_distortion, intrinsic_utility
from eegprivacy.params import load_params
from eegprivacy.privacy import DPFeatureReleaser, RobustFeatureScaler, make_mechanism
from eegprivacy.privacy.accounting import basic_composition, split_budget
from eegprivacy.privacy.scaling import DPQuantileScaler, PublicReferenceScaler, public_bounds
from eegprivacy.tracking.sweep import expand_grid, run_prefetched

from experiments._study_a import code_hash, load_patient_table, sweep_runner, write_rows
from experiments.dp_utility import evaluation_rows

NAME = "dp-scaling"
HELP = ("Study A: end-to-end DP of the scaling step. Release the private cohort with scaling statistics from the "
        "private cohort (the paper), a public reference cohort, or DP quantiles (budget split, total ε by "
        "composition); LOSO MLP and intrinsic utility per (mechanism, total ε, seed); tidy CSV + MLflow runs.")

SOURCES = ("private", "public_reference", "dp_quantiles")
# diffprivlib draws from a legacy RandomState; mixing in this tag keeps its stream apart from the MLP's
# (which is seeded with the plain seed).
_QUANTILE_STREAM_TAG = 0x44505154


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset with a features table, e.g. eegmat")
    parser.add_argument("--params", default="params/dp_scaling.yaml", help="this stage's params file")
    parser.add_argument("--release-params", default="params/dp_release.yaml",
                        help="study A params file: each dataset's patient label, clip_norm and delta")
    parser.add_argument("--out", help="tidy per-seed rows (default metrics/dp_scaling_<dataset>.csv)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--no-progress", action="store_true")


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


def stage_code_hash() -> str:
    """The study-A code hash plus the scaling and accounting modules, which it does not cover."""
    digest = hashlib.sha256(code_hash("dp_scaling.py", "dp_utility.py").encode())
    folder = Path(privacy_pkg.__file__).parent
    for name in ("scaling.py", "accounting.py"):
        digest.update(name.encode() + (folder / name).read_bytes())
    return digest.hexdigest()[:16]


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
    rows = [{"protocol": "intrinsic", "metric": k, "value": v}
            for k, v in intrinsic_utility(releaser.clipped_, released).items()]
    rows += [{"protocol": "clipping", "metric": k, "value": v}
             for k, v in clipping_distortion(releaser.scaled_, releaser.clipped_).items()]
    rows += [{"protocol": "scaling", "metric": k, "value": v}
             for k, v in scaling_error(releaser.center_, releaser.scale_, private_stats).items()]
    rows.append({"protocol": "intrinsic", "metric": "noise_scale", "value": float(info["noise_scale"])})
    return rows + evaluate(released, DP_GRID)


def run(args) -> int:
    params = load_params(args.params, "dp_scaling")
    if args.dataset not in params["datasets"]:
        raise KeyError(f"{args.dataset!r} is not in dp_scaling.datasets {params['datasets']}")
    # Label, clipping norm and δ are study A's, read where dp-release reads them so the two stages cannot drift.
    release_params = load_params(args.release_params, "dp_release")
    label = release_params["datasets"][args.dataset]["label"]
    full = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    public, private = split_cohort(full.y, params["public_fraction"], params["split_seed"])
    X_public = full.X.to_numpy()[public]
    # The private cohort is what gets released and evaluated; positions 0..n-1 are its LOSO groups.
    table = dataclasses.replace(full, X=full.X.iloc[private].reset_index(drop=True), y=full.y[private],
                                groups=np.arange(private.size))
    X, y, groups = table.X.to_numpy(), table.y, table.groups

    reference = PublicReferenceScaler().fit(X_public)  # fitted once; the releaser uses it as is
    bounds = public_bounds(X_public, params["bounds_margin"])
    private_stats = RobustFeatureScaler().fit(X)  # only for the scaling-error diagnostic
    clip_norm, delta_param = float(release_params["clip_norm"]), float(release_params["delta"])

    base = {**table.base_config, "n_public": int(public.size), "public_fraction": float(params["public_fraction"]),
            "split_seed": int(params["split_seed"]), "clip_norm": clip_norm, "code_hash": stage_code_hash()}
    run_params = {"dp_scaling": params, "label": label, "delta": delta_param, **base}
    sweep = dict(cells_dir=args.cells, params=run_params, progress=not args.no_progress, model="mlp")
    seeds = range(int(params["noise_seeds"]))

    # Reference point: the private cohort's original features, no DP.
    none_config = {**base, "mechanism": "none", "scaling_source": "none", "total_epsilon": math.inf,
                   "release_epsilon": math.inf, "scaling_epsilon": math.nan, "end_to_end": False, "delta": 0.0}
    plan = [(sweep_runner(table, "dp_scaling", "none", mechanism="none", **sweep),
             expand_grid({"epsilon": [math.inf]}, seeds, none_config))]

    for mechanism in params["mechanisms"]:
        delta = make_mechanism(mechanism, 1.0, delta_param).delta  # 0 for the pure-ε mechanisms
        for source in SOURCES:
            cells = []
            for total in params["total_epsilons"]:
                own = {"mechanism": mechanism, "scaling_source": source, "delta": delta,
                       **budget(source, total, delta, params["scaling_fraction"])}
                formal = make_mechanism(mechanism, own["release_epsilon"], delta_param).calibrate(
                    clip_norm, X.shape[1]).formal_guarantee
                own["end_to_end"] = bool(own["end_to_end"] and formal)
                if source == "dp_quantiles":
                    own.update(scaling_fraction=float(params["scaling_fraction"]),
                               bounds_margin=float(params["bounds_margin"]))
                cells += expand_grid({"epsilon": [float(total)]}, seeds, {**base, **own})
            plan.append((sweep_runner(table, "dp_scaling", f"{mechanism}-{source}", mechanism=mechanism,
                                      delta=delta, defense=f"scaling_{source}", **sweep), cells))
    cell_fn = functools.partial(scaling_cell, X=X, y=y, groups=groups, reference=reference, bounds=bounds,
                                private_stats=private_stats, clip_norm=clip_norm)
    frames = run_prefetched(plan, cell_fn, n_jobs=int(params.get("n_jobs", 1)))

    out = args.out or f"metrics/dp_scaling_{args.dataset}.csv"
    tidy = write_rows(frames, out)
    print(f"{args.dataset}: {private.size} private / {public.size} public patients, "
          f"{tidy['config_key'].nunique()} configs x {len(seeds)} seeds -> {out}")
    return 0
