"""Stage ``dp_scaling_aggregate`` (study A): each dataset's LOSO AUROC per scaling source against the total ε
beside its matched null, the cost of end-to-end DP scaling against the paper's private scaling (intervals over
patients and seeds, from the ``dp_scaling`` summaries), a headline JSON, plot data and one figure."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.pipeline.profile import cohorts
from eegprivacy.pipeline.stage_script import interval_text, log_dataset_run
from eegprivacy.reporting.figures import save_figure
from eegprivacy.reporting.format import write_json
from eegprivacy.reporting.release_figures import scaling_vs_epsilon
from eegprivacy.studies.release.scaling_summary import dataset_summary, headline_metrics, load_summaries, plot_rows


def add_arguments(parser) -> None:
    parser.add_argument("--metrics-dir", default="metrics",
                        help="where the results go; the dp_scaling summaries are read from its dp_scaling/ folder "
                             "(dp_scaling_summary_<dataset>.csv)")
    parser.add_argument("--figures-dir", default="reports/figures")
    parser.add_argument("--plots-dir", default="plots")


def run(args) -> int:
    config = args.config
    metrics_dir, figures_dir, plots_dir = Path(args.metrics_dir), Path(args.figures_dir), Path(args.plots_dir)
    datasets = [d for d in config.datasets if d in cohorts("study_a")]  # the profile's study A cohorts
    rows = load_summaries(metrics_dir, datasets)
    summary = {d: dataset_summary(rows, d) for d in datasets}

    write_json(metrics_dir / "dp_scaling.json", summary)
    plots_dir.mkdir(parents=True, exist_ok=True)
    plot_rows(rows).to_csv(plots_dir / "dp_scaling.csv", index=False)
    figure = save_figure(scaling_vs_epsilon(rows, datasets), figures_dir / "dp_scaling.png", dpi=110)

    for dataset, values in summary.items():
        log_dataset_run("a", "dp_scaling_aggregate", dataset, values["dataset_version"], values["synthetic"],
                        params={"dp_scaling": config.to_dict()}, metrics=headline_metrics(values),
                        artifacts=[figure], folder="figures")
        print(f"{dataset}: no-DP LOSO AUROC on the private cohort "
              f"{interval_text(values['baseline_no_dp_private_cohort']['auroc'])} (chance 0.5); "
              "utility horizons (AUROC): "
              f"{ {m: {s: h.get('auroc') for s, h in by.items()} for m, by in values['utility_horizons'].items()} } "
              f"-> {metrics_dir / 'dp_scaling.json'}")
    return 0
