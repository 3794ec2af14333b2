"""Stage ``dp_aggregate`` (study A): mean and 95% CI over seeds, headline JSON, tidy CSV, figures, MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.evaluation.dp_figures import confusion_matrices, intrinsic_vs_epsilon, plot_data, utility_vs_epsilon
from eegprivacy.params import load_params
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run
from eegprivacy.tracking.sweep import aggregate

NAME = "dp-aggregate"
HELP = ("Study A: aggregate the per-seed release and utility rows of every dataset (mean and 95%% CI over seeds), "
        "write metrics/dp_release.{json,csv}, plot data and figures, and log one MLflow run per dataset.")

BY = ["study", "dataset", "mechanism", "epsilon", "protocol"]


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/dp_release.yaml", help="study A params file")
    parser.add_argument("--metrics-dir", default="metrics", help="where the per-seed CSVs are and results go")
    parser.add_argument("--figures-dir", default="reports/figures")
    parser.add_argument("--plots-dir", default="plots")


def _finite(x) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def headline(agg: pd.DataFrame, per_seed: pd.DataFrame, epsilon: float) -> dict:
    """Baseline and ε-specific balanced accuracy (mean, CI over seeds) beside chance, plus intrinsic utility."""
    def pick(mechanism, eps, protocol, metric):
        rows = agg[(agg.mechanism == mechanism) & (agg.protocol == protocol) & (agg.metric == metric)
                   & (np.isclose(agg.epsilon, eps) | (np.isinf(agg.epsilon) & np.isinf(eps)))]
        if rows.empty:
            return None
        r = rows.iloc[0]
        return {"mean": _finite(r.value), "ci_low": _finite(r.ci_low), "ci_high": _finite(r.ci_high), "n": int(r.n)}

    base_seed0 = per_seed[(per_seed.mechanism == "none") & (per_seed.seed == 0) & (per_seed.protocol == "optimistic")]
    wilson = {m: {"value": _finite(r.value), "ci_low": _finite(r.ci_low), "ci_high": _finite(r.ci_high)}
              for m, r in base_seed0.set_index("metric").iterrows() if m in ("accuracy", "recall", "specificity")}
    out = {"chance_balanced_accuracy": 0.5,
           "baseline": {p: pick("none", math.inf, p, "balanced_accuracy") for p in ("optimistic", "nested")},
           # the same protocol on permuted labels: the score with nothing to learn (the protocol's own bias)
           "negative_control_permuted_labels": {p: pick("permuted_labels", math.inf, p, "balanced_accuracy")
                                                for p in ("optimistic", "nested")},
           "baseline_seed0_wilson": wilson,
           f"epsilon_{epsilon:g}": {}}
    for mechanism in sorted(set(agg.mechanism) - {"none", "permuted_labels"}):
        out[f"epsilon_{epsilon:g}"][mechanism] = {
            "balanced_accuracy": {p: pick(mechanism, epsilon, p, "balanced_accuracy") for p in ("optimistic", "nested")},
            "correlation": pick(mechanism, epsilon, "intrinsic", "correlation"),
            "snr_db": pick(mechanism, epsilon, "intrinsic", "snr_db"),
            "noise_scale": pick(mechanism, epsilon, "intrinsic", "noise_scale"),
        }
    return out


def run(args) -> int:
    all_params = load_params(args.params)
    datasets = list(all_params["dp_release"]["datasets"])
    figure_epsilon = float(all_params["dp_utility"]["figure_epsilon"])
    metrics_dir, figures_dir, plots_dir = Path(args.metrics_dir), Path(args.figures_dir), Path(args.plots_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)

    aggregated, summary, plot_frames = [], {}, []
    for dataset in datasets:
        per_seed = pd.concat([pd.read_csv(metrics_dir / f"dp_release_{dataset}.csv"),
                              pd.read_csv(metrics_dir / f"dp_utility_{dataset}.csv")], ignore_index=True)
        agg = aggregate(per_seed, BY)
        aggregated.append(agg)
        synthetic = dataset.startswith("synthetic")
        version = str(per_seed["dataset_version"].iloc[0])
        summary[dataset] = {"dataset_version": version, "synthetic": synthetic,
                            "n_patients": int(per_seed["n_patients"].iloc[0]),
                            "n_features": int(per_seed["n_features"].iloc[0]),
                            **headline(agg, per_seed, figure_epsilon)}
        plot_frames.append(plot_data(agg, "balanced_accuracy", "optimistic").assign(protocol="optimistic"))
        plot_frames.append(plot_data(agg, "balanced_accuracy", "nested").assign(protocol="nested"))

        figures = {
            f"dp_utility_{dataset}.png": utility_vs_epsilon(agg, synthetic=synthetic),
            f"dp_intrinsic_{dataset}.png": intrinsic_vs_epsilon(agg, synthetic=synthetic),
            f"dp_confusion_{dataset}.png": confusion_matrices(agg, epsilon=figure_epsilon, synthetic=synthetic),
        }
        for name, fig in figures.items():
            fig.savefig(figures_dir / name, dpi=110)
            plt.close(fig)

        tags = required_tags(study="a", stage="dp_aggregate", dataset=dataset, dataset_version=version,
                             synthetic=synthetic, seed=None, dvc_stage="dp_aggregate")
        with start_run(study="a", tags=tags, run_name=f"dp_aggregate-{dataset}", params=all_params):
            flat = {"baseline_balanced_accuracy_optimistic": (summary[dataset]["baseline"]["optimistic"] or {})
                    .get("mean")}
            for mechanism, values in summary[dataset][f"epsilon_{figure_epsilon:g}"].items():
                for protocol, ba in values["balanced_accuracy"].items():
                    if ba and ba["mean"] is not None:
                        flat[f"{mechanism}/eps_{figure_epsilon:g}/balanced_accuracy_{protocol}_mean"] = ba["mean"]
            log_metrics({k: v for k, v in flat.items() if v is not None})
            for name in figures:
                log_artifact(figures_dir / name, "figures")

    tidy = pd.concat(aggregated, ignore_index=True)
    tidy.to_csv(metrics_dir / "dp_release.csv", index=False)
    (metrics_dir / "dp_release.json").write_text(json.dumps(summary, indent=2) + "\n")
    pd.concat(plot_frames, ignore_index=True).to_csv(plots_dir / "dp_balanced_accuracy.csv", index=False)
    for dataset, values in summary.items():
        base = values["baseline"]["optimistic"] or {}
        control = values["negative_control_permuted_labels"]["optimistic"] or {}
        print(f"{dataset}: baseline balanced accuracy {base.get('mean')} [{base.get('ci_low')}, "
              f"{base.get('ci_high')}]; label-permuted control {control.get('mean')} (chance 0.5)")
    return 0
