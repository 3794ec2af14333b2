"""The ``dp_scenarios`` sweep (study A, beyond the paper): the three deployment scenarios on one hospital split.

The patient table is the one ``dp_release`` publishes: the windows of the dataset's release condition
(``dp_release.datasets.<name>.condition``; null: each patient's windows share one condition). Per seed the cohort
is split across hospitals, ``shared_fraction`` of the patients at two, then released client-side, server-side
(GlobalID linkage, central release) and decentralised (local releases, FedAvg training through Flower), and each
is scored with leave-one-patient-out: the threshold-free LOSO AUROC of the held-out probabilities (the headline)
and the study A threshold metrics, every row on one threshold grid (``utility.THRESHOLD_GRID``). Both rows of a
patient seen twice are held out together.

A patient seen at two hospitals brings some of its *visits* to each (``deployment.datasets.<name>.visits``):

- ``recordings``: every recording is a visit, and a shared patient's recordings alternate between the two
  hospitals (patients with one recording are never shared);
- ``halves``: for a cohort with one recording per subject (MSU, eegmat's task recording), the first and the second
  half of each recording are its two visits (windows straddling the middle are left out, so the visits share no
  sample). The two visits come from one session, so a shared patient's two rows are more alike than rows from
  two real visits would be; the scenario still shows what composing (client-side) or merging (server-side) a
  patient's data at two sites costs.

A split that cannot share the asked fraction (too few patients with two visits) is an error, never a silent
smaller share.

The seed redraws the split and the MLP initialisation; the release noise is drawn independently per (mechanism,
ε, seed) as in ``dp_release`` (:func:`release_noise_seed`; ``dp_release.common_random_numbers`` shares it across
mechanisms and ε instead).

Every DP cell has a *matched null* (arm ``matched_null``): the same scenario, split, mechanism, noise draw and MLP
seed on the windows with every feature set to 0, so it scores what the protocol extracts from noise alone (LOSO on
pure noise can sit below 0.5: leaving a patient out tips the training classes against it). The summary gives
release − null paired by seed, with its interval over seeds.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation import LOSOEvaluation
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
from eegprivacy.studies.release.table import (
    PatientTable,
    WindowTable,
    labelled_windows,
    noise_generator,
    sweep_runner,
)
from eegprivacy.studies.release.table_attacks import recording_halves, window_length
from eegprivacy.studies.release.utility import THRESHOLD_GRID, evaluation_rows

# A decentralised cell's time relative to a central one (the longest-first schedule's estimate, :func:`cell_cost`):
# on MSU, one core, a central cell (84 batched MLP fits) took ~3 s and a decentralised one (84 FedAvg federations
# of 10 rounds x 5 local epochs through Flower) ~17 s.
DECENTRALISED_COST = 6.0
EPS_UNIT = "release"  # a scenario's ε is per release; the patient_epsilon rows give what one patient spends
DIFFERENCE_METRICS = ("auroc", "balanced_accuracy")  # release − matched null in the summary


def _estimator(scenario: str, federated: FederatedBaseline):
    if scenario != "decentralised":
        return None  # the paper's central MLP (LOSOEvaluation's default)
    return FedAvgClassifier(hidden_layer_sizes=tuple(federated.hidden_layer_sizes), num_rounds=federated.num_rounds,
                            local_epochs=federated.local_epochs, learning_rate_init=federated.learning_rate_init,
                            backend=federated.backend)


def release_noise_seed(mechanism: str, epsilon: float, seed: int, common_random_numbers: bool = False) -> int:
    """The seed the deployment releases draw their noise from (``privacy.deployment`` seeds one stream per
    hospital from it): taken from study A's (mechanism, ε, seed) noise stream
    (:func:`~eegprivacy.studies.release.table.noise_generator`), so two mechanisms or two ε on one split never
    share a noise draw rescaled."""
    return int(noise_generator(mechanism, epsilon, seed, common_random_numbers).integers(2**63))


def scenario_rows(scenario: str, mechanism: str, epsilon: float, seed: int, frame: pd.DataFrame, features,
                  config: DeploymentConfig, clip_norm: float, delta: float, key: LinkageKey | None,
                  arm: str = "release", common_random_numbers: bool = False) -> list[dict]:
    """Split, release and score one scenario for one seed: the LOSO rows, the AUROC and what the release was.
    ``arm = "matched_null"`` does all of it on the windows with the signal removed (every feature 0)."""
    if arm == "matched_null":
        frame = frame.copy()
        frame.loc[:, features] = 0.0  # in place: one block, not a column per feature
    elif arm != "release":
        raise ValueError(f"unknown arm {arm!r}; release or matched_null")
    hospital_of_row = split_across_hospitals(frame, config.n_hospitals, config.shared_fraction, seed)
    tables = hospital_tables(frame, hospital_of_row, features, config.n_hospitals)
    noise_seed = release_noise_seed(mechanism, epsilon, seed, common_random_numbers)
    if scenario == "server_side":
        released = server_side_release(tables, key, mechanism, epsilon, delta, clip_norm, noise_seed)
    else:
        released = client_side_release(tables, mechanism, epsilon, delta, clip_norm, noise_seed)
    fit_params = {"clients": released.hospital} if scenario == "decentralised" else None
    evaluation = LOSOEvaluation(estimator=_estimator(scenario, config.federated),
                                threshold_grid=THRESHOLD_GRID,
                                random_state=seed, nested=False, n_jobs=1)
    result = evaluation.evaluate(released.X, released.y, released.truth_group, fit_params=fit_params)
    rows = evaluation_rows(result, result.y_true)  # the threshold-free LOSO AUROC included
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
                         deployment, clip_norm, delta, key, config["arm"], config["common_random_numbers"])


def cell_cost(config: dict, seed: int) -> float:
    """A cell's estimated time (relative): the decentralised scenario's federated fits dominate the sweep, and
    come last in its job order, so they are started first (see :class:`~eegprivacy.pipeline.sweep.PrefetchedCells`)."""
    return DECENTRALISED_COST if config["scenario"] == "decentralised" else 1.0


def run_table(windows: WindowTable, n_patients: int) -> PatientTable:
    """What the sweep runner tags runs and cells by: the dataset's identity and size, no features (a scenario
    cell builds its own tables from the windows)."""
    return PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                        pd.DataFrame(index=range(n_patients), columns=windows.feature_columns[:0]),
                        np.zeros(n_patients, int), np.arange(n_patients))


def condition_windows(frame: pd.DataFrame, dataset: str, condition: str | None) -> pd.DataFrame:
    """The windows of the release condition (as ``table.load_patient_table`` forms patient vectors)."""
    present = sorted(frame["condition"].astype(str).unique())
    if condition is None:
        if (frame.groupby("subject")["condition"].nunique() > 1).any():
            raise ValueError(f"{dataset}: patients have windows of more than one condition ({present}); set "
                             f"dp_release.datasets.{dataset}.condition so each patient vector describes one")
        return frame
    if condition not in present:
        raise ValueError(f"{dataset}: no window of condition {condition!r}; the table holds {present}")
    return frame[frame["condition"] == condition]


def visits_of(config: DeploymentConfig, dataset: str) -> str:
    """What a visit is for ``dataset`` (``recordings`` unless ``deployment.datasets`` says otherwise)."""
    return config.datasets[dataset].visits if dataset in config.datasets else "recordings"


def half_visits(frame: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """The window table with ``recording`` naming each window's visit: the first or the second half of its
    recording (:func:`~eegprivacy.studies.release.table_attacks.recording_halves`; straddling windows dropped)."""
    first, second = recording_halves(frame, window_s)
    return pd.concat([first.assign(recording=first["recording"].astype(str) + "/first_half"),
                      second.assign(recording=second["recording"].astype(str) + "/second_half")]).sort_index()


def check_shared_fraction(frame: pd.DataFrame, dataset: str, config: DeploymentConfig) -> None:
    """Refuse a split that cannot put ``shared_fraction`` of the patients at two hospitals."""
    visits = frame.groupby("subject")["recording"].nunique()
    wanted = int(round(config.shared_fraction * len(visits))) if config.n_hospitals > 1 else 0
    if int((visits >= 2).sum()) < wanted:
        raise ValueError(f"{dataset}: shared_fraction {config.shared_fraction:g} asks for {wanted} of {len(visits)} "
                         f"patients at two hospitals, but only {int((visits >= 2).sum())} have two visits; set "
                         f"deployment.datasets.{dataset}.visits: halves (one recording per patient) or lower "
                         "deployment.shared_fraction")


def scenario_windows(windows: WindowTable, config: DeploymentConfig, label: str, condition: str | None,
                     features_params: str = "params/features.yaml") -> pd.DataFrame:
    """The labelled windows of the release condition, each assigned to a visit, checked for the shared
    fraction (ids stay in the frame, which never leaves this process's cells)."""
    dataset = windows.dataset
    frame = condition_windows(labelled_windows(windows, label), dataset, condition)
    if visits_of(config, dataset) == "halves":
        frame = half_visits(frame, window_length(dataset, features_params))
    check_shared_fraction(frame, dataset, config)
    return frame


def scenario_sweeps(windows: WindowTable, config: DeploymentConfig, release: DPReleaseConfig, *,
                    cells_dir: str | Path, progress: bool, n_jobs: int) -> list[pd.DataFrame]:
    """One sweep per scenario × mechanism (the noiseless release included) over ε, arm (a DP release and its
    matched null) and seeds, their cells computed ahead in ``n_jobs`` processes, decentralised ones first; returns
    each sweep's per-seed rows."""
    patients = release.datasets[windows.dataset]
    label, condition = patients.label, patients.condition
    frame = scenario_windows(windows, config, label, condition)
    features = windows.feature_columns
    table = run_table(windows, frame["subject"].nunique())
    clip_norm, delta = release.clip_norm, release.delta
    which = {"label": label, "visits": visits_of(config, windows.dataset),
             **({"condition": condition} if condition is not None else {})}
    base = {**table.base_config, "n_features": len(features), **which, "clip_norm": clip_norm,
            "delta": delta, "common_random_numbers": bool(release.common_random_numbers),
            "n_hospitals": config.n_hospitals, "shared_fraction": config.shared_fraction,
            "federated": json.dumps(config.federated.to_dict(), sort_keys=True), "code_hash": code_hash("dp_scenarios")}
    sweep = dict(cells_dir=cells_dir, progress=progress,
                 params={"deployment": config.to_dict(), "clip_norm": clip_norm, "delta": delta, **which,
                         "common_random_numbers": bool(release.common_random_numbers), **table.base_config})
    plan = []
    for scenario in config.scenarios:
        model = "fedavg_mlp" if scenario == "decentralised" else "mlp"
        for mechanism in [NO_NOISE, *config.mechanisms]:
            noiseless = mechanism == NO_NOISE
            grid = {"scenario": [scenario], "mechanism": [mechanism],
                    "epsilon": [math.inf] if noiseless else [float(e) for e in config.epsilons],
                    "arm": ["release"] if noiseless else ["release", "matched_null"]}
            cells = expand_grid(grid, seeds=range(config.noise_seeds), base=base)
            extra = {} if mechanism == NO_NOISE else {"delta": delta}
            plan.append((sweep_runner(table, "dp_scenarios", f"{scenario}-{mechanism}", mechanism=mechanism,
                                      model=model, split=f"{config.n_hospitals}_hospitals", **extra, **sweep), cells))
    cell_fn = functools.partial(scenario_cell, frame=frame, features=features, deployment=config, clip_norm=clip_norm,
                                delta=delta)
    return run_prefetched(plan, cell_fn, n_jobs=n_jobs, cost=cell_cost)


def release_minus_null(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of release − matched null (arm ``release_minus_null``, chance 0) for the
    :data:`DIFFERENCE_METRICS`, paired by seed: the two share the split, the noise draw and the MLP seed."""
    keys = ["dataset", "scenario", "mechanism", "epsilon", "protocol", "metric", "seed"]
    scores = tidy[tidy["metric"].isin(DIFFERENCE_METRICS) & tidy["arm"].isin(["release", "matched_null"])]
    paired = scores.pivot_table(index=keys, columns="arm", values="value").dropna()
    if paired.empty:
        return paired.reset_index()
    return (paired["release"] - paired["matched_null"]).rename("value").reset_index().assign(
        arm="release_minus_null", chance=0.0)


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """Mean and t-interval over seeds (``ci_over = seeds``: the seed redraws the split, the noise and the MLP)
    per scenario, arm (release, matched null, their paired difference), mechanism, ε and protocol (``n_seeds``:
    how many); ε is per release (``eps_unit``)."""
    rows = pd.concat([tidy, release_minus_null(tidy)], ignore_index=True)
    summary = aggregate(rows, ["dataset", "scenario", "arm", "mechanism", "epsilon", "protocol"]).rename(
        columns={"n": "n_seeds"})
    return summary.assign(ci_over="seeds", eps_unit=np.where(np.isfinite(summary["epsilon"]), EPS_UNIT, ""))
