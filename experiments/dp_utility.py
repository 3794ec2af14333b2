"""Stage ``dp_utility`` (study A): patient-level LOSO MLP on the original and on every DP release.

Two threshold protocols side by side: the paper's optimistic one (threshold chosen on the pooled LOSO
predictions) and an honest nested one (threshold chosen inside each training fold).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.params import load_params
from eegprivacy.tracking.sweep import expand_grid, run_prefetched

from experiments._study_a import code_hash, load_patient_table, release, sweep_runner, write_rows
from experiments.dp_release import cells_for

NAME = "dp-utility"
HELP = ("Study A: leave-one-patient-out MLP on the original features and on each DP release (ε × mechanism × "
        "seeds), optimistic and nested threshold protocols, Wilson intervals; tidy CSV + MLflow parent/child runs.")

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "specificity", "balanced_accuracy", "f1",
                          "tn", "fp", "fn", "tp")
WILSON = ("accuracy", "recall", "specificity")


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset with a features table, e.g. eegmat")
    parser.add_argument("--params", default="params/dp_release.yaml", help="study A params file")
    parser.add_argument("--out", help="tidy per-seed rows (default metrics/dp_utility_<dataset>.csv)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--no-progress", action="store_true")


def evaluation_rows(result, y: np.ndarray) -> list[dict]:
    """One row per (protocol, metric), Wilson bounds where they apply, chance levels beside the scores."""
    majority = max(y.mean(), 1 - y.mean())
    chance = {"balanced_accuracy": 0.5, "accuracy": majority, "recall": float("nan")}
    rows = []
    for name, protocol in result.protocols.items():
        m = protocol.metrics
        for metric in CLASSIFICATION_METRICS:
            row = {"protocol": name, "metric": metric, "value": float(m[metric]),
                   "chance": chance.get(metric, float("nan"))}
            if metric in WILSON:
                row.update(ci_low=m[f"{metric}_ci_low"], ci_high=m[f"{metric}_ci_high"], n=m["n"])
            rows.append(row)
        rows.append({"protocol": name, "metric": "threshold", "value": float(np.mean(protocol.thresholds))})
    return rows


def utility_cell(config: dict, seed: int, *, table, utility: dict, inner_folds: int | None) -> list[dict]:
    """One cell: the LOSO MLP on the original features (`none`), on them with shuffled labels (`permuted_labels`,
    the negative control: any score above chance is the protocol's bias) or on one seeded DP release. A pure
    function of (config, seed), so cells can be computed in any process."""
    X, y, groups = table.X.to_numpy(), table.y, table.groups
    mechanism = config["mechanism"]
    if mechanism == "none":
        features, labels, grid = X, y, ORIGINAL_GRID
    elif mechanism == "permuted_labels":
        features, labels, grid = X, np.random.default_rng([0x5045524D, seed]).permutation(y), ORIGINAL_GRID
    else:
        _, features = release(table, mechanism, config["epsilon"], config["delta"], config["clip_norm"], seed)
        labels, grid = y, DP_GRID
    evaluation = LOSOEvaluation(threshold_grid=grid, random_state=seed, nested=seed < utility["nested_seeds"],
                                inner_folds=inner_folds)
    return evaluation_rows(evaluation.evaluate(features, labels, groups), labels)


def run(args) -> int:
    all_params = load_params(args.params)
    params, utility = all_params["dp_release"], all_params["dp_utility"]
    label = params["datasets"][args.dataset]["label"]
    table = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    run_params = {"dp_release": params, "dp_utility": utility, "label": label, **table.base_config}
    inner_folds = utility.get("nested_inner_folds", "loso")
    inner_folds = None if inner_folds == "loso" else int(inner_folds)
    cell_base = {**table.base_config, "nested_seeds": utility["nested_seeds"], "nested_inner": inner_folds or "loso",
                 "code_hash": code_hash("dp_release.py", "dp_utility.py")}

    sweep = dict(cells_dir=args.cells, params=run_params, progress=not args.no_progress, model="mlp")
    seeds = range(utility["baseline_mlp_seeds"])
    plan = [
        (sweep_runner(table, "dp_utility", "none", mechanism="none", **sweep),
         expand_grid({"mechanism": ["none"], "epsilon": [math.inf]}, seeds=seeds, base=cell_base)),
        (sweep_runner(table, "dp_utility", "permuted_labels", mechanism="none", attack="permuted_labels", **sweep),
         expand_grid({"mechanism": ["permuted_labels"], "epsilon": [math.inf]}, seeds=seeds, base=cell_base)),
    ]
    for mechanism in params["mechanisms"]:
        plan.append((sweep_runner(table, "dp_utility", mechanism, mechanism=mechanism, delta=params["delta"], **sweep),
                     cells_for(table, params, mechanism, extra=cell_base)))
    # Whole cells in n_jobs processes, each fitting one MLP at a time: the optimistic-only cells (most of them)
    # have nothing else to run in parallel. Every fit is seeded and single-threaded, so n_jobs changes no number.
    cell_fn = functools.partial(utility_cell, table=table, utility=utility, inner_folds=inner_folds)
    frames = run_prefetched(plan, cell_fn, n_jobs=int(utility["n_jobs"]))

    out = args.out or f"metrics/dp_utility_{args.dataset}.csv"
    tidy = write_rows(frames, out)
    print(f"{args.dataset}: utility rows for {tidy['config_key'].nunique()} configs -> {out}")
    return 0
