"""Stage ``dp_scaling_aggregate`` (study A): balanced accuracy per scaling source against the total ε.

Mean and 95% t-interval over seeds per (dataset, mechanism, scaling source, total ε), the paired utility cost of
each end-to-end source against the paper's private scaling (same seeds, so the same MLP initialisation and noise
stream), a headline JSON, plot data and one figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.evaluation import mean_ci  # noqa: E402
from eegprivacy.evaluation.figures import titled  # noqa: E402
from eegprivacy.params import load_params  # noqa: E402
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run  # noqa: E402
from eegprivacy.tracking.sweep import aggregate  # noqa: E402

NAME = "dp-scaling-aggregate"
HELP = ("Study A: aggregate the dp-scaling rows of every dataset (balanced accuracy mean and 95%% CI over seeds "
        "per scaling source, mechanism and total ε; paired cost of end-to-end DP); write metrics/dp_scaling.json, "
        "plots/dp_scaling.csv and reports/figures/dp_scaling.png, and log one MLflow run per dataset.")

BY = ["dataset", "mechanism", "scaling_source", "epsilon", "protocol"]
BUDGET = ["total_epsilon", "release_epsilon", "scaling_epsilon", "end_to_end"]
SOURCE_STYLE = {"private": ("#7F7F7F", "s", "private scaling (paper; no end-to-end ε)"),
                "public_reference": ("#0072B2", "o", "public reference scaling (end to end)"),
                "dp_quantiles": ("#D55E00", "^", "DP-quantile scaling (end to end)")}


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/dp_scaling.yaml", help="the dp_scaling params file")
    parser.add_argument("--metrics-dir", default="metrics", help="where the per-seed CSVs are and results go")
    parser.add_argument("--figures-dir", default="reports/figures")
    parser.add_argument("--plots-dir", default="plots")


def _num(x) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def balanced_accuracy(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean/CI over seeds of the optimistic-protocol balanced accuracy, with each config's ε split beside it."""
    rows = per_seed[(per_seed.metric == "balanced_accuracy") & (per_seed.protocol == "optimistic")]
    agg = aggregate(rows, BY)
    budgets = rows.groupby(BY[:-1], dropna=False)[BUDGET].first().reset_index()
    return agg.merge(budgets, on=BY[:-1], how="left")


def paired_cost(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, mechanism, ε, source): mean and CI over seeds of BA(private) − BA(source) on the same seed,
    so a positive cost is utility lost by making the scaling end-to-end private."""
    rows = per_seed[(per_seed.metric == "balanced_accuracy") & (per_seed.protocol == "optimistic")
                    & (per_seed.mechanism != "none")]
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
           "baseline_no_dp_private_cohort": ({"mean": _num(base.value.iloc[0]), "ci_low": _num(base.ci_low.iloc[0]),
                                              "ci_high": _num(base.ci_high.iloc[0]), "n": int(base.n.iloc[0])}
                                             if len(base) else None),
           "results": {}}
    for r in a[a.mechanism != "none"].sort_values(["mechanism", "scaling_source", "epsilon"]).itertuples():
        paired = c[(c.mechanism == r.mechanism) & (c.scaling_source == r.scaling_source)
                   & np.isclose(c.epsilon, r.epsilon)] if len(c) else c
        entry = {"balanced_accuracy": {"mean": _num(r.value), "ci_low": _num(r.ci_low), "ci_high": _num(r.ci_high),
                                       "n": int(r.n)},
                 "total_epsilon": _num(r.total_epsilon), "release_epsilon": _num(r.release_epsilon),
                 "scaling_epsilon": _num(r.scaling_epsilon), "end_to_end": bool(r.end_to_end)}
        if len(paired):
            p = paired.iloc[0]
            entry["utility_cost_vs_private_scaling"] = {"mean": _num(p.cost_mean), "ci_low": _num(p.cost_ci_low),
                                                "ci_high": _num(p.cost_ci_high), "n": int(p.n)}
        out["results"].setdefault(r.mechanism, {}).setdefault(r.scaling_source, {})[f"epsilon_{r.epsilon:g}"] = entry
    return out


def figure(agg: pd.DataFrame, datasets: list[str]):
    """Balanced accuracy vs total ε: a row per dataset, a column per mechanism, a line (CI band) per source."""
    mechanisms = sorted(set(agg.mechanism) - {"none"})
    fig, axes = plt.subplots(len(datasets), len(mechanisms), figsize=(4.3 * len(mechanisms), 3.2 * len(datasets) + 0.8),
                             squeeze=False, sharey=True, layout="constrained")
    for i, dataset in enumerate(datasets):
        a = agg[agg.dataset == dataset]
        base = a[a.mechanism == "none"]
        for j, mechanism in enumerate(mechanisms):
            ax = axes[i, j]
            for source, (colour, marker, label) in SOURCE_STYLE.items():
                sub = a[(a.mechanism == mechanism) & (a.scaling_source == source)].sort_values("epsilon")
                if sub.empty:
                    continue
                eps = sub.epsilon.to_numpy(float)
                ax.plot(eps, sub.value, marker=marker, ms=4, color=colour, label=label)
                ax.fill_between(eps, sub.ci_low.to_numpy(float), sub.ci_high.to_numpy(float), color=colour,
                                alpha=0.15, linewidth=0)
            if len(base):
                ax.axhline(float(base.value.iloc[0]), color="#009E73", lw=1.2, ls="-.",
                           label="no DP (private cohort)")
            ax.axhline(0.5, color="black", ls="--", lw=1, label="chance")
            ax.set_xscale("log")
            ticks = sorted(a.loc[a.mechanism == mechanism, "epsilon"].astype(float).unique())
            ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
            ax.minorticks_off()
            ax.set_xlabel("total ε (scaling + release)")
            ax.set_ylabel("balanced accuracy (LOSO, optimistic)" if j == 0 else "")
            ax.set_title(titled(f"{dataset} — {mechanism}", dataset.startswith("synthetic")), fontsize=8.5)
            ax.grid(True, alpha=0.3)
    handles = {}
    for ax in axes.ravel():
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle("Utility by source of the scaling statistics at equal total ε"
                 + (" (panels marked SYNTHETIC DATA are synthetic)" if any(d.startswith("synthetic") for d in datasets)
                    else ""), fontsize=10)
    return fig


def run(args) -> int:
    params = load_params(args.params, "dp_scaling")
    datasets = list(params["datasets"])
    metrics_dir, figures_dir, plots_dir = Path(args.metrics_dir), Path(args.figures_dir), Path(args.plots_dir)
    for folder in (figures_dir, plots_dir):
        folder.mkdir(parents=True, exist_ok=True)

    per_seed = {d: pd.read_csv(metrics_dir / f"dp_scaling_{d}.csv") for d in datasets}
    agg = pd.concat([balanced_accuracy(f) for f in per_seed.values()], ignore_index=True)
    cost = pd.concat([paired_cost(f) for f in per_seed.values()], ignore_index=True)
    summary = {d: summarise(agg, cost, per_seed[d], d) for d in datasets}

    (metrics_dir / "dp_scaling.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_rows = agg[agg.mechanism != "none"][["dataset", "mechanism", "scaling_source", "total_epsilon", "value",
                                              "ci_low", "ci_high", "n", "end_to_end"]]
    plot_rows.rename(columns={"value": "balanced_accuracy"}).to_csv(plots_dir / "dp_scaling.csv", index=False)
    fig = figure(agg, datasets)
    fig.savefig(figures_dir / "dp_scaling.png", dpi=110)
    plt.close(fig)

    for dataset, values in summary.items():
        tags = required_tags(study="a", stage="dp_scaling_aggregate", dataset=dataset,
                             dataset_version=values["dataset_version"], synthetic=values["synthetic"], seed=None,
                             dvc_stage="dp_scaling_aggregate")
        flat = {}
        for mechanism, sources in values["results"].items():
            for source, by_eps in sources.items():
                for eps, entry in by_eps.items():
                    flat[f"{mechanism}/{source}/{eps}/balanced_accuracy_mean"] = entry["balanced_accuracy"]["mean"]
                    if "utility_cost_vs_private_scaling" in entry:
                        flat[f"{mechanism}/{source}/{eps}/utility_cost_vs_private_mean"] = \
                            entry["utility_cost_vs_private_scaling"]["mean"]
        with start_run(study="a", tags=tags, run_name=f"dp_scaling_aggregate-{dataset}", params={"dp_scaling": params}):
            log_metrics({k: v for k, v in flat.items() if v is not None})
            log_artifact(figures_dir / "dp_scaling.png", "figures")
        base = values["baseline_no_dp_private_cohort"] or {}
        print(f"{dataset}: no-DP balanced accuracy on the private cohort {base.get('mean')} "
              f"[{base.get('ci_low')}, {base.get('ci_high')}] (chance 0.5) -> {metrics_dir / 'dp_scaling.json'}")
    return 0
