"""Stage ``dp_scaling_aggregate`` (study A): balanced accuracy per scaling source against the total ε, the paired
utility cost of end-to-end DP scaling, a headline JSON, plot data and one figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from eegprivacy.reporting.figures import save_figure
from eegprivacy.reporting.format import write_json
from eegprivacy.reporting.release_figures import scaling_vs_epsilon
from eegprivacy.studies.release.scaling_summary import (
    balanced_accuracy,
    headline_metrics,
    paired_cost,
    plot_rows,
    summarise,
)
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--metrics-dir", default="metrics", help="where the per-seed CSVs are and results go")
    parser.add_argument("--figures-dir", default="reports/figures")
    parser.add_argument("--plots-dir", default="plots")


def run(args) -> int:
    config = args.config
    metrics_dir, figures_dir, plots_dir = Path(args.metrics_dir), Path(args.figures_dir), Path(args.plots_dir)
    per_seed = {d: pd.read_csv(metrics_dir / f"dp_scaling_{d}.csv") for d in config.datasets}
    agg = pd.concat([balanced_accuracy(f) for f in per_seed.values()], ignore_index=True)
    cost = pd.concat([paired_cost(f) for f in per_seed.values()], ignore_index=True)
    summary = {d: summarise(agg, cost, per_seed[d], d) for d in config.datasets}

    write_json(metrics_dir / "dp_scaling.json", summary)
    plots_dir.mkdir(parents=True, exist_ok=True)
    plot_rows(agg).to_csv(plots_dir / "dp_scaling.csv", index=False)
    figure = save_figure(scaling_vs_epsilon(agg, config.datasets), figures_dir / "dp_scaling.png", dpi=110)

    for dataset, values in summary.items():
        tags = required_tags(study="a", stage="dp_scaling_aggregate", dataset=dataset,
                             dataset_version=values["dataset_version"], synthetic=values["synthetic"], seed=None,
                             dvc_stage="dp_scaling_aggregate")
        with start_run(study="a", tags=tags, run_name=f"dp_scaling_aggregate-{dataset}",
                       params={"dp_scaling": config.to_dict()}):
            log_metrics(headline_metrics(values))
            log_artifact(figure, "figures")
        base = values["baseline_no_dp_private_cohort"] or {}
        print(f"{dataset}: no-DP balanced accuracy on the private cohort {base.get('mean')} "
              f"[{base.get('ci_low')}, {base.get('ci_high')}] (chance 0.5) -> {metrics_dir / 'dp_scaling.json'}")
    return 0
