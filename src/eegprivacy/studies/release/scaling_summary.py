"""The ``dp_scaling_aggregate`` summaries: balanced accuracy per scaling source against the total ε.

Mean and 95% t-interval over seeds per (dataset, mechanism, scaling source, total ε), and the paired utility cost
of each end-to-end source against the paper's private scaling: the same seeds, so the same MLP initialisation and
noise stream, which leaves the difference to the scaling statistics alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.evaluation import mean_ci
from eegprivacy.pipeline.sweep import aggregate
from eegprivacy.reporting.format import epsilon_key
from eegprivacy.studies.release.aggregate import interval, rounded

BY = ["dataset", "mechanism", "scaling_source", "epsilon", "protocol"]
BUDGET = ["total_epsilon", "release_epsilon", "scaling_epsilon", "end_to_end"]
PLOT_COLUMNS = ["dataset", "mechanism", "scaling_source", "total_epsilon", "value", "ci_low", "ci_high", "n",
                "end_to_end"]


def _optimistic_balanced_accuracy(per_seed: pd.DataFrame) -> pd.DataFrame:
    return per_seed[(per_seed.metric == "balanced_accuracy") & (per_seed.protocol == "optimistic")]


def balanced_accuracy(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean/CI over seeds of the optimistic-protocol balanced accuracy, with each config's ε split beside it."""
    rows = _optimistic_balanced_accuracy(per_seed)
    agg = aggregate(rows, BY)
    budgets = rows.groupby(BY[:-1], dropna=False)[BUDGET].first().reset_index()
    return agg.merge(budgets, on=BY[:-1], how="left")


def paired_cost(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, mechanism, ε, source): mean and CI over seeds of BA(private) − BA(source) on the same seed,
    so a positive cost is utility lost by making the scaling end-to-end private."""
    rows = _optimistic_balanced_accuracy(per_seed)
    rows = rows[rows.mechanism != "none"]
    wide = rows.pivot_table(index=["dataset", "mechanism", "epsilon", "seed"], columns="scaling_source",
                            values="value")
    out = []
    for source in [s for s in ("public_reference", "dp_quantiles") if s in wide and "private" in wide]:
        diff = (wide["private"] - wide[source]).dropna()
        for (dataset, mechanism, epsilon), part in diff.groupby(level=[0, 1, 2]):
            mean, low, high = mean_ci(part.to_numpy(float))
            out.append({"dataset": dataset, "mechanism": mechanism, "epsilon": epsilon, "scaling_source": source,
                        "cost_mean": mean, "cost_ci_low": low, "cost_ci_high": high, "n": int(part.size)})
    return pd.DataFrame(out)


def summarise(agg: pd.DataFrame, cost: pd.DataFrame, per_seed: pd.DataFrame, dataset: str) -> dict:
    """Headline JSON for one dataset: baseline, then mechanism → source → ε with BA, budget and paired cost."""
    first = per_seed.iloc[0]
    a, c = agg[agg.dataset == dataset], cost[cost.dataset == dataset] if len(cost) else cost
    base = a[a.mechanism == "none"]
    out = {"dataset_version": str(first["dataset_version"]), "synthetic": dataset.startswith("synthetic"),
           "n_private_patients": int(first["n_patients"]), "n_public_patients": int(first["n_public"]),
           "n_features": int(first["n_features"]), "chance_balanced_accuracy": 0.5,
           "baseline_no_dp_private_cohort": interval(base.iloc[0]) if len(base) else None,
           "results": {}}
    for r in a[a.mechanism != "none"].sort_values(["mechanism", "scaling_source", "epsilon"]).itertuples():
        paired = c[(c.mechanism == r.mechanism) & (c.scaling_source == r.scaling_source)
                   & np.isclose(c.epsilon, r.epsilon)] if len(c) else c
        entry = {"balanced_accuracy": interval(r), "total_epsilon": rounded(r.total_epsilon),
                 "release_epsilon": rounded(r.release_epsilon), "scaling_epsilon": rounded(r.scaling_epsilon),
                 "end_to_end": bool(r.end_to_end)}
        if len(paired):
            p = paired.iloc[0]
            entry["utility_cost_vs_private_scaling"] = {"mean": rounded(p.cost_mean), "ci_low": rounded(p.cost_ci_low),
                                                        "ci_high": rounded(p.cost_ci_high), "n": int(p.n)}
        out["results"].setdefault(r.mechanism, {}).setdefault(r.scaling_source, {})[
            f"epsilon_{epsilon_key(r.epsilon)}"] = entry
    return out


def headline_metrics(summary: dict) -> dict:
    """One dataset's headline as flat MLflow metrics: balanced accuracy and paired cost per mechanism/source/ε."""
    flat = {}
    for mechanism, sources in summary["results"].items():
        for source, by_eps in sources.items():
            for eps, entry in by_eps.items():
                flat[f"{mechanism}/{source}/{eps}/balanced_accuracy_mean"] = entry["balanced_accuracy"]["mean"]
                if "utility_cost_vs_private_scaling" in entry:
                    flat[f"{mechanism}/{source}/{eps}/utility_cost_vs_private_mean"] = \
                        entry["utility_cost_vs_private_scaling"]["mean"]
    return {k: v for k, v in flat.items() if v is not None}


def plot_rows(agg: pd.DataFrame) -> pd.DataFrame:
    """DVC plot rows: balanced accuracy per mechanism, source and total ε (the no-DP reference left out)."""
    return agg[agg.mechanism != "none"][PLOT_COLUMNS].rename(columns={"value": "balanced_accuracy"})
