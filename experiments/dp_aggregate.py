"""Stage ``dp_aggregate`` (study A): each dataset's headline (release vs matched null, horizons, intervals over
patients and seeds), the per-seed aggregate CSV, figures and one MLflow run per dataset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from eegprivacy.pipeline.profile import cohorts
from eegprivacy.pipeline.stage_script import interval_text, log_dataset_run
from eegprivacy.reporting.figures import save_figure
from eegprivacy.reporting.format import write_json
from eegprivacy.reporting.release import balanced_accuracy_plot_rows, release_figures
from eegprivacy.studies.release.aggregate import dataset_summary, headline_metrics, load_rows, load_summary
from eegprivacy.studies.release.config import DPReleaseConfig


def add_arguments(parser) -> None:
    parser.add_argument("--metrics-dir", default="metrics",
                        help="where results go; the per-seed CSVs are read from its dp_release/ and dp_utility/ "
                             "folders")
    parser.add_argument("--figures-dir", default="reports/figures/dp_aggregate",
                        help="the per-cohort figures' folder (one file set per cohort of the profile)")
    parser.add_argument("--plots-dir", default="plots")


def run(args) -> int:
    release = DPReleaseConfig.load(args.params, "dp_release")
    figure_epsilon = float(args.config.figure_epsilon)
    params = {"dp_release": release.to_dict(), "dp_utility": args.config.to_dict()}
    metrics_dir, figures_dir, plots_dir = Path(args.metrics_dir), Path(args.figures_dir), Path(args.plots_dir)

    aggregated, summary, plot_frames = [], {}, []
    for dataset in [d for d in release.datasets if d in cohorts("study_a")]:  # the profile's study A cohorts
        per_seed, agg = load_rows(metrics_dir, dataset)
        utility = load_summary(metrics_dir, dataset)
        aggregated.append(agg)
        summary[dataset] = dataset_summary(dataset, utility, agg, per_seed, figure_epsilon, release.label_epsilon)
        plot_frames.append(balanced_accuracy_plot_rows(agg))
        figures = [save_figure(fig, figures_dir / name, dpi=110) for name, fig in
                   release_figures(agg, utility, dataset, summary[dataset]["synthetic"], figure_epsilon).items()]
        # One MLflow run per dataset: the headline numbers as metrics, the figures as artifacts.
        log_dataset_run("a", "dp_aggregate", dataset, summary[dataset]["dataset_version"],
                        summary[dataset]["synthetic"], params=params,
                        metrics=headline_metrics(summary[dataset], figure_epsilon), artifacts=figures, folder="figures")

    pd.concat(aggregated, ignore_index=True).to_csv(metrics_dir / "dp_release.csv", index=False)
    write_json(metrics_dir / "dp_release.json", summary)
    plots_dir.mkdir(parents=True, exist_ok=True)
    pd.concat(plot_frames, ignore_index=True).to_csv(plots_dir / "dp_balanced_accuracy.csv", index=False)
    for dataset, values in summary.items():
        print(f"{dataset}: baseline LOSO AUROC {interval_text(values['baseline']['auroc'])}; label-permuted control "
              f"{interval_text(values['negative_control_permuted_labels']['auroc'])}; "
              f"utility horizons {values['utility_horizons']} "
              f"(ε covers {values.get('utility_horizons_test', {}).get('eps_covers_note', 'not stated')})")
    return 0
