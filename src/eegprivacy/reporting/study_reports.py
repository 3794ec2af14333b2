"""Per-study Markdown reports and figures drawn from MLflow runs only (``eegprivacy report``).

It lives in the tracking layer, the top of data → signal → privacy/models → attacks/evaluation → tracking: it
reads the tracking store and needs ``tracking.runs`` (experiment names, the store's URI), which no lower layer may
import.
Every number in a report is a metric of a finished parent run (the sweep's aggregates ``*_mean``, ``*_ci_low``,
``*_ci_high``) and its row cites that run, so a report can be checked against the store and rebuilt at any time
without rerunning a stage. The notebooks in ``notebooks/`` reuse the parsing and drawing below, so a notebook and
the report never disagree.

Figures are drawn on a ``matplotlib.figure.Figure`` passed in (no pyplot, no backend switch), so the same code
renders a PNG here and an inline figure in a notebook.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.evaluation.cluster_bootstrap import holm
from eegprivacy.evaluation.intervals import interval_p_value  # noqa: F401  (the tables' test, re-exported)
from eegprivacy.tracking.runs import EXPERIMENTS, portable_uri, tracking_uri

STUDIES = ("a", "b", "c")
TITLES = {"a": "Study A — DP feature release", "b": "Study B — federated membership inference",
          "c": "Study C — embedding audit"}
# The stage whose parent runs hold each study's headline aggregates.
# Study B's are the report stage's per-dataset runs: they log the summary's cells with the p_holm of their family,
# so reports/study-b.md and reports/federated_mia_tables.md print one computation.
HEADLINE_STAGE = {"a": "dp_utility", "b": "federated_mia_report", "c": "embedding_audit"}
# Parents carry seed 'none' (children one seed each): the filter keeps the store from sending thousands of children.
SEARCH_FILTER = {s: f"tags.stage = '{stage}' and tags.seed = 'none' and attributes.status = 'FINISHED'"
                 for s, stage in HEADLINE_STAGE.items()}
# Study A's headline columns: which arm a value is, and of which metric.
A_COLUMNS = {"baseline": "value", "permuted": "value", "clipped": "value", "release": "value",
             "matched_null": "matched null", "release_minus_null": "− null", "baseline_minus_permuted": "value",
             "baseline_minus_clipped": "value"}
A_METRICS = {"auroc": "AUROC", "balanced_accuracy": "BA (nested)"}
LABELS = ("dataset", "dataset version", "mechanism", "ε", "model", "encoder", "weights", "CI over",
          "run")  # non-number columns
ALPHA = 0.05  # a cell is marked significant when its Holm-adjusted p-value is below this
CORRECTION = "Holm"
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
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri or tracking_uri())
    try:
        runs = mlflow.search_runs(experiment_names=[EXPERIMENTS[study]], filter_string=SEARCH_FILTER[study])
    finally:
        mlflow.set_tracking_uri(previous)
    return latest_parents(runs)


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


def _epsilon_order(value) -> float:
    """ε as a number for sorting and plotting; 'inf' (no DP) sorts last."""
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


def ci_over_text(row) -> str:
    """The ``CI over`` column: what the interval resamples (as the run logs it, else "as logged"), with
    ``t(n−1)`` when it is a Student-t interval over n seeds, so a 3-seed t(2) interval reads as one."""
    over = row.get("ci_over")
    text = "as logged" if over is None or pd.isna(over) else str(over)
    n = row.get("n_seeds", np.nan)
    if row.get("t_interval") and pd.notna(n) and n >= 2:
        text += f", t({int(n) - 1})"
    return text


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


def tested_text(row) -> str:
    """A B or C table cell: ``mean [low, high]``, ``clipped`` where the interval was, and ``(p_Holm …)`` with
    ``*`` where the Holm-adjusted test is significant."""
    low, high, clipped = displayed_interval(row)
    text = cell(row["mean"], low, high) + (" clipped" if clipped else "")
    p = row.get("p_holm", np.nan)
    if pd.notna(p):
        text += f" (p_Holm {p:.3f}{' *' if p < ALPHA else ''})"
    return text


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


def _c_weights(run_name: str, dataset: str, encoder: str) -> str:
    """A study C parent's weights from its name ``embedding_audit-<dataset>-<encoder>-<weights>`` (the part after
    ``-<encoder>-`` where the name carries the dataset otherwise)."""
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
    rows["weights"] = [_c_weights(str(n), str(d), str(e))
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


# --- headline tables --------------------------------------------------------------------------------------------

def cell(mean: float, low: float = np.nan, high: float = np.nan) -> str:
    """``mean [low, high]`` with three decimals (the CI only where the run logs one)."""
    if pd.isna(mean):
        return "—"
    if pd.isna(low) or pd.isna(high):
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _dataset_label(row) -> str:
    return f"{row['dataset']} **SYNTHETIC**" if row["synthetic"] else row["dataset"]


def _wide(rows: pd.DataFrame, keys: list[str], column: str, text) -> pd.DataFrame:
    """One table row per ``keys``, one column per value of ``column``, cells from ``text(row)``."""
    rows = rows.assign(_cell=[text(r) for _, r in rows.iterrows()])
    table = rows.pivot_table(index=keys, columns=column, values="_cell", aggfunc="first", fill_value="—", sort=False)
    return table.reset_index().rename_axis(columns=None)


def b_column(row) -> str:
    """Study B's column for a row: ``utility accuracy`` or ``AUROC <attack> (<attacker>)``, one per attacker."""
    if row["attack"] == "utility":
        return "utility accuracy"
    return f"AUROC {row['attack']} ({row['attacker']})"


def b_column_order(row) -> tuple:
    """Utility first, then each attack beside its untrained control, attackers in name order."""
    attack = row["attack"]
    return (attack != "utility", attack.removesuffix("_untrained_control"), attack, row["attacker"])


def _run_ci_over(rows: pd.DataFrame) -> pd.Series:
    """Each row's run's ``CI over`` text: the distinct :func:`ci_over_text` of the run's cells, sorted and joined
    (one table row per run; sorted, so the text does not follow the order MLflow returns the cells in)."""
    text = pd.Series([ci_over_text(r) for _, r in rows.iterrows()], index=rows.index)
    joined = text.groupby(rows["run_id"]).agg(lambda v: "; ".join(sorted(set(v))))
    return rows["run_id"].map(joined)


def headline_table(study: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The study's headline table: label columns (dataset, version, configuration) then values, then the run."""
    rows = rows.assign(dataset=[_dataset_label(r) for _, r in rows.iterrows()],
                       version=rows["dataset_version"].str.slice(0, 12), run=rows["run_id"].str.slice(0, 8),
                       eps=rows["epsilon"] if "epsilon" in rows else "")
    rows = rows.assign(_eps=rows["eps"].map(_epsilon_order).fillna(np.inf))
    if study == "a":
        kind = rows["mechanism"].map(lambda m: 0 if m.startswith("none") else 2 if "control" in m else 1)
        rows = rows.assign(_kind=kind, _column=rows["arm"].map(A_COLUMNS) + " " + rows["metric"].map(A_METRICS))
        rows = rows.sort_values(["dataset", "_kind", "mechanism", "_eps"])
        table = _wide(rows, ["dataset", "version", "mechanism", "eps", "run"], "_column",
                      lambda r: cell(r["mean"], r["ci_low"], r["ci_high"])
                      + (f" ({r['p_label']} {r['p_adjusted']:.3f})" if pd.notna(r.get("p_adjusted")) else ""))
        order = [f"{a} {m}" for m in A_METRICS.values() for a in dict.fromkeys(A_COLUMNS.values())]
        table = table[[c for c in table.columns if c not in order] + [c for c in order if c in table]]
        names = {"eps": "ε"}
    elif study == "b":
        rows = rows.assign(_column=[b_column(r) for _, r in rows.iterrows()],
                           _order=[b_column_order(r) for _, r in rows.iterrows()], ci_over=_run_ci_over(rows))
        rows = rows.sort_values(["dataset", "model", "_eps", "_order"])
        table = _wide(rows, ["dataset", "version", "model", "eps", "ci_over", "run"], "_column", tested_text)
        columns = rows.drop_duplicates("_column").sort_values("_order")["_column"].tolist()
        table = table[[c for c in table.columns if c not in columns] + columns]
        names = {"eps": "ε", "ci_over": "CI over"}
    else:
        rows = rows.assign(ci_over=_run_ci_over(rows)).sort_values(["dataset", "encoder", "weights"])
        table = _wide(rows, ["dataset", "version", "encoder", "weights", "provenance", "identity_link", "ci_over",
                             "run"], "metric", tested_text)
        table = table[[c for c in table.columns if c not in C_METRICS] + [m for m in C_METRICS if m in table]]
        names = {"ci_over": "CI over", "identity_link": "BPID@1 links"}
    table = table.rename(columns={"version": "dataset version", **names})
    return table[[c for c in table.columns if c != "run"] + ["run"]]


# --- figures ------------------------------------------------------------------------------------------------------

def _title(text: str, synthetic: bool) -> str:
    return f"[SYNTHETIC DATA] {text}" if synthetic else text


def _yerr(part: pd.DataFrame) -> np.ndarray:
    """Error bars from the displayed interval (clipped to the metric's range, :func:`displayed_interval`)."""
    shown = [displayed_interval(r)[:2] for _, r in part.iterrows()]
    bounds = pd.DataFrame(shown, index=part.index, columns=["low", "high"], dtype=float)
    low = (part["mean"] - bounds["low"]).clip(lower=0).fillna(0)
    high = (bounds["high"] - part["mean"]).clip(lower=0).fillna(0)
    return np.vstack([low.to_numpy(), high.to_numpy()])


def draw_a(rows: pd.DataFrame, fig) -> None:
    """Per dataset, LOSO AUROC against ε: each mechanism's release (solid) and matched null (dashed), the
    non-private baseline (black) and the permuted-label control (grey) as levels with their bands; intervals over
    patients + seeds."""
    datasets = sorted(rows["dataset"].unique())
    fig.set_size_inches(5.5 * len(datasets), 4.0)
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    auroc = rows[rows["metric"] == "auroc"]
    mechanisms = sorted(auroc.loc[auroc["arm"] == "release", "mechanism"].unique())
    colors = {m: f"C{i}" for i, m in enumerate(mechanisms)}
    for ax, dataset in zip(axes, datasets):
        part = auroc[auroc["dataset"] == dataset]
        for arm, color, ls in (("baseline", "black", "-"), ("permuted", "grey", ":")):
            level = part[part["arm"] == arm]
            if len(level):
                ax.axhline(level["mean"].iloc[0], color=color, lw=1, ls=ls, label=level["mechanism"].iloc[0])
                ax.axhspan(level["ci_low"].iloc[0], level["ci_high"].iloc[0], color=color, alpha=0.1)
        for mechanism in mechanisms:
            for arm, ls in (("release", "-"), ("matched_null", "--")):
                line = part[(part["arm"] == arm) & (part["mechanism"] == mechanism)]
                line = line.assign(x=line["epsilon"].map(_epsilon_order)).sort_values("x")
                if line.empty:
                    continue
                ax.errorbar(line["x"], line["mean"], yerr=_yerr(line), marker="o" if arm == "release" else "x",
                            capsize=3, ls=ls, color=colors[mechanism],
                            label=mechanism if arm == "release" else f"{mechanism} (matched null)")
        ax.set_xscale("log")
        ax.set(xlabel="ε per patient", ylabel="LOSO AUROC",
               title=_title(f"{dataset}: release vs matched null", part["synthetic"].any()))
        ax.legend(fontsize=6)
    fig.tight_layout()


def draw_b(rows: pd.DataFrame, fig) -> None:
    """Per dataset (a row of panels): utility accuracy vs ε per model, then one panel per attack with the AUROC of
    every attacker (no pick of the strongest: colour = model, marker = attacker) and its untrained-model control
    dotted, with the per-cell 95 % intervals clipped to [0, 1]. ε = inf (no DP) is the rightmost point."""
    datasets = sorted(rows["dataset"].unique())
    attacks = sorted(a for a in rows["attack"].unique() if a != "utility" and not a.endswith("_untrained_control"))
    attacks += sorted({a.removesuffix("_untrained_control") for a in rows["attack"]} - {"utility", *attacks})
    models = sorted(rows["model"].dropna().unique())
    attackers = sorted(a for a in rows["attacker"].unique() if a)
    markers = {a: "osD^v<>"[i % 7] for i, a in enumerate(attackers)}
    fig.set_size_inches(3.6 * (1 + len(attacks)), 3.4 * len(datasets))
    axes = fig.subplots(len(datasets), 1 + len(attacks), squeeze=False)
    for panels, dataset in zip(axes, datasets):
        part = rows[rows["dataset"] == dataset]
        epsilons = sorted(part["epsilon"].unique(), key=lambda e: _epsilon_order(e) if e != "inf" else np.inf)
        position = {e: i for i, e in enumerate(epsilons)}
        base = part["attack"].str.removesuffix("_untrained_control")
        panel_rows = [("utility", part["attack"] == "utility", "utility accuracy (mean over rounds)")]
        panel_rows += [(a, base == a, f"AUROC {a} (every attacker)") for a in attacks]
        for ax, (attack, mask, what) in zip(panels, panel_rows):
            for (model, attacker, name), line in part[mask].groupby(["model", "attacker", "attack"]):
                line = line.assign(x=line["epsilon"].map(position)).sort_values("x")
                control = name.endswith("_untrained_control")
                label = model + (f" · {attacker}" if attacker else "") + (" untrained control" if control else "")
                ax.errorbar(line["x"], line["mean"], yerr=_yerr(line), ls=":" if control else "-", capsize=3,
                            marker=markers.get(attacker, "o"), color=f"C{models.index(model)}", label=label)
            if attack != "utility":
                ax.axhline(0.5, color="grey", lw=0.8, ls="--")
            ax.set_xticks(range(len(epsilons)), epsilons)
            ax.set(xlabel="ε", ylabel=what)
            ax.set_title(_title(f"{dataset}:\n{what}", part["synthetic"].any()), fontsize=8)
            if ax.has_data():
                ax.legend(fontsize=6)
    fig.tight_layout()


def draw_c(rows: pd.DataFrame, fig) -> None:
    """One panel per headline endpoint: encoders side by side, one bar per weight setting, 95 % CI bars."""
    metrics = [m for m in ("L_A", "AEDS", "BPID@1", "MIA AUC (head, LiRA)", DIAGNOSIS) if m in set(rows["metric"])]
    fig.set_size_inches(4 * max(len(metrics), 1), 3.8)
    axes = fig.subplots(1, max(len(metrics), 1), squeeze=False)[0]
    synthetic = rows["synthetic"].any()
    weights = sorted(rows["weights"].unique())
    if rows["dataset"].nunique() > 1:  # one bar group per (dataset, encoder), synthetic ones labelled
        names = rows["dataset"] + np.where(rows["synthetic"], " (SYNTHETIC)", "") + "\n" + rows["encoder"]
        rows = rows.assign(encoder=names)
    for ax, metric in zip(axes, metrics):
        part = rows[rows["metric"] == metric]
        encoders = sorted(part["encoder"].unique())
        width = 0.8 / len(weights)
        for i, weight in enumerate(weights):
            bars = part[part["weights"] == weight].set_index("encoder").reindex(encoders).dropna(subset=["mean"])
            x = [encoders.index(e) + (i - (len(weights) - 1) / 2) * width for e in bars.index]
            ax.bar(x, bars["mean"], width, yerr=_yerr(bars), capsize=3, label=weight)
        ax.set_xticks(range(len(encoders)), encoders)
        ax.set(title=_title(metric, synthetic), ylabel=metric)
        ax.legend(fontsize=7)
    provenance = "; ".join(dict.fromkeys(
        p for p, w in zip(rows.get("provenance", pd.Series(dtype=object)), rows["weights"])
        if isinstance(p, str) and p != "—" and w not in ("none", "random_init")))
    if provenance:  # what the encoders' weights are, in the figure's title
        fig.suptitle(f"Study C; neural encoders: {provenance}; random init beside", fontsize=9)
    fig.tight_layout()


DRAW = {"a": draw_a, "b": draw_b, "c": draw_c}

# --- the Markdown report ------------------------------------------------------------------------------------------

INTRO = {
    "a": "Leave-one-patient-out MLP on the patient table and on each DP release: LOSO AUROC (threshold-free) and "
         "balanced accuracy with the nested threshold protocol, one threshold grid for every row. `none` is the "
         "non-private table, `permuted labels (control)` the same with permuted labels; `matched null` is the same "
         "mechanism and noise draw applied to a zero-signal table, `none, scaled + clipped (no noise)` the table "
         "after the releases' robust scaling and L2 clipping without noise (what clipping costs apart from noise), "
         "and `− null` the release minus its null, paired by patient resample and seed, with its adjusted "
         "one-sided p-value `p_adj` (m × the largest p at this or a larger ε, m the table's mechanisms). Intervals "
         "are over patients + seeds (stratified cluster bootstrap crossed with seeds); ε is per patient. Each "
         "mechanism's utility horizon is a fixed-sequence test from the largest ε down, each ε at α/m (α = 0.05), "
         "stopping at the first ε that does not keep utility (p_adj < 0.05 at every ε from the largest to the "
         "horizon); what its ε covers is printed beside it.",
    "b": "Per-subject FedAvg: utility accuracy of the global model and, for each attack, the AUROC of every "
         "attacker (named in brackets; none is picked after seeing the scores), each the mean over rounds and "
         "seeds as `federated_mia_report` summarises it (metrics/federated_mia.csv; the same cells as "
         "reports/federated_mia_tables.md). The `*_control` columns are the same attacks on an untrained model "
         "(and the sound GLA's control), shown, never tested: an untrained network's outputs are nearly constant, "
         "so they cannot show what the member-fitted CSP leaks. Each AUROC here is tested against chance 0.5 and so "
         "measures the member-fitted preprocessing and training together; the lead table above (attack − "
         "preprocessing-only control) is the test of training.",
    "c": "Frozen-encoder embedding audit per encoder and weight setting: attribute leakage L_A (with its "
         "permuted-label control), the AEDS decision score, identification BPID@1, and membership AUC against the "
         "head (LiRA) and the encoder, one row per cohort (`dataset`), encoder and weights; on a cohort whose task "
         "is a subject-level label (the diagnosis) its balanced accuracy over held-out subjects, beside its "
         "permuted-label control. Estimates only, with their logged intervals: the claims are tested in the "
         "Claims section above, one test each.",
}


def horizon_lines(rows: pd.DataFrame) -> list[str]:
    """Study A's utility horizons (the summary run's ``utility_horizon/<mechanism>/<metric>`` tags) as a table, each
    with the test that decided it and one sentence on what its ε covers (the run's ``eps_covers`` and
    ``eps_covers_note`` tags)."""
    found = rows[(rows["arm"] == "release_minus_null") & (rows["horizon"] != "")]
    found = found.drop_duplicates(["dataset", "mechanism", "metric"]).sort_values(["dataset", "mechanism", "metric"])
    if found.empty:
        return []
    tests = "; ".join(dict.fromkeys(found["horizon_test"].astype(str)))
    lines = ["## Utility horizons", "",
             f"The smallest ε (per patient) of the unbroken run of ε, from the largest down, whose release − null "
             f"clears 0 (test: {tests}); `none` when the largest ε does not, `not tested` when too few seeds ran "
             "(never read off one seed).", "",
             "| dataset | mechanism | metric | horizon ε | ε covers | what ε covers | run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {_dataset_label(r)} | {r['mechanism']} | {A_METRICS[r['metric']]} | {r['horizon']} | "
              f"{r['eps_covers']} | {r['eps_covers_note']} | {r['run_id'][:8]} |" for _, r in found.iterrows()]
    return [*lines, ""]


def caption(study: str, rows: pd.DataFrame) -> str:
    """The B or C table's caption: what each interval is over, that intervals are clipped, and the multiple-
    comparison correction with the number of cells it runs over (study A's intro names its own Holm)."""
    if study == "a" or "p_value" not in rows:
        return ""
    if study == "b":
        return caption_b(rows)
    if study == "c":
        return caption_c(rows)
    tested = rows["p_value"].notna()
    where = {"b": "each AUROC cell against chance 0.5",
             "c": "each membership AUC and diagnosis BA against chance 0.5"}[study]
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    how = ("a one-sided one-sample t-test recovered from the run's t-interval over n seeds (`t(n−1)` in `CI over`)"
           if study == "b" else
           "a one-sided test from the logged interval (a t-test where the run says `seeds` and logs n, else a normal "
           "approximation)")
    default = {"b": "`seeds` (the sweep's aggregate)", "c": "\"as logged\" (the run does not say)"}[study]
    return (f"*Table: intervals are each cell's own 95 % interval as the run logs it (uncorrected); `CI over` "
            f"says what it resamples: the run's `ci_over` where it logs one, else {default}; `t(n−1)` marks a "
            f"Student-t interval over n seeds (3 seeds: t(2), a wide interval). Intervals reaching outside "
            f"[0, 1] are clipped to it for display and marked `clipped` ({clipped} here). Tests: {where}, {how}; "
            f"p-values {CORRECTION}-adjusted over the {int(tested.sum())} tested cells of this table "
            f"(multiple-comparison correction: {CORRECTION}); `*` marks p_Holm < {ALPHA}. Cells without p_Holm are "
            f"untested.*")


def caption_c(rows: pd.DataFrame) -> str:
    """Study C's caption: estimates with their logged intervals; the tests are the Claims section's."""
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    weights = "; ".join(dict.fromkeys(f"{e} {w} = {p}" for e, w, p in zip(rows["encoder"], rows["weights"],
                                                                          rows["provenance"]) if p != "—"))
    return ("*Table: estimates per cohort, encoder and weights (" + (weights or "provenance not logged") + "), "
            "each with its own 95 % interval as the run logs it (uncorrected); `CI over` says what it resamples "
            "(the run's `ci_over`, else \"as logged\"). `BPID@1 links` says what the identity row links (within "
            "one recording is not across runs). Intervals reaching outside [0, 1] are clipped for display and "
            f"marked `clipped` ({clipped} here). No cell is tested in this table: every claim is decided once, by "
            "the test in the Claims section above, which prints the same test, p, Holm family and verdict as "
            "reports/embedding_audit_cohorts.md.*")


def caption_b(rows: pd.DataFrame) -> str:
    """Study B's caption: intervals over subjects+seeds, and the p_Holm of the report stage with its families."""
    families = rows.loc[rows["p_holm"].notna(), "holm_family"].dropna()
    named = ", ".join(f"`{f}`" for f in sorted(set(families))) or "none"
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    return ("*Table: each cell's 95 % interval as `federated_mia_report` logs it (uncorrected). `CI over` = "
            "subjects+seeds: a cluster bootstrap resampling whole clients (one per subject, the privacy unit) "
            "crossed with a resample of the seeds (percentile interval); `seeds`, `t(n−1)`: a Student-t interval "
            "over n seeds, kept where a number has no per-client reading (CLA, GLA (paper)). Intervals reaching "
            f"outside [0, 1] are clipped to it for display and marked `clipped` ({clipped} here). Tests: each score "
            "against its chance (the bootstrap p-value of score − chance; the one-sample t-test on `seeds` cells); "
            f"p_Holm is the report stage's, {CORRECTION}-adjusted over its family, one per printed table of "
            "reports/federated_mia_tables.md: a dataset's attack tables for one attacker, or its utility table "
            "(families here: " + named + "; each family holds every tested cell of that table, more than this "
            f"table shows; multiple-comparison correction: {CORRECTION}). The two reports print the same p_Holm "
            f"for the same cell. `*` marks p_Holm < {ALPHA}. Controls (`*_control`) are shown, never tested; cells "
            "without p_Holm are untested.*")


def privacy_statement(study: str, runs: pd.DataFrame) -> str:
    """Study A's statement of what its ε means, from the runs' own params: δ, the neighbouring relation, how the
    noise is sampled and which patients are public (issue 47: every table says so)."""
    column = "params.dp_release.delta"
    if study != "a" or runs.empty or column not in runs:
        return ""
    deltas = ", ".join(sorted({f"{float(v):g}" for v in runs[column].dropna()}))
    return (f"ε is per patient at δ = {deltas} (`dp_release.delta`: the Gaussian mechanisms' δ; the Laplace ones "
            "are pure ε), for neighbouring cohorts that differ in one patient's record replaced (replace-one). Noise "
            "is drawn in floating point from seeded numpy generators (idealised sampling: right for measuring a "
            "release, not for releasing real data, where `Mechanism.privatise(..., sampler='opendp')` draws with "
            "OpenDP's exact samplers). No patient is public in these tables: the robust scaling is fitted on the "
            "released patients themselves, outside ε (each horizon says what its ε covers).")


def render(study: str, rows: pd.DataFrame, uri: str, figure: str | None, lead: list[str] | None = None,
           statement: str = "") -> str:
    """The report's Markdown: provenance, the lead section (study A: the end-to-end private releases,
    :mod:`eegprivacy.reporting.end_to_end`), figure, headline table, the cited runs and the dataset versions."""
    end_to_end = any(str(line).startswith("## End-to-end") for line in lead or [])
    stages = (f"stages `dp_end_to_end` (the lead section: its newest summary run per dataset, cited there) and "
              f"`{HEADLINE_STAGE[study]}` (the paper's tables: the newest finished parent run per run name, cited in "
              "each row)" if end_to_end else
              f"stage `{HEADLINE_STAGE[study]}` (the newest finished parent run per run name)")
    lines = [f"# {TITLES[study]}", "",
             f"Generated by `eegprivacy report` from MLflow only: store `{portable_uri(uri)}`, experiment "
             f"`{EXPERIMENTS[study]}`, {stages}. "
             "Every number is a metric of the run its row cites: the mean over seeds with its 95 % CI in brackets (the "
             "parent's `*_mean`, `*_ci_low`, `*_ci_high`; a value without brackets has no CI in the run, e.g. one "
             "seed); a `p_Holm` the run does not log is computed here from those metrics, as the table's caption says. "
             "Rows marked **SYNTHETIC** come from synthetic cohorts (tag `synthetic=true`).", ""]
    lines += lead or []
    if rows.empty:
        return "\n".join([*lines, "**No runs.** " + no_runs_message(study, uri), ""])
    table = headline_table(study, rows)
    if lead:
        lines += [f"## The paper's {'mechanisms' if study == 'a' else 'tables'} (`{HEADLINE_STAGE[study]}`)", ""]
    lines += [INTRO[study], ""]
    if statement:
        lines += [statement, ""]
    if figure:
        lines += [f"![{TITLES[study]}]({figure})", ""]
    if caption(study, rows):
        lines += [caption(study, rows), ""]
    lines += [table.to_markdown(index=False, disable_numparse=True), ""]
    if study == "a":
        lines += horizon_lines(rows)
    lines += ["## Runs", "", "| run | name | MLflow |", "| --- | --- | --- |"]
    runs = rows.drop_duplicates("run_id").sort_values("run_name")
    lines += [f"| {r.run_id[:8]} | {r.run_name} | `runs:/{r.run_id}` |" for r in runs.itertuples()]
    lines += ["", "## Datasets", "", "| dataset | synthetic | dataset_version |", "| --- | --- | --- |"]
    versions = rows.drop_duplicates(["dataset", "dataset_version"]).sort_values("dataset")
    lines += [f"| {r.dataset} | {'**SYNTHETIC**' if r.synthetic else 'no'} | `{r.dataset_version}` |"
              for r in versions.itertuples()]
    return "\n".join([*lines, ""])


def write_report(study: str, out_dir: str | Path, uri: str | None = None) -> tuple[Path, bool]:
    """Write ``study-<s>.md`` (and ``study-<s>.png`` when there are runs) into ``out_dir``; returns the report's
    path and whether the store held runs. A figure left from an earlier report is removed when there are none."""
    from matplotlib.figure import Figure

    uri = uri or tracking_uri()
    out_dir = Path(out_dir)
    runs = parent_runs(study, uri)
    rows = TIDY[study](runs)
    png = out_dir / f"study-{study}.png"
    if rows.empty:
        png.unlink(missing_ok=True)
    else:
        fig = Figure()
        DRAW[study](rows, fig)
        with atomic_path(png) as tmp:
            fig.savefig(tmp, dpi=120)
    lead = (end_to_end_lead(study, rows, uri, out_dir) + control_lead(study, uri, out_dir) + claims_lead(study, runs)
            + lira_lead(study, uri) + calibration_lead(study, uri))
    text = render(study, rows, uri, None if rows.empty else png.name, lead, privacy_statement(study, runs))
    report = write_text_atomic(out_dir / f"study-{study}.md", text)
    return report, not rows.empty


def end_to_end_lead(study: str, rows: pd.DataFrame, uri: str, out_dir: Path) -> list[str]:
    """Study A's lead section and its figure (``study-a-end-to-end.png``) from the ``dp_end_to_end`` summary runs;
    nothing for the other studies or a store without such runs (an old figure is then removed)."""
    from matplotlib.figure import Figure

    from eegprivacy.reporting import end_to_end

    png = Path(out_dir) / f"study-{study}-end-to-end.png"
    runs = end_to_end.summary_runs(uri, EXPERIMENTS[study]) if study == "a" else pd.DataFrame()
    if runs.empty:
        png.unlink(missing_ok=True)
        return []
    fig = Figure()
    end_to_end.draw(runs, fig)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120)
    paper = {}
    if not rows.empty and "horizon" in rows:
        found = rows[(rows["arm"] == "release_minus_null") & (rows["metric"] == "auroc") & (rows["horizon"] != "")]
        paper = {(r["dataset"], r["mechanism"]): str(r["horizon"]) for _, r in found.iterrows()}
    return [*end_to_end.lead_lines(runs, paper, mde_power=mde_power(uri, EXPERIMENTS[study])),
            f"![end-to-end private releases]({png.name})", "", *sample_size_lead(study, uri, out_dir)]


def mde_power(uri: str, experiment: str) -> dict[float, float]:
    """{multiple of the MDE: power} the calibration stage measured for the lead table's MDE column
    (``study_a.end_to_end_mde``); {} before that stage has run."""
    from eegprivacy.reporting.calibration import calibration_runs

    runs = calibration_runs(uri, experiment)
    if runs.empty:
        return {}
    case = runs[runs["params.case"] == "study_a.end_to_end_mde"]
    if case.empty:
        return {}
    out = {}
    for column, value in case.iloc[0].items():
        if str(column).startswith("metrics.power_at_") and pd.notna(value):
            out[float(str(column).removeprefix("metrics.power_at_"))] = float(value)
    return dict(sorted(out.items()))


def sample_size_lead(study: str, uri: str, out_dir: Path) -> list[str]:
    """Study A's sample-size section and its figure (``study-a-sample-size.png``, SYNTHETIC) from the
    ``dp_sample_size`` summary runs; nothing without such runs (an old figure is then removed)."""
    from matplotlib.figure import Figure

    from eegprivacy.reporting import sample_size

    png = Path(out_dir) / f"study-{study}-sample-size.png"
    runs = sample_size.summary_runs(uri, EXPERIMENTS[study]) if study == "a" else pd.DataFrame()
    if runs.empty:
        png.unlink(missing_ok=True)
        return []
    fig = Figure()
    sample_size.draw(runs, fig)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120)
    return [*sample_size.lead_lines(runs), f"![SYNTHETIC: patients a private release needs]({png.name})", ""]


def claims_lead(study: str, runs: pd.DataFrame) -> list[str]:
    """Study C's lead section: every claim with the test, p, Holm family and verdict its embedding_audit parent
    run logged (:func:`eegprivacy.studies.embedding_audit.claims.claims_from_runs`), rendered by the renderer the
    cohort reports use; nothing for the other studies or runs without claims."""
    from eegprivacy.reporting.claims import claims_lines
    from eegprivacy.studies.embedding_audit.claims import claims_from_runs
    from eegprivacy.studies.embedding_audit.units import encoder_label

    if study != "c" or runs.empty:
        return []
    runs = runs[runs.get("tags.encoder", pd.Series(index=runs.index, dtype=object)) != "all"]
    runs = runs.assign(weights=[_c_weights(str(n), str(d), str(e)) for n, d, e in
                                zip(runs["tags.mlflow.runName"], runs["tags.dataset"], runs["tags.encoder"])])
    claims = claims_from_runs(runs, encoder_label)
    if claims.empty:
        return []
    cohorts = [c for c in ("eegmat", "msu_schizophrenia", "eegmmidb") if c in set(claims["cohort"])]
    return claims_lines(claims, cohorts + sorted(set(claims["cohort"]) - set(cohorts)))


def calibration_lead(study: str, uri: str) -> list[str]:
    """The measured size and coverage of the study's tests (stage ``calibration``'s runs in the study's experiment,
    :func:`eegprivacy.reporting.calibration.section_lines`); nothing before the stage has run."""
    from eegprivacy.reporting.calibration import NOT_MEASURED_MARK, calibration_runs, not_measured_lines, section_lines

    lines = section_lines(calibration_runs(uri, EXPERIMENTS[study]))
    unmeasured = not_measured_lines(f"reports/study-{study}.md")
    if lines and unmeasured:
        lines += [f"Printed here and not measured ({NOT_MEASURED_MARK}; each row of `calibration.md` says why):", "",
                  *unmeasured, ""]
    return lines


def lira_lead(study: str, uri: str) -> list[str]:
    """Study B's strongest attacks at low FPR (RMIA, LiRA, loss by number of reference models,
    :func:`eegprivacy.reporting.lira.study_b_lines`) from the ``federated_lira`` parent runs."""
    from eegprivacy.reporting.lira import study_b_lines

    return study_b_lines(uri, EXPERIMENTS[study]) if study == "b" else []


def control_lead(study: str, uri: str, out_dir: Path) -> list[str]:
    """Study B's lead section, the controlled membership table (attack − preprocessing-only control,
    :mod:`eegprivacy.reporting.federated_control`), and its figure ``study-b-control.png``, from the newest
    ``federated_control`` summary run; nothing for the other studies or a store without one (an old figure is
    then removed)."""
    from matplotlib.figure import Figure

    from eegprivacy.reporting import federated_control

    png = Path(out_dir) / f"study-{study}-control.png"
    runs = federated_control.summary_runs(uri, EXPERIMENTS[study]) if study == "b" else pd.DataFrame()
    summary = federated_control.tidy_run(runs.iloc[0]) if not runs.empty else pd.DataFrame()
    if summary.empty:
        png.unlink(missing_ok=True)
        return []
    fig = Figure(figsize=(11, 4.5))
    federated_control.draw(summary, fig)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
    run = runs.iloc[0]
    meta = {"protocols": _control_protocols(run), "profile": run.get("params.federated_control.profile")}
    return [*federated_control.lead_lines(summary, meta), f"![attack − preprocessing-only control]({png.name})",
            "", f"*From MLflow run `{run['tags.mlflow.runName']}` (`runs:/{run['run_id']}`); every arm's AUROC in "
                "`reports/federated_control.md`.*", ""]


def _control_protocols(run: pd.Series) -> dict:
    """The per-model protocol (seeds, rounds, local epochs, ε grid) the summary run logged as a JSON param."""
    import json

    text = run.get("params.federated_control.per_model") or run.get("params.per_model")
    try:
        return json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
