"""The ``dp_aggregate`` summaries: each dataset's headline from the ``dp_utility`` summary (intervals over patients
and seeds, the noise-free scaled and clipped table, release − matched null, utility horizons with the test that
decides them and what their ε covers) and the per-seed rows (the paper's optimistic protocol, the
intrinsic utility), as ``metrics/dp_release.json``.

The per-seed aggregate (mean and t-interval over seeds) is kept for what only has seeds to vary over (intrinsic
utility of a release, noise scale) and for the paper's optimistic protocol, which is reported beside its own
permuted-label control and labelled as the paper's; its intervals say how much one release's numbers move
between noise draws, not how they would generalise to other patients.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.pipeline.sweep import aggregate
from eegprivacy.privacy.labels import LABELS_IN_CLEAR_NOTE

BY = ["study", "dataset", "arm", "mechanism", "epsilon", "protocol"]
PROTOCOLS = ("optimistic", "nested")
NOT_RELEASES = {"none", "permuted_labels"}


def rounded(x) -> float | None:
    """A headline number: 4 decimals, or None where there is no finite value."""
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def interval(row) -> dict:
    """Mean, CI and seed count of one aggregated row, as the headline JSON writes them."""
    return {"mean": rounded(row.value), "ci_low": rounded(row.ci_low), "ci_high": rounded(row.ci_high),
            "n": int(row.n)}


def load_rows(metrics_dir: str | Path, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The dataset's ``dp_release`` and ``dp_utility`` rows (``<metrics_dir>/dp_release/`` and ``dp_utility/``), one
    table, and their mean and CI over seeds."""
    metrics_dir = Path(metrics_dir)
    per_seed = pd.concat([pd.read_csv(metrics_dir / "dp_release" / f"dp_release_{dataset}.csv").assign(arm="release"),
                          pd.read_csv(metrics_dir / "dp_utility" / f"dp_utility_{dataset}.csv")], ignore_index=True)
    return per_seed, aggregate(per_seed, BY)


def load_summary(metrics_dir: str | Path, dataset: str) -> pd.DataFrame:
    """The dataset's ``dp_utility`` summary rows (see :func:`eegprivacy.studies.release.utility.summarise`)."""
    return pd.read_csv(Path(metrics_dir) / "dp_utility" / f"dp_utility_summary_{dataset}.csv")


def summary_entry(summary: pd.DataFrame, arm: str, metric: str, mechanism: str | None = None,
                  epsilon: float | None = None) -> dict | None:
    """One summary row as the headline JSON writes it (value, interval and what it is over)."""
    rows = summary[(summary.arm == arm) & (summary.metric == metric)]
    if mechanism is not None:
        rows = rows[rows.mechanism == mechanism]
    if epsilon is not None:
        rows = rows[np.isclose(rows.epsilon.astype(float), epsilon)]
    if rows.empty:
        return None
    row = rows.iloc[0]
    out = {"value": rounded(row.value), "ci_low": rounded(row.ci_low), "ci_high": rounded(row.ci_high),
           "ci_over": row.ci_over, "n_patients": int(row.n), "n_seeds": int(row.n_seeds)}
    if arm == "release_minus_null":
        out.update(p_value=rounded(row.p_value), p_mc_error=_optional(row, "p_mc_error"),
                   p_adjusted=_optional(row, "p_adjusted"), keeps_utility=_flag(row.keeps_utility),
                   decision_stable=_flag(row.get("decision_stable")), correction=row.correction)
    return out


def _optional(row, column: str) -> float | None:
    return rounded(row[column]) if column in row and pd.notna(row[column]) else None


def _flag(value) -> bool | None:
    """A boolean summary cell as read back from CSV (True/False/"True"/NaN) -> True, False or None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value).strip().lower() in ("true", "1", "1.0")


def horizons(summary: pd.DataFrame) -> dict:
    """Each mechanism's utility horizon per metric: the smallest ε of the unbroken run of release − null
    rejections from the largest ε down (fixed sequence, α/m per mechanism), "none" when the largest ε does not
    reject, or "not tested" (fewer than two seeds; :func:`horizon_notes` says why)."""
    out: dict = {}
    for row in summary[summary.arm == "horizon"].itertuples():
        metric = row.metric.removesuffix("_horizon_epsilon")
        if _flag(getattr(row, "horizon_tested", True)) is False:
            value = "not tested"
        else:
            value = rounded(row.value) if math.isfinite(row.value) else "none"
        out.setdefault(row.mechanism, {})[metric] = value
    return out


def horizon_notes(summary: pd.DataFrame) -> dict:
    """The test behind the horizons, what their ε covers and, per untested horizon, why (the summary's horizon
    rows)."""
    rows = summary[summary.arm == "horizon"]
    if rows.empty:
        return {}
    first = rows.iloc[0]
    out = {"test": first.get("correction"), "eps_covers": first.get("eps_covers"),
           "eps_covers_note": first.get("eps_covers_note")}
    untested = {f"{r.mechanism}/{r.metric.removesuffix('_horizon_epsilon')}": r.note for r in rows.itertuples()
                if isinstance(getattr(r, "note", None), str) and r.note}
    if untested:
        out["not_tested"] = untested
    return {k: v for k, v in out.items() if isinstance(v, (str, dict))}


def headline(summary: pd.DataFrame, agg: pd.DataFrame, epsilon: float) -> dict:
    """The dataset's headline: the non-private utility against its permuted control, each mechanism's release,
    matched null and difference at ``epsilon`` (AUROC and nested balanced accuracy, intervals over patients and
    seeds), every mechanism's horizon, the paper's optimistic protocol beside its own control, and intrinsic
    utility at ``epsilon``."""
    def seeds_only(arm, mechanism, eps, protocol, metric):
        rows = agg[(agg.arm == arm) & (agg.mechanism == mechanism) & (agg.protocol == protocol)
                   & (agg.metric == metric)
                   & (np.isclose(agg.epsilon, eps) | (np.isinf(agg.epsilon) & np.isinf(eps)))]
        return None if rows.empty else {**interval(rows.iloc[0]), "ci_over": "seeds"}

    metrics = {"auroc": "auroc", "balanced_accuracy_nested": "balanced_accuracy"}
    at_epsilon = f"epsilon_{epsilon_key(epsilon)}"
    out = {"chance": 0.5,
           "baseline": {k: summary_entry(summary, "baseline", m) for k, m in metrics.items()},
           # the same protocol on permuted labels: the score with nothing to learn (the protocol's own bias)
           "negative_control_permuted_labels": {k: summary_entry(summary, "permuted", m) for k, m in metrics.items()},
           "baseline_minus_permuted": {k: summary_entry(summary, "baseline_minus_permuted", m)
                                       for k, m in metrics.items()},
           # the noise-free scaled and clipped table: baseline − clipped is what scaling and clipping cost alone
           "clipped_no_noise": {k: summary_entry(summary, "clipped", m) for k, m in metrics.items()},
           "baseline_minus_clipped": {k: summary_entry(summary, "baseline_minus_clipped", m)
                                      for k, m in metrics.items()},
           "utility_horizons": horizons(summary),
           "utility_horizons_test": horizon_notes(summary),
           "paper_protocol_optimistic": {
               "note": "threshold chosen on the pooled LOSO predictions it is scored on (biased upwards); "
                       "intervals over seeds only",
               "baseline_balanced_accuracy": seeds_only("baseline", "none", math.inf, "optimistic",
                                                        "balanced_accuracy"),
               "permuted_labels_balanced_accuracy": seeds_only("permuted", "permuted_labels", math.inf,
                                                               "optimistic", "balanced_accuracy")},
           at_epsilon: {}}
    for mechanism in sorted(set(summary.loc[summary.arm == "release", "mechanism"])):
        entry = {}
        for key, metric in metrics.items():
            entry[key] = {arm: summary_entry(summary, arm, metric, mechanism, epsilon)
                          for arm in ("release", "matched_null", "release_minus_null")}
        entry["paper_protocol_optimistic_balanced_accuracy"] = {
            arm: seeds_only(arm, mechanism, epsilon, "optimistic", "balanced_accuracy")
            for arm in ("release", "matched_null")}
        for metric in ("correlation", "snr_db", "noise_scale"):
            entry[metric] = seeds_only("release", mechanism, epsilon, "intrinsic", metric)
        out[at_epsilon][mechanism] = entry
    return out


def labels_note(label_epsilon: float) -> str:
    """What the release's ε says about the label column."""
    if not math.isfinite(label_epsilon):
        return "released in the clear: " + LABELS_IN_CLEAR_NOTE
    return (f"randomized response at ε_label = {label_epsilon:g} per patient; a (features, label) row is "
            f"(ε + {label_epsilon:g}, δ)-DP by basic composition")


def dataset_summary(dataset: str, summary: pd.DataFrame, agg: pd.DataFrame, per_seed: pd.DataFrame,
                    epsilon: float, label_epsilon: float = math.inf) -> dict:
    """The dataset's entry of ``metrics/dp_release.json``: what it is and what ε covers, then :func:`headline`."""
    return {"dataset_version": str(per_seed["dataset_version"].iloc[0]), "synthetic": dataset.startswith("synthetic"),
            "n_patients": int(per_seed["n_patients"].iloc[0]), "n_features": int(per_seed["n_features"].iloc[0]),
            "eps_unit": "subject", "labels": labels_note(label_epsilon), **headline(summary, agg, epsilon)}


def headline_metrics(summary: dict, epsilon: float) -> dict:
    """The dataset's headline as flat MLflow metrics: baseline and control AUROC, each mechanism's release − null
    AUROC at ε and its horizons (absent where no ε keeps utility)."""
    tag = f"eps_{epsilon_key(epsilon)}"
    flat = {}
    for name in ("baseline", "negative_control_permuted_labels", "baseline_minus_permuted", "clipped_no_noise",
                 "baseline_minus_clipped"):
        for key, entry in summary[name].items():
            if entry and entry["value"] is not None:
                flat[f"{name}/{key}"] = entry["value"]
    for mechanism, values in summary[f"epsilon_{epsilon_key(epsilon)}"].items():
        for key in ("auroc", "balanced_accuracy_nested"):
            for arm, entry in values[key].items():
                if entry and entry["value"] is not None:
                    flat[f"{mechanism}/{tag}/{arm}/{key}"] = entry["value"]
    for mechanism, per_metric in summary["utility_horizons"].items():
        for metric, value in per_metric.items():
            if not isinstance(value, str):  # "none" and "not tested" are no number
                flat[f"utility_horizon/{mechanism}/{metric}"] = value
    return {k: v for k, v in flat.items() if v is not None}
