"""The ``dp_utility`` sweep: patient-level leave-one-patient-out MLP on the original table and on every release.

Two threshold protocols side by side: the paper's optimistic one (threshold chosen on the pooled LOSO
predictions) and an honest nested one (threshold chosen inside each training fold). A permuted-label control
runs the same protocol with nothing to learn, so a score above chance there is the protocol's own bias.
:func:`evaluation_rows` is the one tidy form of a LOSO result; the scaling and deployment stages score with it too.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import expand_grid, run_prefetched
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import PatientTable, release, release_cells, sweep_runner

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "specificity", "balanced_accuracy", "f1",
                          "tn", "fp", "fn", "tp")
WILSON = ("accuracy", "recall", "specificity")
# Seeds the permuted-label control's permutation with a stream of its own (the MLP takes the plain seed).
_PERMUTATION_STREAM_TAG = 0x5045524D


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


def utility_cell(config: dict, seed: int, *, table: PatientTable, nested_seeds: int,
                 inner_folds: int | None) -> list[dict]:
    """One cell: the LOSO MLP on the original features (`none`), on them with shuffled labels (`permuted_labels`,
    the negative control: any score above chance is the protocol's bias) or on one seeded DP release. A pure
    function of (config, seed), so cells can be computed in any process."""
    X, y, groups = table.X.to_numpy(), table.y, table.groups
    mechanism = config["mechanism"]
    if mechanism == "none":
        features, labels, grid = X, y, ORIGINAL_GRID
    elif mechanism == "permuted_labels":
        features, labels = X, np.random.default_rng([_PERMUTATION_STREAM_TAG, seed]).permutation(y)
        grid = ORIGINAL_GRID
    else:
        _, features = release(table, mechanism, config["epsilon"], config["delta"], config["clip_norm"], seed)
        labels, grid = y, DP_GRID
    evaluation = LOSOEvaluation(threshold_grid=grid, random_state=seed, nested=seed < nested_seeds,
                                inner_folds=inner_folds)
    return evaluation_rows(evaluation.evaluate(features, labels, groups), labels)


def inner_folds_of(config: DPUtilityConfig) -> int | None:
    """The nested protocol's inner split: None for LOSO, else the number of folds."""
    return None if config.nested_inner_folds == "loso" else config.nested_inner_folds


def utility_sweeps(table: PatientTable, release_config: DPReleaseConfig, config: DPUtilityConfig, label: str, *,
                   cells_dir: str | Path, progress: bool) -> list[pd.DataFrame]:
    """The baseline, the permuted-label control and one sweep per mechanism (an MLflow parent run each), their
    cells computed ahead in ``config.n_jobs`` processes; returns each sweep's per-seed rows."""
    inner_folds = inner_folds_of(config)
    cell_base = {**table.base_config, "nested_seeds": config.nested_seeds, "nested_inner": inner_folds or "loso",
                 "code_hash": code_hash("dp_utility")}
    params = {"dp_release": release_config.to_dict(), "dp_utility": config.to_dict(), "label": label,
              **table.base_config}
    sweep = dict(cells_dir=cells_dir, params=params, progress=progress, model="mlp")
    seeds = range(config.baseline_mlp_seeds)
    plan = [
        (sweep_runner(table, "dp_utility", "none", mechanism="none", **sweep),
         expand_grid({"mechanism": ["none"], "epsilon": [math.inf]}, seeds=seeds, base=cell_base)),
        (sweep_runner(table, "dp_utility", "permuted_labels", mechanism="none", attack="permuted_labels", **sweep),
         expand_grid({"mechanism": ["permuted_labels"], "epsilon": [math.inf]}, seeds=seeds, base=cell_base)),
    ]
    for mechanism in release_config.mechanisms:
        plan.append((sweep_runner(table, "dp_utility", mechanism, mechanism=mechanism, delta=release_config.delta,
                                  **sweep), release_cells(table, release_config, mechanism, extra=cell_base)))
    # Whole cells in n_jobs processes, each fitting one MLP at a time: the optimistic-only cells (most of them)
    # have nothing else to run in parallel. Every fit is seeded and single-threaded, so n_jobs changes no number.
    cell_fn = functools.partial(utility_cell, table=table, nested_seeds=config.nested_seeds, inner_folds=inner_folds)
    return run_prefetched(plan, cell_fn, n_jobs=config.n_jobs)
