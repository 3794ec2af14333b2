"""The ``dp_scenarios`` sweep (study A, beyond the paper): the three deployment scenarios on one hospital split.

Per seed the cohort is split across hospitals (some patients at two), then released client-side, server-side
(GlobalID linkage, central release) and decentralised (local releases, FedAvg training through Flower), and each
is scored with leave-one-patient-out: the study A metrics (optimistic F1 threshold, Wilson intervals) and the
threshold-free AUROC of the held-out probabilities. Both rows of a patient seen twice are held out together.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation import DP_GRID, ORIGINAL_GRID, LOSOEvaluation
from eegprivacy.federated import FedAvgClassifier
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import aggregate, expand_grid, run_prefetched
from eegprivacy.privacy import NO_NOISE
from eegprivacy.privacy.deployment import (
    client_side_release,
    hospital_tables,
    server_side_release,
    split_across_hospitals,
)
from eegprivacy.privacy.linkage import LinkageKey
from eegprivacy.studies.release.config import DeploymentConfig, DPReleaseConfig, FederatedBaseline
from eegprivacy.studies.release.table import PatientTable, WindowTable, labelled_windows, sweep_runner
from eegprivacy.studies.release.utility import evaluation_rows


def _estimator(scenario: str, federated: FederatedBaseline):
    if scenario != "decentralised":
        return None  # the paper's central MLP (LOSOEvaluation's default)
    return FedAvgClassifier(hidden_layer_sizes=tuple(federated.hidden_layer_sizes), num_rounds=federated.num_rounds,
                            local_epochs=federated.local_epochs, learning_rate_init=federated.learning_rate_init,
                            backend=federated.backend)


def scenario_rows(scenario: str, mechanism: str, epsilon: float, seed: int, frame: pd.DataFrame, features,
                  config: DeploymentConfig, clip_norm: float, delta: float, key: LinkageKey | None) -> list[dict]:
    """Split, release and score one scenario for one seed: the LOSO rows, the AUROC and what the release was."""
    hospital_of_row = split_across_hospitals(frame, config.n_hospitals, config.shared_fraction, seed)
    tables = hospital_tables(frame, hospital_of_row, features, config.n_hospitals)
    if scenario == "server_side":
        released = server_side_release(tables, key, mechanism, epsilon, delta, clip_norm, seed)
    else:
        released = client_side_release(tables, mechanism, epsilon, delta, clip_norm, seed)
    fit_params = {"clients": released.hospital} if scenario == "decentralised" else None
    evaluation = LOSOEvaluation(estimator=_estimator(scenario, config.federated),
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


def scenario_cell(config: dict, seed: int, frame: pd.DataFrame, features, deployment: DeploymentConfig,
                  clip_norm: float, delta: float) -> list[dict]:
    """One cell, module-level so worker processes can run it. The server-side key is read here from the
    environment (as the stage read it) rather than handed over: key material never goes into a pickle."""
    key = LinkageKey.from_env() if config["scenario"] == "server_side" else None
    return scenario_rows(config["scenario"], config["mechanism"], config["epsilon"], seed, frame, features,
                         deployment, clip_norm, delta, key)


def run_table(windows: WindowTable, n_patients: int) -> PatientTable:
    """What the sweep runner tags runs and cells by: the dataset's identity and size, no features (a scenario
    cell builds its own tables from the windows)."""
    return PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                        pd.DataFrame(index=range(n_patients), columns=windows.feature_columns[:0]),
                        np.zeros(n_patients, int), np.arange(n_patients))


def scenario_sweeps(windows: WindowTable, config: DeploymentConfig, release: DPReleaseConfig, label: str, *,
                    cells_dir: str | Path, progress: bool, n_jobs: int) -> list[pd.DataFrame]:
    """One sweep per scenario × mechanism (the noiseless release included) over ε and seeds, their cells
    computed ahead in ``n_jobs`` processes; returns each sweep's per-seed rows."""
    frame = labelled_windows(windows, label)
    features = windows.feature_columns
    table = run_table(windows, frame["subject"].nunique())
    clip_norm, delta = release.clip_norm, release.delta
    base = {**table.base_config, "n_features": len(features), "label": label, "clip_norm": clip_norm,
            "delta": delta, "n_hospitals": config.n_hospitals, "shared_fraction": config.shared_fraction,
            "federated": json.dumps(config.federated.to_dict(), sort_keys=True), "code_hash": code_hash("dp_scenarios")}
    sweep = dict(cells_dir=cells_dir, progress=progress,
                 params={"deployment": config.to_dict(), "clip_norm": clip_norm, "delta": delta, "label": label,
                         **table.base_config})
    plan = []
    for scenario in config.scenarios:
        model = "fedavg_mlp" if scenario == "decentralised" else "mlp"
        for mechanism in [NO_NOISE, *config.mechanisms]:
            epsilons = [math.inf] if mechanism == NO_NOISE else [float(e) for e in config.epsilons]
            cells = expand_grid({"scenario": [scenario], "mechanism": [mechanism], "epsilon": epsilons},
                                seeds=range(config.noise_seeds), base=base)
            extra = {} if mechanism == NO_NOISE else {"delta": delta}
            plan.append((sweep_runner(table, "dp_scenarios", f"{scenario}-{mechanism}", mechanism=mechanism,
                                      model=model, split=f"{config.n_hospitals}_hospitals", **extra, **sweep), cells))
    cell_fn = functools.partial(scenario_cell, frame=frame, features=features, deployment=config, clip_norm=clip_norm,
                                delta=delta)
    return run_prefetched(plan, cell_fn, n_jobs=n_jobs)


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """Mean and CI over seeds per scenario, mechanism, ε and protocol (``n_seeds``: how many)."""
    return aggregate(tidy, ["dataset", "scenario", "mechanism", "epsilon", "protocol"]).rename(
        columns={"n": "n_seeds"})
