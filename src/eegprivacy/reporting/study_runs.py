"""Reading the MLflow store into tidy rows, the one job of this module (the input of ``eegprivacy report``).

It finds each study's finished parent runs of its headline stage (the newest per run name) and turns their
aggregates (``*_mean``, ``*_ci_low``, ``*_ci_high`` and what the run logs beside them: ``n``, ``ci_over``, p-values,
Holm families) into one row per number with the run's identity tags, the metric's range and, where a table tests its
cells from the logged intervals, the Holm-adjusted tests (:func:`with_holm`). The tables and captions
(:mod:`eegprivacy.reporting.study_reports`), the figures (:mod:`eegprivacy.reporting.study_figures`) and the
notebooks in ``notebooks/`` all read these rows, so a notebook and a report never disagree.

The headline runs are queried here (``mlflow.search_runs``, experiment names and store from ``tracking.runs``); the
lead sections read their own stages' runs (:mod:`eegprivacy.reporting.study_leads`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from eegprivacy.evaluation.cluster_bootstrap import holm
from eegprivacy.evaluation.intervals import interval_p_value
from eegprivacy.tracking.runs import EXPERIMENTS, portable_uri, search_runs, tracking_uri

# The stage whose parent runs hold each study's headline aggregates.
# Study B's are the report stage's per-dataset runs: they log the summary's cells with the p_holm of their family,
# so reports/study-b.md and reports/federated_mia_tables.md print one computation.
HEADLINE_STAGE = {"a": "dp_utility", "b": "federated_mia_report", "c": "embedding_audit"}
# Parents carry seed 'none' (children one seed each): the filter keeps the store from sending thousands of children.
SEARCH_FILTER = {s: f"tags.stage = '{stage}' and tags.seed = 'none' and attributes.status = 'FINISHED'"
                 for s, stage in HEADLINE_STAGE.items()}
ALPHA = 0.05  # a cell is marked significant when its Holm-adjusted p-value is below this
UNIT_RANGE = (0.0, 1.0)  # AUROC, accuracy, BPID@1: what a displayed interval is clipped to
# Study C's headline table shows estimates only: every claim is tested once, by the test the stage logged
# (``claim_<claim>_*`` on each parent run, :mod:`eegprivacy.studies.embedding_audit.claims`), and printed in the
# Claims section -- the same rows, tests, p and verdicts as reports/embedding_audit_cohorts.md. Nothing is
# re-tested here (a normal approximation of a bootstrap interval against 0.5 once starred cells the permutation
# test does not support).
DIAGNOSIS = "Diagnosis BA (subject-level)"
C_CHANCE: dict[str, float] = {}
C_RANGE = {"BPID@1": UNIT_RANGE, "MIA AUC (head, LiRA)": UNIT_RANGE, "MIA AUC (encoder)": UNIT_RANGE,
           DIAGNOSIS: UNIT_RANGE}


def no_runs_message(study: str, uri: str) -> str:
    """What a report says when the store holds no headline runs of the study.

    Parameters
    ----------
    study
        ``"a"``, ``"b"`` or ``"c"``.
    uri
        The tracking store that was read (printed as :func:`eegprivacy.tracking.runs.portable_uri` writes it).

    Returns
    -------
    str
        One sentence naming the stage, the experiment and the store, and how to fill it.
    """
    return (f"No finished `{HEADLINE_STAGE[study]}` parent runs in experiment `{EXPERIMENTS[study]}` of the "
            f"tracking store {portable_uri(uri)}. Run the pipeline (`make reproduce`) or point MLFLOW_TRACKING_URI at "
            "a store that holds them.")


def latest_parents(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest run per run name among ``mlflow.search_runs`` rows (sorted newest first), children dropped:
    a re-run sweep leaves older parents with the same name, and the newest is what the pipeline's outputs show."""
    if runs.empty:
        return runs
    if "tags.mlflow.parentRunId" in runs:
        runs = runs[runs["tags.mlflow.parentRunId"].isna()]
    runs = runs.sort_values("start_time", ascending=False)
    return runs.drop_duplicates("tags.mlflow.runName").reset_index(drop=True)


def parent_runs(study: str, uri: str | None = None) -> pd.DataFrame:
    """``latest_parents`` of the study's headline stage, read with ``mlflow.search_runs`` from ``uri``."""
    return latest_parents(search_runs(uri or tracking_uri(), EXPERIMENTS[study], SEARCH_FILTER[study]))


def _tag(run: pd.Series, name: str):
    value = run.get(f"tags.{name}")
    return None if pd.isna(value) else value


def _logged_ci_over(run: pd.Series, base: str):
    """What the run says an interval is over (``ci_over``: seeds, subjects, subjects+seeds, trials), or None.

    Looked up from the most to the least specific: a tag ``<metric>_ci_over``, a tag ``ci_over``, a param
    ``ci_over`` or ``<section>.ci_over``. A report states only what the run logs, so None means "as logged"."""
    candidates = [f"tags.{base.removeprefix('metrics.')}_ci_over", "tags.ci_over", "params.ci_over"]
    candidates += sorted(c for c in run.index if c.startswith("params.") and c.endswith(".ci_over"))
    for column in candidates:
        value = run.get(column)
        if value is not None and not pd.isna(value) and str(value).strip():
            return str(value).strip()
    return None


def _extract(runs: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """One row per (run, metric column matching ``metrics.<pattern>_mean``) with the pattern's named groups, the
    run's identity tags and the mean with its CI (NaN where the run logs none), the number of values behind the
    mean where the run logs it (``<metric>_n``; ``cells``: the sweep's cell count) and ``ci_over`` as logged."""
    regex = re.compile(rf"metrics\.{pattern}_mean")
    matches = [(c, m.groupdict()) for c in runs.columns if (m := regex.fullmatch(c))]
    rows = []
    for _, run in runs.iterrows():
        for column, groups in matches:
            if pd.isna(run[column]):
                continue
            base = column.removesuffix("_mean")
            rows.append({"run_id": run["run_id"], "run_name": _tag(run, "mlflow.runName"),
                         "dataset": _tag(run, "dataset"), "dataset_version": _tag(run, "dataset_version") or "",
                         "synthetic": _tag(run, "synthetic") == "true", "mechanism": _tag(run, "mechanism"),
                         "model": _tag(run, "model"), "encoder": _tag(run, "encoder"),
                         "run_epsilon": _tag(run, "epsilon"),
                         "run_attack": _tag(run, "attack"), **groups, "mean": run[column],
                         "ci_low": run.get(f"{base}_ci_low", np.nan), "ci_high": run.get(f"{base}_ci_high", np.nan),
                         "n": run.get(f"{base}_n", np.nan), "cells": run.get("metrics.cells", np.nan),
                         "logged_ci_over": _logged_ci_over(run, base),
                         "logged_p_value": run.get(f"{base}_p_value", np.nan),
                         "logged_p_holm": run.get(f"{base}_p_holm", np.nan),
                         "holm_family": run.get(f"tags.{base.removeprefix('metrics.')}_holm_family")})
    return pd.DataFrame(rows)


def epsilon_order(value) -> float:
    """ε as a number for sorting and plotting.

    Parameters
    ----------
    value
        ε as a run logs it or a pattern captures it (a number or its text, ``'inf'`` for no DP).

    Returns
    -------
    float
        The number; ``'inf'`` is ``inf`` and so sorts last, a value that is no number is NaN.
    """
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


# --- tidy results per study -----------------------------------------------------------------------------------

_A_METRIC = re.compile(r"metrics\.(?:(?P<arm>release|matched_null|release_minus_null)/(?P<mechanism>[^/]+)/"
                       r"eps_(?P<epsilon>[^/]+)|(?P<plain>baseline|permuted|clipped|baseline_minus_permuted|"
                       r"baseline_minus_clipped))/"
                       r"(?P<protocol>threshold_free|nested)/(?P<metric>auroc|balanced_accuracy)")


def tidy_a(runs: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: LOSO AUROC and nested balanced accuracy of the baseline, the noise-free scaled and clipped
    table, the permuted-label control, and per (mechanism, ε) the release, its matched null and their difference
    (with the p-value its fixed-sequence decision compares with α, ``p_adjusted``; ``p_holm`` of runs logged
    before it), read from each dataset's ``dp_utility-<dataset>-summary`` run (intervals over patients + seeds);
    the utility horizons, the test behind them and what their ε covers come from its tags."""
    if runs.empty or "tags.mlflow.runName" not in runs:
        return pd.DataFrame()
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    rows = []
    for _, run in runs.iterrows():
        horizons = {c.removeprefix("tags.utility_horizon/"): run[c] for c in runs.columns
                    if c.startswith("tags.utility_horizon/") and pd.notna(run[c])}
        for column in runs.columns:
            match = _A_METRIC.fullmatch(column)
            if not match or pd.isna(run[column]):
                continue
            g = match.groupdict()
            arm = g["arm"] or g["plain"]
            mechanism = g["mechanism"] or {"baseline": "none", "permuted": "permuted labels (control)",
                                           "clipped": "none, scaled + clipped (no noise)",
                                           "baseline_minus_permuted": "none − control",
                                           "baseline_minus_clipped": "none − scaled + clipped"}[arm]
            rows.append({"run_id": run["run_id"], "run_name": _tag(run, "mlflow.runName"),
                         "dataset": _tag(run, "dataset"), "dataset_version": _tag(run, "dataset_version") or "",
                         "synthetic": _tag(run, "synthetic") == "true", "arm": arm, "mechanism": mechanism,
                         "epsilon": g["epsilon"] or "—", "protocol": g["protocol"], "metric": g["metric"],
                         "mean": run[column], "ci_low": run.get(f"{column}_ci_low", np.nan),
                         "ci_high": run.get(f"{column}_ci_high", np.nan),
                         "p_adjusted": (adjusted if pd.notna(adjusted := run.get(f"{column}_p_adjusted"))
                                        else run.get(f"{column}_p_holm", np.nan)),
                         "p_label": "p_adj" if pd.notna(adjusted) else "p_Holm",
                         "horizon": horizons.get(f"{mechanism}/{g['metric']}", ""),
                         "horizon_test": _tag(run, "utility_horizon_test") or "Holm over the (mechanism, ε) cells",
                         "eps_covers": _tag(run, "eps_covers") or "features",
                         "eps_covers_note": _tag(run, "eps_covers_note") or "(not logged by this run)"})
    return pd.DataFrame(rows)


# --- tests and intervals from what the runs log ----------------------------------------------------------------

def with_holm(rows: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``p_value`` per tested cell (a finite ``chance``) and ``p_holm``, Holm-adjusted over every tested cell of
    the rows, which are one report table: a table of ~30 attack cells would call one of them leaky by luck at
    0.05 uncorrected. ``significant`` is ``p_holm < alpha`` (False where a cell is untested)."""
    out = rows.copy()
    out["p_value"] = [interval_p_value(r["mean"], r["ci_low"], r["ci_high"], r["chance"], r["n_seeds"],
                                       bool(r["t_interval"])) for _, r in out.iterrows()]
    out["p_holm"] = holm(out["p_value"].to_numpy()) if len(out) else np.array([])
    out["significant"] = out["p_holm"] < alpha
    return out


def displayed_interval(row) -> tuple[float, float, bool]:
    """(low, high, clipped): the interval clipped to the metric's range (``range_low``/``range_high``; no range,
    no clipping). A t-interval knows nothing of [0, 1]; tests use the interval as logged, only the display is
    clipped, and says so."""
    low, high = row.get("ci_low", np.nan), row.get("ci_high", np.nan)
    lo, hi = row.get("range_low", np.nan), row.get("range_high", np.nan)
    if pd.isna(low) or pd.isna(high) or pd.isna(lo) or pd.isna(hi):
        return low, high, False
    clipped = low < lo or high > hi
    return max(low, lo), min(high, hi), bool(clipped)


def tidy_b(runs: pd.DataFrame) -> pd.DataFrame:
    """Per dataset's ``federated_mia_report`` run and (model, ε): utility accuracy and, per attack, the AUROC of
    every attacker, each the mean over rounds and seeds of the summary ``metrics/federated_mia.csv`` holds, with
    its logged interval, ``ci_over`` (subjects+seeds, or seeds where logged so), p-value and ``p_holm``.

    No attacker is picked after seeing the scores (the maximum over attackers is biased upward). Nothing is
    re-tested here: ``p_holm`` is the report stage's (:func:`eegprivacy.studies.federated.report.with_holm`, Holm
    over the family of one printed table, named in ``holm_family``), the same number reports/federated_mia_tables.md
    prints; controls (``*_control``) carry none. A cell the run logs without a p_holm is untested."""
    rows = _extract(runs, r"summary/(?P<model>[^/]+)/eps_(?P<epsilon>[^/]+)/(?P<attack>[^/]+)/(?P<attacker>[^/]+)/"
                          r"(?P<metric>utility_accuracy|auroc)")
    if rows.empty:
        return pd.DataFrame()
    rows["attacker"] = rows["attacker"].where(rows["attack"] != "utility", "")
    rows["n_seeds"] = pd.to_numeric(rows["n"], errors="coerce")
    rows["ci_over"] = rows["logged_ci_over"].fillna("seeds")
    rows["t_interval"] = rows["ci_over"] == "seeds"
    rows["chance"] = 0.5
    rows["p_value"] = pd.to_numeric(rows["logged_p_value"], errors="coerce")
    rows["p_holm"] = pd.to_numeric(rows["logged_p_holm"], errors="coerce")
    rows["significant"] = rows["p_holm"] < ALPHA
    rows["range_low"], rows["range_high"] = UNIT_RANGE
    return rows.reset_index(drop=True)


C_METRICS = {  # label -> metric pattern (first match wins), from the embedding_audit parents' aggregates
    "L_A": r"unit_aeds/.*/l_a",
    "L_A control (permuted)": r"unit_attribute/subject_disjoint/.*/attacker_ridge/control_permuted",
    "AEDS": r"unit_aeds/.*/aeds",
    "BPID@1": r"unit_identity/.*/bpid_at_1",
    "MIA AUC (head, LiRA)": r"unit_membership/endpoint_membership_head/.*/attacker_lira_online/auc",
    "MIA AUC (encoder)": r"unit_membership/endpoint_membership_encoder/.*/auc",
    DIAGNOSIS: r"unit_subject_label/.*/balanced_accuracy",
    "Diagnosis BA control (permuted)": r"unit_subject_label/.*/control_permuted",
}


def c_weights(run_name: str, dataset: str, encoder: str) -> str:
    """A study C parent's weights from its name ``embedding_audit-<dataset>-<encoder>-<weights>``.

    Parameters
    ----------
    run_name
        The parent run's name (tag ``mlflow.runName``).
    dataset, encoder
        The run's ``dataset`` and ``encoder`` tags.

    Returns
    -------
    str
        The part after ``embedding_audit-<dataset>-<encoder>-``, or after ``-<encoder>-`` where the name carries
        the dataset otherwise.
    """
    prefix = f"embedding_audit-{dataset}-{encoder}-"
    return run_name.removeprefix(prefix) if run_name.startswith(prefix) else run_name.split(f"-{encoder}-", 1)[-1]


def tidy_c(runs: pd.DataFrame) -> pd.DataFrame:
    """Per cohort (the ``dataset`` tag) and encoder run (encoder × weights; the cross-encoder bridge run is left
    out): the audit's headline endpoints with their logged intervals, the diagnosis (subject-level label) where
    the cohort has one; the table keeps one row per (dataset, encoder, weights).

    What an interval is over is read from the run (``ci_over`` tag or param, :func:`_logged_ci_over`) and is
    "as logged" otherwise: the stage has logged seed t-intervals, window bootstraps and subject bootstraps at
    different times, and the report must not claim one. The membership AUCs are tested against 0.5 (a t-test
    when the run says ``seeds`` and logs n, else a normal approximation from the interval) and Holm-adjusted
    over the table."""
    if runs.empty:
        return pd.DataFrame()
    runs = runs[runs.get("tags.encoder", pd.Series(index=runs.index, dtype=object)) != "all"]
    frames = []
    for label, pattern in C_METRICS.items():
        rows = _extract(runs, pattern)
        if not rows.empty:
            frames.append(rows.drop_duplicates("run_id").assign(metric=label))  # first match per run
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows["weights"] = [c_weights(str(n), str(d), str(e))
                       for n, d, e in zip(rows["run_name"], rows["dataset"], rows["encoder"])]
    rows["n_seeds"] = pd.to_numeric(rows["n"], errors="coerce")
    rows["ci_over"] = rows["logged_ci_over"]
    rows["t_interval"] = (rows["ci_over"] == "seeds") & rows["n_seeds"].notna()
    rows["chance"] = rows["metric"].map(C_CHANCE).astype(float)
    tags = runs.set_index("run_id")
    for column, tag in (("provenance", "tags.provenance"), ("identity_link", "tags.identity_link")):
        rows[column] = rows["run_id"].map(tags[tag] if tag in tags else pd.Series(dtype=object)).fillna("—")
    rows["range_low"] = rows["metric"].map(lambda m: C_RANGE.get(m, (np.nan, np.nan))[0])
    rows["range_high"] = rows["metric"].map(lambda m: C_RANGE.get(m, (np.nan, np.nan))[1])
    return with_holm(rows)


TIDY = {"a": tidy_a, "b": tidy_b, "c": tidy_c}
