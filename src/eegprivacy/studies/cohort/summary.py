"""The audit's tidy summary rows (:func:`summarise`): study A's utility summary of the audit's utility cells,
unchanged, and the attacks beside chance, each row keyed by the MLflow metric it is logged under
(:func:`metric_key`); and the metrics the audit run logs from them (:func:`summary_metrics`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation import mean_ci, wilson_interval
from eegprivacy.privacy import NO_NOISE
from eegprivacy.studies.cohort.config import EPS_UNIT, AuditConfig
from eegprivacy.studies.cohort.loading import Cohort
from eegprivacy.studies.cohort.sweeps import Sweep
from eegprivacy.studies.release import utility as study_a

# Columns that place a row (in summary.json they are the keys of the nesting, not of the entry).
PLACE_COLUMNS = ("dataset", "dataset_version", "synthetic", "arm", "mechanism", "epsilon", "metric", "key")
# Numeric columns that describe a row rather than measure it: in summary.json, not logged as metrics.
DESCRIPTOR_COLUMNS = ("epsilon", "n", "n_seeds", "chance")


def metric_key(arm: str, mechanism: str, epsilon: float, metric: str, protocol: str = "") -> str:
    """The MLflow metric name of a summary row (the same name in rows.csv's ``key`` and summary.json):
    ``<arm>/<mechanism>/eps_<ε>/<protocol>/<metric>``, the parts that do not apply left out, as
    :func:`eegprivacy.studies.release.utility.summary_metrics` names dp_utility's."""
    eps = f"eps_{epsilon:g}" if np.isfinite(epsilon) else ""
    mech = "" if mechanism in (NO_NOISE, "permuted_labels") else mechanism
    protocol = protocol if isinstance(protocol, str) else ""
    return "/".join(p for p in (arm, mech, eps, protocol, metric) if p)


def utility_summary(cohort: Cohort, config: AuditConfig, sweeps: list[Sweep], cells_dir: str | Path) -> pd.DataFrame:
    """Study A's utility summary of the audit's utility cells: exactly
    :func:`eegprivacy.studies.release.utility.summarise` (arms, release − null, the horizon test and its columns)."""
    plan_ = [(s.runner, s.cells) for s in sweeps if s.kind == "utility"]
    return study_a.summarise(plan_, cells_dir, cohort.y, n_resamples=config.bootstrap, confidence=config.confidence,
                             epsilons=list(config.epsilons))


def summarise(cohort: Cohort, config: AuditConfig, sweeps: list[Sweep], frames: list[pd.DataFrame],
              cells_dir: str | Path) -> pd.DataFrame:
    """Tidy summary rows: study A's utility summary (:func:`utility_summary`, unchanged) and the attacks beside
    chance, each row with the dataset, ``eps_unit``, ``eps_covers`` where a release is involved, and ``key`` (its
    MLflow metric name)."""
    utility = utility_summary(cohort, config, sweeps, cells_dir)
    rows: list[dict] = []
    for sweep, tidy in zip(sweeps, frames):
        if sweep.kind == "utility":
            continue
        tidy = tidy.assign(epsilon=tidy["epsilon"].astype(float))
        by = ["mechanism", "epsilon", "metric"] + (["attacker"] if "attacker" in tidy else [])
        for keys, part in tidy.groupby(by, sort=False, dropna=False):
            record = dict(zip(by, keys))
            metric = record["metric"] if sweep.kind == "reidentification" else f"auroc_{record['attacker']}"
            value, n_seeds = float(part["value"].mean()), int(len(part))
            K = int(part["n"].iloc[0])
            if sweep.kind == "reidentification" and metric == "top1_accuracy":
                low, high = wilson_interval(int(round(value * K)), K)
                ci_over = "subjects"
            else:
                # a t-interval over a few seeds can reach past [0, 1]; rates and AUROCs cannot
                _, low, high = np.clip(mean_ci(part["value"].to_numpy(dtype=float)), 0.0, 1.0)
                ci_over = "seeds"
            released = record["mechanism"] != NO_NOISE
            rows.append({"arm": sweep.kind, "mechanism": record["mechanism"], "epsilon": record["epsilon"],
                         "metric": metric, "value": value, "ci_low": low, "ci_high": high, "ci_over": ci_over,
                         "n": K, "n_seeds": n_seeds, "chance": float(part["chance"].iloc[0]),
                         "attack_kind": cohort.reid_kind if sweep.kind == "reidentification" else "",
                         **({"eps_covers": study_a.EPS_COVERS} if released else {})})
    frame = pd.concat([utility, pd.DataFrame(rows)], ignore_index=True)
    frame.insert(0, "dataset", cohort.dataset)
    frame.insert(1, "dataset_version", cohort.dataset_version)
    frame.insert(2, "synthetic", cohort.synthetic)
    frame["eps_unit"] = EPS_UNIT
    frame["key"] = [metric_key(r.arm, r.mechanism, r.epsilon, r.metric, r.protocol)
                    for r in frame[["arm", "mechanism", "epsilon", "metric", "protocol"]].itertuples()]
    duplicated = frame["key"][frame["key"].duplicated()]
    if len(duplicated):
        raise AssertionError(f"two summary rows share the MLflow key {duplicated.iloc[0]!r}")
    return frame


def summary_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """What the audit run logs: every row's value under its key, and each other finite number of the row
    (interval, p-value, its Monte-Carlo error, adjusted p, α tested...) under ``<key>_<column>``; descriptors
    (ε, n, seeds, chance), booleans and text are not logged."""
    out = {}
    for _, row in rows.iterrows():
        for column, value in row.items():
            if column in PLACE_COLUMNS or column in DESCRIPTOR_COLUMNS or isinstance(value, (bool, np.bool_, str)):
                continue
            if isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(float(value)):
                out[row["key"] + ("" if column == "value" else f"_{column}")] = float(value)
    return out
