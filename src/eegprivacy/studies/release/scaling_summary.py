"""The ``dp_scaling`` summaries: utility per scaling source against the total ε, judged against matched nulls.

:func:`summarise` (run by the ``dp_scaling`` stage, which holds the per-patient predictions) turns one dataset's
cells into tidy rows, with dp_utility's statistics (:mod:`eegprivacy.evaluation.cluster_bootstrap`): intervals over
``subjects+seeds`` (a stratified patient cluster bootstrap crossed with a bootstrap of the noise/MLP seeds; one
set of patient resamples for every row, so differences are paired by patient resample and by seed):

- ``baseline`` — the private cohort's original features, no DP;
- ``release`` and ``matched_null`` per (mechanism, scaling source, total ε);
- ``release_minus_null`` — the release above its matched null, its one-sided bootstrap p-value with its Monte-Carlo
  error, and ``keeps_utility`` from dp_utility's horizon test: a fixed sequence per (mechanism, source) from the
  largest total ε down, each at α/m (m = the table's (mechanism, source) sequences; ``alpha_tested``);
- ``horizon`` — per (mechanism, source), the smallest total ε of that unbroken run (NaN when the largest fails);
- ``cost_vs_private`` — the design's cost: the paper's private-scaling release minus each end-to-end source's
  release at the same (mechanism, total ε), positive = utility lost by making the scaling step private; its
  one-sided p-value (cost > 0), Holm over every (mechanism, honest source, ε) cell, and ``costs_utility``.

Metrics: LOSO AUROC (threshold-free; the headline) and the paper's optimistic-protocol balanced accuracy (secondary;
biased upwards, which its matched null measures). The ``dp_scaling_aggregate`` stage reads these rows back into the
headline JSON (:func:`dataset_summary`), the MLflow metrics and the plot data.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation.cluster_bootstrap import (
    auroc_along,
    balanced_accuracy_along,
    bootstrap_indices,
    bootstrap_p_value,
    combine_seeds,
    holm,
    percentile_interval,
    seed_indices,
    fixed_sequence_horizon,
    p_value_mc_error,
)
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.pipeline.sweep import Cell
from eegprivacy.studies.release.aggregate import rounded
from eegprivacy.studies.release.utility import THRESHOLD_FREE, per_seed_replicates

# (protocol, metric, the per-patient values it is computed from, the JSON key)
SUMMARY_METRICS = ((THRESHOLD_FREE, "auroc", "proba", "auroc"),
                   ("optimistic", "balanced_accuracy", "pred_optimistic", "balanced_accuracy_optimistic"))
HEADLINE_METRIC = "auroc"
HONEST_SOURCES = ("public_reference", "dp_quantiles")
BUDGET = ("total_epsilon", "release_epsilon", "scaling_epsilon", "end_to_end")
CI_OVER = "subjects+seeds"
# A single arm's chance level (AUROC and balanced accuracy alike); differences sit at 0, a horizon has none.
CHANCE = {"baseline": 0.5, "release": 0.5, "matched_null": 0.5, "horizon": math.nan}
# Seeds of the seed bootstrap, one per kind of row (dp_utility's 1 and 4 for single arms and release − null).
_SEED_STREAMS = {"arm": 1, "release_minus_null": 4, "cost_vs_private": 5}
PLOT_COLUMNS = ["dataset", "mechanism", "scaling_source", "total_epsilon", "arm", "auroc", "ci_low", "ci_high",
                "end_to_end"]


def summarise(plan: list, folder: str | Path, y: np.ndarray, *, n_resamples: int,
              confidence: float) -> pd.DataFrame:
    """Tidy summary rows of one dataset's ``dp_scaling`` cells (module docstring), from the per-patient
    predictions the cells kept under ``folder``. ``y`` is the private cohort's labels, in the cells' order."""
    y = np.asarray(y, dtype=int)
    idx = bootstrap_indices(y, n_resamples)
    alpha = 1.0 - confidence
    rows: list[dict] = []
    stats: dict[tuple, tuple[float, np.ndarray, tuple[int, ...]]] = {}
    budgets: dict[tuple, dict] = {}

    def add(arm, key, protocol, metric, value, interval, n_seeds, **extra):
        mechanism, source, epsilon = key
        rows.append({"arm": arm, "mechanism": mechanism, "scaling_source": source, "epsilon": float(epsilon),
                     **budgets[key], "protocol": protocol, "metric": metric, "value": value,
                     "ci_low": interval[0], "ci_high": interval[1], "ci_over": CI_OVER, "n": int(len(y)),
                     "n_seeds": int(n_seeds), "confidence": confidence, "chance": CHANCE.get(arm, 0.0), **extra})

    groups: dict[tuple, list[Cell]] = {}
    for _, cells in plan:
        for cell in cells:
            c = cell.config
            key = (c["mechanism"], c["scaling_source"], float(c["epsilon"]))
            groups.setdefault((c["arm"], *key), []).append(cell)
            budgets.setdefault(key, {k: c[k] for k in BUDGET})
    for (arm, *key), cells in groups.items():
        key = tuple(key)
        for protocol, metric, values, _ in SUMMARY_METRICS:
            fn = auroc_along if metric == "auroc" else balanced_accuracy_along
            point, per_seed, seeds = per_seed_replicates(folder, cells, values, fn, y, idx)
            if not seeds:
                continue
            stats[(arm, *key, metric)] = (point, per_seed, seeds)
            reps = combine_seeds(per_seed, seed_indices(len(seeds), n_resamples, seed=_SEED_STREAMS["arm"]))
            add(arm, key, protocol, metric, point, percentile_interval(reps, confidence), len(seeds))

    def paired(a, b, stream):
        """(point, interval, one-sided p of a − b ≤ 0, seeds) of a − b, paired by seed and patient resample."""
        if a[2] != b[2]:
            raise RuntimeError(f"paired rows differ in their seeds ({a[2]} vs {b[2]}); rerun the stage")
        reps = combine_seeds(a[1] - b[1], seed_indices(len(a[2]), n_resamples, seed=_SEED_STREAMS[stream]))
        return a[0] - b[0], percentile_interval(reps, confidence), bootstrap_p_value(reps), len(a[2])

    keys = sorted(k for k in budgets if k[0] != "none")  # (mechanism, source, total ε) of the releases
    for protocol, metric, _, _ in SUMMARY_METRICS:
        for arm, pairs in (
                ("release_minus_null", [(key, ("release", *key), ("matched_null", *key)) for key in keys]),
                ("cost_vs_private", [(key, ("release", key[0], "private", key[2]), ("release", *key))
                                     for key in keys if key[1] in HONEST_SOURCES])):
            found = [(key, paired(stats[(*a, metric)], stats[(*b, metric)], arm)) for key, a, b in pairs
                     if (*a, metric) in stats and (*b, metric) in stats]
            if arm == "cost_vs_private":  # a family of independent claims, no ordering: Holm
                adjusted = holm([d[2] for _, d in found])
                correction = f"holm over {len(found)} (mechanism, scaling source, ε) cells"
                for (key, (value, interval, p, n_seeds)), p_adj in zip(found, adjusted):
                    add(arm, key, protocol, metric, value, interval, n_seeds, p_value=p, p_holm=float(p_adj),
                        costs_utility=bool(p_adj < alpha), correction=correction)
                continue
            # release − null: dp_utility's horizon test, one fixed sequence per (mechanism, source) from the largest
            # total ε down, α split over the table's (mechanism, source) sequences
            sequences = sorted({k[:2] for k, _ in found})
            alpha_each = alpha / max(len(sequences), 1)
            correction = (f"fixed sequence from the largest ε, α/m per (mechanism, scaling source) "
                          f"(m = {len(sequences)}, α = {alpha:g})")
            for mechanism, source in sequences:
                mine = [(k, d) for k, d in found if k[:2] == (mechanism, source)]
                horizon, decisions = fixed_sequence_horizon([k[2] for k, _ in mine], [d[2] for _, d in mine],
                                                            alpha_each)
                for ((key, (value, interval, p, n_seeds)), keeps) in zip(mine, decisions):
                    error = p_value_mc_error(p, n_resamples)
                    add(arm, key, protocol, metric, value, interval, n_seeds, p_value=p, p_mc_error=error,
                        alpha_tested=alpha_each, keeps_utility=bool(keeps),
                        decision_stable=bool(abs(p - alpha_each) > 3 * error), correction=correction)
                budgets.setdefault((mechanism, source, math.inf), dict.fromkeys(BUDGET, math.nan))
                add("horizon", (mechanism, source, math.inf), protocol, f"{metric}_horizon_epsilon",
                    math.nan if horizon is None else horizon, (math.nan, math.nan), 0, ci_over="",
                    correction=correction)
    frame = pd.DataFrame(rows)
    for column in ("p_value", "p_holm", "p_mc_error", "alpha_tested", "keeps_utility", "costs_utility",
                   "decision_stable", "correction"):
        if column not in frame:
            frame[column] = np.nan
    return frame


# ---------------------------------------------------------------------------------------------------------------
# dp_scaling_aggregate: the summaries read back
# ---------------------------------------------------------------------------------------------------------------
def summary_path(metrics_dir: str | Path, dataset: str) -> Path:
    return Path(metrics_dir) / "dp_scaling" / f"dp_scaling_summary_{dataset}.csv"


def load_summaries(metrics_dir: str | Path, datasets) -> pd.DataFrame:
    """Every dataset's ``dp_scaling`` summary rows, one table (``dataset`` column)."""
    return pd.concat([pd.read_csv(summary_path(metrics_dir, d)) for d in datasets], ignore_index=True)


# The difference rows' decision columns (a Holm-corrected one-sided test each).
DECISIONS = {"release_minus_null": "keeps_utility", "cost_vs_private": "costs_utility"}


def _true(value) -> bool:
    """A decision column read back from CSV (bool, or the text 'True'/'False')."""
    return str(value) == "True"


def _entry(rows: pd.DataFrame, arm: str, metric: str, mechanism: str, epsilon: float, n_seeds: int) -> dict | None:
    """One summary row as the JSON writes it: the value and its interval (what intervals are over is said once per
    dataset; ``n_seeds`` only where it differs from the dataset's), and for a difference its test: release − null
    its p-value, the level it was tested at and its Monte-Carlo error (fixed sequence), the cost its Holm-adjusted
    p-value; and the decision."""
    hit = rows[(rows.arm == arm) & (rows.metric == metric) & (rows.mechanism == mechanism)
               & np.isclose(rows.epsilon.astype(float), float(epsilon))]
    if hit.empty:
        return None
    row = hit.iloc[0]
    out = {"value": rounded(row.value), "ci_low": rounded(row.ci_low), "ci_high": rounded(row.ci_high)}
    if int(row.n_seeds) != n_seeds:
        out["n_seeds"] = int(row.n_seeds)
    if arm == "release_minus_null":  # the fixed-sequence test: the p-value, its level and its Monte-Carlo error
        out.update({"p_value": rounded(row.p_value), "alpha_tested": rounded(row.alpha_tested),
                    "p_mc_error": rounded(row.p_mc_error), DECISIONS[arm]: _true(row[DECISIONS[arm]])})
    elif arm in DECISIONS:
        out.update({"p_holm": rounded(row.p_holm), DECISIONS[arm]: _true(row[DECISIONS[arm]])})
    return out


def dataset_summary(summary: pd.DataFrame, dataset: str) -> dict:
    """The dataset's entry of ``metrics/dp_scaling.json``: what the numbers are about and what their intervals and
    corrections are, the no-DP reference, the utility horizons, then each (mechanism, source, total ε) with its
    budget and, for AUROC and the optimistic balanced accuracy, its release, matched null, release − null and
    (end-to-end sources) cost against the paper's private scaling."""
    s = summary[summary.dataset == dataset]
    if s.empty:
        raise ValueError(f"no dp_scaling summary rows for {dataset!r}")
    first = s.iloc[0]
    metrics = {json_key: metric for _, metric, _, json_key in SUMMARY_METRICS}
    n_seeds = int(s.loc[s.arm == "release", "n_seeds"].max())
    out = {"dataset_version": str(first.dataset_version), "synthetic": _true(first.synthetic),
           "n_private_patients": int(first.n), "n_public_patients": int(first.n_public),
           "n_features": int(first.n_features), "eps_unit": str(first.eps_unit),
           "epsilon": "total ε of the pipeline (scaling statistics + release, basic composition); for the private "
                      "source it covers the release only (no end-to-end guarantee)",
           "labels": "released in the clear: ε covers the feature vector only, not the 0/1 label",
           "headline_metric": "auroc (LOSO, threshold-free)", "chance": 0.5,
           "matched_null": "the same scaling source, mechanism, release ε and noise draw on a zero-signal table",
           "cost_vs_private": "AUROC (or balanced accuracy) of the paper's private-scaling release minus the "
                              "end-to-end source's, same mechanism and total ε; positive = utility lost",
           "intervals": {"ci_over": str(first.ci_over), "confidence": float(first.confidence),
                         "n_patients": int(first.n), "n_seeds": n_seeds},
           "corrections": {arm: str(s.loc[s.arm == arm, "correction"].iloc[0]) for arm in DECISIONS
                           if (s.arm == arm).any()},
           "baseline_no_dp_private_cohort": {k: _entry(s, "baseline", m, "none", math.inf, n_seeds)
                                             for k, m in metrics.items()},
           "utility_horizons": {}, "results": {}}
    for row in s[s.arm == "horizon"].itertuples():
        key = next(k for k, m in metrics.items() if row.metric == f"{m}_horizon_epsilon")
        out["utility_horizons"].setdefault(row.mechanism, {}).setdefault(row.scaling_source, {})[key] = (
            rounded(row.value) if math.isfinite(row.value) else "none")
    releases = s[s.arm == "release"].drop_duplicates(["mechanism", "scaling_source", "epsilon"])
    for r in releases.sort_values(["mechanism", "scaling_source", "epsilon"]).itertuples():
        rows = s[s.scaling_source == r.scaling_source]
        entry = {"total_epsilon": rounded(r.total_epsilon), "release_epsilon": rounded(r.release_epsilon),
                 "scaling_epsilon": rounded(r.scaling_epsilon), "end_to_end": _true(r.end_to_end)}
        arms = ("release", "matched_null", "release_minus_null")
        if r.scaling_source in HONEST_SOURCES:
            arms += ("cost_vs_private",)
        for key, metric in metrics.items():
            entry[key] = {arm: _entry(rows, arm, metric, r.mechanism, r.epsilon, n_seeds) for arm in arms}
        out["results"].setdefault(r.mechanism, {}).setdefault(r.scaling_source, {})[
            f"epsilon_{epsilon_key(r.epsilon)}"] = entry
    return out


def headline_metrics(summary: dict) -> dict:
    """One dataset's headline as flat MLflow metrics: per mechanism/source/ε, each arm's value for both metrics,
    and the utility horizons (absent where no ε keeps utility)."""
    flat = {f"baseline/{k}": e["value"] for k, e in summary["baseline_no_dp_private_cohort"].items() if e}
    for mechanism, sources in summary["results"].items():
        for source, by_eps in sources.items():
            for eps, entry in by_eps.items():
                for key in (k for _, _, _, k in SUMMARY_METRICS):
                    for arm, value in entry[key].items():
                        if value:
                            flat[f"{mechanism}/{source}/{eps}/{key}/{arm}"] = value["value"]
    for mechanism, sources in summary["utility_horizons"].items():
        for source, per_metric in sources.items():
            for key, value in per_metric.items():
                if value != "none":
                    flat[f"utility_horizon/{mechanism}/{source}/{key}"] = value
    return {k: v for k, v in flat.items() if v is not None}


def plot_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """DVC plot rows: LOSO AUROC of every release, matched null and release − null per mechanism, source and total
    ε (the no-DP reference left out)."""
    rows = summary[summary.arm.isin(["release", "matched_null", "release_minus_null"])
                   & (summary.metric == HEADLINE_METRIC)]
    return rows.rename(columns={"value": "auroc"})[PLOT_COLUMNS].reset_index(drop=True)
