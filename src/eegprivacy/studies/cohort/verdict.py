"""The audit's verdict: ``summary.json`` (:func:`summary_document`) — the summary rows arranged by arm, mechanism
and ε, each with the MLflow metric it was logged under, with the mechanisms' guarantees, flags and the caveats —
and its lead, one point per mechanism (:func:`headline`), also logged as the run's headline columns
(:func:`headline_metrics`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eegprivacy.privacy import NO_NOISE, make_mechanism
from eegprivacy.studies.cohort.config import EPS_UNIT, PAPER_MECHANISMS, STAGE, AuditConfig
from eegprivacy.studies.cohort.loading import Cohort
from eegprivacy.studies.cohort.summary import PLACE_COLUMNS
from eegprivacy.studies.release import utility as study_a


def finite_or_none(value) -> float | None:
    """``value`` as a float, None where it is not finite (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def guarantees(cohort: Cohort, config: AuditConfig) -> list[dict]:
    """Per mechanism: the calibration at each ε and what the guarantee does and does not cover."""
    out = []
    for mechanism in config.mechanisms:
        for epsilon in config.epsilons:
            calib = make_mechanism(mechanism, epsilon, config.delta).calibrate(config.clip_norm, cohort.X.shape[1])
            mech = make_mechanism(mechanism, epsilon, config.delta)
            out.append({"mechanism": mechanism, "epsilon": epsilon, "delta": mech.delta, "eps_unit": EPS_UNIT,
                        "noise_scale": calib.noise_scale, "sensitivity": calib.sensitivity,
                        "sensitivity_norm": calib.sensitivity_norm, "formal_guarantee": calib.formal_guarantee,
                        "sampling": calib.sampling, "note": calib.note})
    return out


def mechanism_flags(cohort: Cohort, config: AuditConfig) -> dict[str, str]:
    """Per mechanism, what every table must say beside it: "" for a formal guarantee at every ε of the grid, the
    paper's flag for ``laplace_implemented`` ("no formal guarantee for d > 1"), else the ε without one."""
    flags = {}
    for mechanism in config.mechanisms:
        informal = [g["epsilon"] for g in guarantees(cohort, config)
                    if g["mechanism"] == mechanism and not g["formal_guarantee"]]
        if mechanism in PAPER_MECHANISMS and cohort.X.shape[1] > 1:
            flags[mechanism] = PAPER_MECHANISMS[mechanism]
        elif informal:
            flags[mechanism] = f"no formal guarantee at ε = {', '.join(f'{e:g}' for e in informal)}"
        else:
            flags[mechanism] = ""
    return flags


CAVEATS = (
    "ε is per patient (eps_unit: subject): the release is one vector per patient, the mean of all its windows.",
    "Labels are released in the clear: the guarantee covers the features only, not the 0/1 label column.",
    "Robust-scaling statistics (median, IQR) are fitted on the private table in each release; the ε is conditional "
    "on them (eps_covers: features; no end-to-end guarantee).",
    "Every formal guarantee here is under idealised sampling: the audit simulates releases with seeded numpy "
    "floating-point noise (textbook samplers, open to floating-point attacks; Mironov 2012). A release of the real "
    "cohort should draw its noise with OpenDP's exact samplers (release_table(..., sampler='opendp')).",
    "laplace_implemented (b = 2C/ε) is what the paper ran: no formal guarantee for d > 1 (not a full-vector ε-DP "
    "guarantee); it runs only when asked for by name.",
    "Each (mechanism, ε, seed) is a separate release: running several spends the sum of their ε on the same "
    "patients.",
)


def _json_value(value):
    """A summary cell as JSON: finite numbers, booleans and non-empty text; None for what is missing."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return finite_or_none(value)
    if isinstance(value, str):
        return value or None
    return None if value is None or pd.isna(value) else value


def _entry(row: pd.Series) -> dict:
    """One summary row as summary.json holds it: every column that has a value (the utility summary's test columns
    included), and the MLflow metric key its numbers were logged under."""
    out = {name: finite_or_none(row[name]) for name in ("value", "ci_low", "ci_high")}
    for column, value in row.items():
        if column in PLACE_COLUMNS or column in out:
            continue
        value = _json_value(value)
        if value is not None:
            out[column] = value
    out["mlflow_metric"] = row["key"]
    return out


def summary_document(cohort: Cohort, config: AuditConfig, rows: pd.DataFrame, run_id: str | None = None) -> dict:
    """summary.json: the headline numbers, each with the MLflow metric key it was logged under. The utility part is
    study A's summary (:func:`~eegprivacy.studies.cohort.summary.utility_summary`) arranged by arm, mechanism and
    ε; the horizons are its ``horizon`` rows, with the test that decided them (``correction``) and what their ε
    covers (``eps_covers``)."""
    # the first row of each (arm, metric[, mechanism][, ε]): one pass, not a filter of the table per lookup
    first_of: dict = {}
    for i, (arm_, metric_, mechanism_, epsilon_) in enumerate(zip(rows["arm"], rows["metric"], rows["mechanism"],
                                                                  rows["epsilon"].astype(float))):
        for key in ((mechanism_, epsilon_), (mechanism_, None), (None, epsilon_), (None, None)):
            first_of.setdefault((arm_, metric_, *key), i)

    def pick(arm, metric, mechanism=None, epsilon=None):
        i = first_of.get((arm, metric, mechanism, None if epsilon is None else float(epsilon)))
        return None if i is None else _entry(rows.iloc[i])

    metrics = [m for _, m, _ in study_a.SUMMARY_METRICS]
    released = rows[rows["mechanism"].isin(config.mechanisms) & np.isfinite(rows["epsilon"].astype(float))]
    released_arms = [a for a in dict.fromkeys(released["arm"]) if a not in ("reidentification", "membership")]
    utility = {mechanism: {f"{eps:g}": {f"{arm}_{metric}": pick(arm, metric, mechanism, eps)
                                        for arm in released_arms for metric in metrics
                                        if pick(arm, metric, mechanism, eps) is not None}
                           for eps in config.epsilons}
               for mechanism in config.mechanisms}
    # the non-private arms and their differences (baseline, clipped, permuted, baseline − permuted, ...)
    unreleased = rows[~np.isfinite(rows["epsilon"].astype(float)) & ~rows["arm"].isin(
        ["horizon", "reidentification", "membership"])]
    controls = {arm: {m: pick(arm, m) for m in metrics if pick(arm, m) is not None}
                for arm in dict.fromkeys(unreleased["arm"])}
    horizon_rows = rows[rows["arm"] == "horizon"]
    horizons, horizon_tests = {}, {}
    for mechanism in config.mechanisms:
        mine = horizon_rows[horizon_rows["mechanism"] == mechanism]
        tests = {}
        for _, row in mine.iterrows():
            metric = row["metric"].removesuffix("_horizon_epsilon")
            tests[metric] = {**_entry(row), "horizon": study_a.horizon_text(row["value"], row.get("horizon_tested"))}
        horizon_tests[mechanism] = tests
        auroc = tests.get("auroc")
        horizons[mechanism] = "none" if auroc is None else (auroc["value"] if auroc["value"] is not None
                                                            else auroc["horizon"])
    corrections = sorted(set(horizon_rows["correction"].dropna().astype(str)))
    covers = sorted(set(horizon_rows["eps_covers"].dropna().astype(str)))
    notes = sorted(set(horizon_rows["eps_covers_note"].dropna().astype(str))) if "eps_covers_note" in rows else []
    attacks = {}
    for kind, names in (("reidentification", ["top1_accuracy", "top1_accuracy_shuffled_control"]),
                        ("membership", ["auroc_distance", "auroc_likelihood"])):
        part = rows[rows["arm"] == kind]
        if part.empty:
            attacks[kind] = {"applies": False, "reason": cohort.reid_reason}
            continue
        table = {}
        for _, row in part.iterrows():
            if row["metric"] not in names:
                continue
            eps = "none" if not np.isfinite(row["epsilon"]) else f"{row['epsilon']:g}"
            table.setdefault(row["mechanism"], {}).setdefault(eps, {})[row["metric"]] = _entry(row)
        attacks[kind] = {"applies": True, **({"kind": cohort.reid_kind, "reason": cohort.reid_reason}
                                             if kind == "reidentification" else {}), "results": table}
    document = {
        "dataset": cohort.dataset, "dataset_version": cohort.dataset_version, "synthetic": cohort.synthetic,
        "stage": STAGE, "eps_unit": EPS_UNIT, "mlflow_summary_run": run_id,
        "cohort": cohort.summary, "config": config.to_dict(),
        "baseline": {m: pick("baseline", m) for m in metrics},
        "permuted_labels": {m: pick("permuted", m) for m in metrics},
        "controls": controls,
        "horizon_test": "; ".join(corrections),
        "horizon_rule": ("study A's dp_utility horizon test (eegprivacy.studies.release.utility.summarise) on the "
                         "one-sided bootstrap p-values of release − null: " + ("; ".join(corrections) or "none")),
        "eps_covers": "; ".join(covers), "eps_covers_note": "; ".join(notes),
        "mechanism_flags": mechanism_flags(cohort, config),
        "horizons": horizons, "horizon_tests": horizon_tests, "utility": utility, "attacks": attacks,
        "guarantees": guarantees(cohort, config), "caveats": list(CAVEATS),
    }
    document["headline"] = headline(document)
    return document


def headline(summary: dict) -> list[dict]:
    """The verdict's lead, one point per mechanism: the ε a steward would pick — the mechanism's utility horizon
    (the smallest ε of the grid from which its release beats the matched null), else the largest ε tried — with
    what the release keeps there (release AUROC, its matched null, release − null with the test's decision) and
    what it leaks (re-identification top-1 with its noiseless value, membership AUROC). Every number is an entry
    of ``summary`` (its ``utility`` and ``attacks``), copied with the MLflow metric it was logged as.

    Returns
    -------
    list of dict
        Per mechanism (config order): ``mechanism``, ``epsilon``, ``why`` ("horizon", "largest" or "not tested")
        and the entries ``release_auroc``, ``matched_null_auroc``, ``release_minus_null_auroc``,
        ``reidentification``, ``reidentification_none`` (no noise) and ``membership`` (None where absent).
    """
    config, attacks = summary["config"], summary["attacks"]
    reid = (attacks.get("reidentification") or {}).get("results") or {}
    member = (attacks.get("membership") or {}).get("results") or {}
    points = []
    for mechanism in config["mechanisms"]:
        horizon = summary["horizons"].get(mechanism)
        if isinstance(horizon, (int, float)) and math.isfinite(horizon):
            epsilon, why = float(horizon), "horizon"
        else:
            epsilon, why = float(max(config["epsilons"])), "not tested" if horizon == "not tested" else "largest"
        at = f"{epsilon:g}"
        cells = (summary.get("utility") or {}).get(mechanism, {}).get(at) or {}
        points.append({"mechanism": mechanism, "epsilon": epsilon, "why": why,
                       **{name: cells.get(name) for name in ("release_auroc", "matched_null_auroc",
                                                             "release_minus_null_auroc")},
                       "reidentification": (reid.get(mechanism) or {}).get(at, {}).get("top1_accuracy"),
                       "reidentification_none": (reid.get(NO_NOISE) or {}).get("none", {}).get("top1_accuracy"),
                       "membership": (member.get(mechanism) or {}).get(at, {}).get("auroc_likelihood")})
    return points


# The audit run's headline columns, per mechanism (the name says what the column holds, then which mechanism, so a
# narrow column still shows what it is) and the chance level of re-identification.
HEADLINE_COLUMNS = {"epsilon": "ε {}", "release_auroc": "AUROC {}", "reidentification": "re-identified {}"}
CHANCE_COLUMN = "re-identified by chance"


def headline_metrics(summary: dict) -> dict[str, float]:
    """The verdict's lead as the audit run's metrics, the columns a steward reads first in MLflow's runs table
    (:data:`HEADLINE_COLUMNS`): per mechanism the ε of :func:`headline`, the release's AUROC there and the share
    of patients re-identified there, and :data:`CHANCE_COLUMN`, to 3 decimals as a table shows them (the exact
    values are the summary metrics of the same run); a number the summary does not have is left out."""
    out = {}
    for point in summary.get("headline") or []:
        for name, column in HEADLINE_COLUMNS.items():
            value = point["epsilon"] if name == "epsilon" else (point.get(name) or {}).get("value")
            if value is not None:
                out[column.format(point["mechanism"])] = round(float(value), 3)
        chance = (point.get("reidentification") or {}).get("chance")
        if chance is not None:
            out[CHANCE_COLUMN] = round(float(chance), 3)
    return out


def headline_columns(config: AuditConfig) -> list[str]:
    """The runs-table columns of the audit's first screen (:func:`headline_metrics`), in reading order."""
    return [column.format(m) for m in config.mechanisms for column in HEADLINE_COLUMNS.values()] + [CHANCE_COLUMN]
