"""Stage ``dp_scenarios`` (study A, beyond the paper): the three deployment scenarios on one hospital split.

Per seed the cohort is split across hospitals (some patients at two), then released client-side, server-side
(GlobalID linkage, central release) and decentralised (local releases, FedAvg training through Flower), and each
is scored with leave-one-patient-out: the study A metrics (optimistic F1 threshold, Wilson intervals) and the
threshold-free AUROC of the held-out probabilities. Both rows of a patient seen twice are held out together.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.evaluation.dp_figures import scenarios_vs_epsilon
from eegprivacy.federated import FedAvgClassifier
from eegprivacy.params import load_params
from eegprivacy.privacy import NO_NOISE
from eegprivacy.privacy.deployment import (
    SCENARIOS,
    client_side_release,
    hospital_tables,
    server_side_release,
    split_across_hospitals,
)
from eegprivacy.privacy.linkage import LinkageKey
from eegprivacy.tracking.sweep import aggregate, expand_grid, run_prefetched

from experiments._study_a import (
    PatientTable,
    code_hash,
    labelled_windows,
    load_window_table,
    sweep_runner,
    write_rows,
)
from experiments.dp_utility import evaluation_rows

NAME = "dp-scenarios"
HELP = ("Study A: client-side, server-side (HMAC GlobalID linkage; needs EEGPRIVACY_LINKAGE_KEY or "
        "EEGPRIVACY_LINKAGE_KEY_FILE) and decentralised (Flower FedAvg) deployment of the DP release across "
        "hospitals, LOSO utility per scenario × ε × seed.")


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", default="eegmat", help="dataset with a features table")
    parser.add_argument("--params", default="params/deployment.yaml", help="deployment scenario params")
    parser.add_argument("--release-params", default="params/dp_release.yaml",
                        help="clip norm, δ and the patient label per dataset")
    parser.add_argument("--out", help="tidy per-seed rows (default metrics/dp_scenarios_<dataset>.csv)")
    parser.add_argument("--metrics", help="headline JSON (default metrics/dp_scenarios_<dataset>.json)")
    parser.add_argument("--figure", help="figure (default reports/figures/dp_scenarios_<dataset>.png)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")
    parser.add_argument("--no-progress", action="store_true")


def stage_code_hash() -> str:
    """The study-A code hash plus what only a scenario cell runs (deployment, linkage, the federated layer), so a
    cached cell is recomputed when any of them changes."""
    import eegprivacy

    package = Path(eegprivacy.__file__).parent
    digest = hashlib.sha256(code_hash("dp_utility.py", "dp_scenarios.py").encode())
    for path in [package / "privacy" / "deployment.py", package / "privacy" / "linkage.py",
                 *sorted((package / "federated").glob("*.py"))]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _estimator(scenario: str, federated: dict):
    if scenario != "decentralised":
        return None  # the paper's central MLP (LOSOEvaluation's default)
    return FedAvgClassifier(hidden_layer_sizes=tuple(federated["hidden_layer_sizes"]),
                            num_rounds=federated["num_rounds"], local_epochs=federated["local_epochs"],
                            learning_rate_init=federated["learning_rate_init"], backend=federated["backend"])


def scenario_rows(scenario: str, mechanism: str, epsilon: float, seed: int, frame: pd.DataFrame, features,
                  params: dict, clip_norm: float, delta: float, key: LinkageKey | None) -> list[dict]:
    hospital_of_row = split_across_hospitals(frame, params["n_hospitals"], params["shared_fraction"], seed)
    tables = hospital_tables(frame, hospital_of_row, features, params["n_hospitals"])
    if scenario == "server_side":
        released = server_side_release(tables, key, mechanism, epsilon, delta, clip_norm, seed)
    else:
        released = client_side_release(tables, mechanism, epsilon, delta, clip_norm, seed)
    fit_params = {"clients": released.hospital} if scenario == "decentralised" else None
    evaluation = LOSOEvaluation(estimator=_estimator(scenario, params["federated"]),
                                threshold_grid=ORIGINAL_GRID if mechanism == NO_NOISE else DP_GRID,
                                random_state=seed, nested=False, n_jobs=1)
    result = evaluation.evaluate(released.X, released.y, released.truth_group, fit_params=fit_params)
    rows = evaluation_rows(result, result.y_true)
    rows.append({"protocol": "threshold_free", "metric": "auroc", "value": auroc(result.y_true, result.proba),
                 "chance": 0.5, "n": len(result.y_true)})
    rows += [{"protocol": "release", "metric": name, "value": float(value)}
             for name, value in (("patient_epsilon", released.patient_epsilon), ("n_rows", len(released.X)),
                                 ("n_patients", len(result.y_true)),
                                 ("n_duplicates_merged", released.info.get("n_duplicates_merged", 0)))]
    return rows


def scenario_cell(config: dict, seed: int, frame: pd.DataFrame, features, params: dict, clip_norm: float,
                  delta: float) -> list[dict]:
    """One cell, module-level so worker processes can run it. The server-side key is read here from the
    environment (as the stage read it) rather than handed over: key material never goes into a pickle."""
    key = LinkageKey.from_env() if config["scenario"] == "server_side" else None
    return scenario_rows(config["scenario"], config["mechanism"], config["epsilon"], seed, frame, features, params,
                         clip_norm, delta, key)


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    return aggregate(tidy, ["dataset", "scenario", "mechanism", "epsilon", "protocol"]).rename(
        columns={"n": "n_seeds"})


def write_json(summary: pd.DataFrame, path) -> None:
    keep = summary[summary["metric"].isin(["balanced_accuracy", "auroc", "patient_epsilon"])]
    out = {}
    for r in keep.to_dict("records"):
        eps = "none" if not np.isfinite(r["epsilon"]) else f"eps_{r['epsilon']:g}"
        out["/".join([r["scenario"], r["mechanism"], eps, r["protocol"], r["metric"]])] = {
            k: (None if isinstance(v, float) and not np.isfinite(v) else v)
            for k, v in r.items() if k in ("value", "ci_low", "ci_high", "n_seeds", "chance")}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def run(args) -> int:
    params = load_params(args.params, "deployment")
    release_params = load_params(args.release_params, "dp_release")
    clip_norm, delta = release_params["clip_norm"], release_params["delta"]
    scenarios = list(params["scenarios"])
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise ValueError(f"unknown scenarios {sorted(unknown)}; known: {list(SCENARIOS)}")
    # Fail before any work: the server-side scenario has no default key and refuses to run without one.
    if "server_side" in scenarios:
        LinkageKey.from_env()

    label = release_params["datasets"][args.dataset]["label"]
    windows = load_window_table(args.dataset, features_dir=args.features_dir)
    frame = labelled_windows(windows, label)
    features = windows.feature_columns
    n_patients = frame["subject"].nunique()
    table = PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                         pd.DataFrame(index=range(n_patients), columns=features[:0]), np.zeros(n_patients, int),
                         np.arange(n_patients))
    base = {**table.base_config, "n_features": len(features), "label": label, "clip_norm": clip_norm,
            "delta": delta, "n_hospitals": params["n_hospitals"], "shared_fraction": params["shared_fraction"],
            "federated": json.dumps(params["federated"], sort_keys=True),
            "code_hash": stage_code_hash()}
    seeds = range(params["noise_seeds"])
    sweep = dict(cells_dir=args.cells, progress=not args.no_progress,
                 params={"deployment": params, "clip_norm": clip_norm, "delta": delta, "label": label,
                         **table.base_config})
    plan = []
    for scenario in scenarios:
        model = "fedavg_mlp" if scenario == "decentralised" else "mlp"
        for mechanism in [NO_NOISE, *params["mechanisms"]]:
            epsilons = [math.inf] if mechanism == NO_NOISE else [float(e) for e in params["epsilons"]]
            cells = expand_grid({"scenario": [scenario], "mechanism": [mechanism], "epsilon": epsilons},
                                seeds=seeds, base=base)
            extra = {} if mechanism == NO_NOISE else {"delta": delta}
            plan.append((sweep_runner(table, "dp_scenarios", f"{scenario}-{mechanism}", mechanism=mechanism,
                                      model=model, split=f"{params['n_hospitals']}_hospitals", **extra, **sweep),
                         cells))
    cell_fn = functools.partial(scenario_cell, frame=frame, features=features, params=params, clip_norm=clip_norm,
                                delta=delta)
    frames = run_prefetched(plan, cell_fn, n_jobs=getattr(args, "jobs", 1))
    out = args.out or f"metrics/dp_scenarios_{args.dataset}.csv"
    tidy = write_rows(frames, out)
    summary = summarise(tidy)
    write_json(summary, args.metrics or f"metrics/dp_scenarios_{args.dataset}.json")
    fig = scenarios_vs_epsilon(summary, panels=[("balanced_accuracy", "optimistic"), ("auroc", "threshold_free")],
                               synthetic=windows.synthetic,
                               title=f"{args.dataset}: deployment scenarios ({params['n_hospitals']} hospitals)")
    figure = Path(args.figure or f"reports/figures/dp_scenarios_{args.dataset}.png")
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=120)
    plt.close(fig)
    print(f"{args.dataset}: {tidy['config_key'].nunique()} scenario configs x {len(seeds)} seeds -> {out}")
    return 0
