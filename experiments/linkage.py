"""Stage ``linkage`` (study A): exact GlobalID vs Bloom-filter linkage on SYNTHETIC identity tables, per typo
rate × seed (:mod:`eegprivacy.studies.release.linkage`). Only counts and rates leave the cells: the CSV, JSON,
figure and MLflow runs hold no identity, pseudonym or key, and the stage prints only rates."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

from eegprivacy.pipeline.sweep import SweepRunner, run_prefetched
from eegprivacy.reporting.format import write_json
from eegprivacy.reporting.linkage import precision_recall_figure
from eegprivacy.studies.release import linkage
from eegprivacy.tracking import log_artifact, log_metrics, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--summary", default="metrics/linkage.json", help="headline: mean and 95%% CI over seeds")
    parser.add_argument("--figure", default="reports/figures/linkage_precision_recall.png")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")


def run(args) -> int:
    config = args.config
    version = linkage.dataset_version(config)
    cells = linkage.cells_for(config, version, args.stage.code_hash())
    params = {"linkage": config.to_dict()}
    runner = SweepRunner(name=f"linkage-{linkage.DATASET}", study="a", dataset=linkage.DATASET,
                         out_dir=Path(args.cells) / "linkage" / linkage.DATASET,
                         parent_tags=linkage.run_tags(version, None),
                         tags_fn=lambda cell: linkage.run_tags(version, cell.seed),
                         params={**params, "dataset_version": version}, progress=not args.no_progress)
    [tidy] = run_prefetched([(runner, cells)], linkage.evaluate_cell, n_jobs=args.jobs)
    tidy = tidy.drop(columns=list(linkage.CELL_LISTS), errors="ignore")  # constant lists; the params hold them

    out, summary_path, figure_path = Path(args.out or args.stage.outs[0]), Path(args.summary), Path(args.figure)
    out.parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(out, index=False)
    summary = linkage.summarise(tidy, config, version)
    write_json(summary_path, summary)
    fig = precision_recall_figure(linkage.threshold_curves(tidy), summary)
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure_path, dpi=110)
    plt.close(fig)

    with start_run(study="a", tags=linkage.run_tags(version, None), run_name=f"linkage-{linkage.DATASET}-summary",
                   params=params):
        log_metrics(linkage.headline_metrics(summary))
        for path in (out, summary_path, figure_path):
            log_artifact(path, "linkage")

    for typo_rate, entry in summary["typo_rates"].items():
        e, b = entry["exact_hmac"], entry["bloom"]
        print(f"[SYNTHETIC] typo rate {typo_rate}: exact P={e['precision']['mean']} R={e['recall']['mean']} | "
              f"Bloom@{summary['default_threshold']:g} P={b['precision']['mean']} R={b['recall']['mean']}")
    print(f"{len(cells)} cells -> {out}, {summary_path}, {figure_path}")
    return 0
