"""Stage ``dp_utility`` (study A): patient-level LOSO MLP on the original and on every DP release.

Two threshold protocols side by side: the paper's optimistic one (threshold chosen on the pooled LOSO
predictions) and an honest nested one (threshold chosen inside each training fold).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.params import load_params
from eegprivacy.tracking.sweep import SweepRunner, expand_grid

from experiments._study_a import code_hash, load_patient_table, release, tags
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


def run(args) -> int:
    all_params = load_params(args.params)
    params, utility = all_params["dp_release"], all_params["dp_utility"]
    label = params["datasets"][args.dataset]["label"]
    table = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    X, y, groups = table.X.to_numpy(), table.y, table.groups
    run_params = {"dp_release": params, "dp_utility": utility, "label": label, **table.base_config}
    cells_root = Path(args.cells) / "dp_utility" / args.dataset
    cell_base = {**table.base_config, "nested_seeds": utility["nested_seeds"],
                 "code_hash": code_hash("dp_release.py", "dp_utility.py")}

    def evaluate(features, seed, grid, labels=y):
        evaluation = LOSOEvaluation(threshold_grid=grid, random_state=seed, nested=seed < utility["nested_seeds"],
                                    n_jobs=utility["n_jobs"])
        return evaluation_rows(evaluation.evaluate(features, labels, groups), labels)

    def permuted(seed):
        """Negative control: labels shuffled across patients, so any score above chance is the protocol's bias."""
        return np.random.default_rng([0x5045524D, seed]).permutation(y)

    frames = []
    baseline = SweepRunner(
        name=f"dp_utility-{args.dataset}-none", study="a", dataset=args.dataset, out_dir=cells_root / "none",
        parent_tags=tags(table, "dp_utility", None, mechanism="none", model="mlp"),
        tags_fn=lambda cell: tags(table, "dp_utility", cell.seed, mechanism="none", model="mlp"),
        params=run_params, progress=not args.no_progress)
    baseline_cells = expand_grid({"mechanism": ["none"], "epsilon": [float("inf")]},
                                 seeds=range(utility["baseline_mlp_seeds"]),
                                 base=cell_base)
    frames.append(baseline.run(baseline_cells, lambda config, seed: evaluate(X, seed, ORIGINAL_GRID)))

    control = SweepRunner(
        name=f"dp_utility-{args.dataset}-permuted_labels", study="a", dataset=args.dataset,
        out_dir=cells_root / "permuted_labels",
        parent_tags=tags(table, "dp_utility", None, mechanism="none", model="mlp", attack="permuted_labels"),
        tags_fn=lambda cell: tags(table, "dp_utility", cell.seed, mechanism="none", model="mlp",
                                  attack="permuted_labels"),
        params=run_params, progress=not args.no_progress)
    control_cells = expand_grid({"mechanism": ["permuted_labels"], "epsilon": [float("inf")]},
                                seeds=range(utility["baseline_mlp_seeds"]),
                                base=cell_base)
    frames.append(control.run(control_cells,
                              lambda config, seed: evaluate(X, seed, ORIGINAL_GRID, labels=permuted(seed))))

    for mechanism in params["mechanisms"]:
        def cell_fn(config, seed, mechanism=mechanism):
            _, released = release(table, mechanism, config["epsilon"], config["delta"], config["clip_norm"], seed)
            return evaluate(released, seed, DP_GRID)

        cells = cells_for(table, params, mechanism, extra=cell_base)
        runner = SweepRunner(
            name=f"dp_utility-{args.dataset}-{mechanism}", study="a", dataset=args.dataset,
            out_dir=cells_root / mechanism,
            parent_tags=tags(table, "dp_utility", None, mechanism=mechanism, delta=params["delta"], model="mlp"),
            tags_fn=lambda cell, m=mechanism: tags(table, "dp_utility", cell.seed, mechanism=m, model="mlp",
                                                   epsilon=cell.config["epsilon"], delta=cell.config["delta"]),
            params=run_params, progress=not args.no_progress)
        frames.append(runner.run(cells, cell_fn))

    tidy = pd.concat(frames, ignore_index=True)
    out = Path(args.out or f"metrics/dp_utility_{args.dataset}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(out, index=False)
    print(f"{args.dataset}: utility rows for {tidy['config_key'].nunique()} configs -> {out}")
    return 0
