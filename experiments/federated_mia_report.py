"""Stage ``federated_mia_report`` (study B): the per-dataset rows of ``federated_mia`` summarised across rounds
and seeds (:mod:`eegprivacy.studies.federated.report`) into the summary CSV, the headline JSON, tables in the
shape of the paper's Tables 4-9 and the figures (:mod:`eegprivacy.reporting.federated`), with the cumulative ε of
``federated_accounting`` beside every per-step ε. Intervals are over subjects+seeds: each cell's client-bootstrap
replicates are read from the arrays ``federated_mia`` exported (``data/federated_mia/<dataset>/*.npz``). Each
dataset's MLflow run logs every cell reports/study-b.md prints (mean, interval, p-values, the Holm family), so the
two reports print one computation's p_holm."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.profile import cohorts
from eegprivacy.reporting.federated import figures, headline, tables_md, with_test_sizes, write_headline
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run
from eegprivacy.studies.federated.cumulative import Cumulative
from eegprivacy.studies.federated.report import (
    across_rounds,
    client_utility,
    read_replicates,
    read_rows,
    regressions_by_dataset,
    run_metrics,
    without_points,
)


def add_arguments(parser) -> None:
    parser.add_argument("--inputs", nargs="+", default=None,
                        help="federated-mia's per-cohort rows (default: metrics/federated_mia/federated_mia_<cohort>"
                             ".csv for each study B cohort of the profile, params/profile.yaml)")
    parser.add_argument("--json", default="metrics/federated_mia.json")
    parser.add_argument("--summary", default="metrics/federated_mia.csv")
    parser.add_argument("--tables", default="reports/federated_mia_tables.md")
    parser.add_argument("--figures", default="reports/figures")
    parser.add_argument("--accounting", default="metrics/federated_accounting.csv",
                        help="federated-accounting's rows: cumulative ε beside every per-step ε")
    parser.add_argument("--arrays", default="data/federated_mia",
                        help="folder holding federated-mia's exported arrays, one sub-folder per dataset: each "
                             "cell's client-bootstrap replicates (intervals over subjects+seeds; a dataset without "
                             "them falls back to intervals over seeds, labelled)")


def log_dataset_run(dataset: str, rows, metrics: dict, artifacts: list[Path], cell_tags: dict | None = None) -> None:
    """One MLflow run per dataset: the summary's means (utility and attack scores across rounds and seeds) and
    the cells study B's report prints (:func:`~eegprivacy.studies.federated.report.run_metrics`) as metrics and
    tags, the tables and figures as artifacts."""
    tags = required_tags(study="b", stage="federated_mia_report", dataset=dataset,
                         dataset_version=str(rows["dataset_version"].iloc[0]),
                         synthetic=bool(rows["synthetic"].iloc[0]), seed=None, dvc_stage="federated_mia_report")
    with start_run(study="b", tags=tags, run_name=f"federated_mia_report-{dataset}"):
        import mlflow

        items = list(metrics.items())
        for start in range(0, len(items), 500):  # MLflow caps one batch at 1000 metrics
            log_metrics(dict(items[start:start + 500]))
        tag_items = list((cell_tags or {}).items())
        for start in range(0, len(tag_items), 100):  # and at 100 tags
            mlflow.set_tags(dict(tag_items[start:start + 100]))
        for path in artifacts:
            log_artifact(path, "report")


def run(args) -> int:
    inputs = args.inputs or [f"metrics/federated_mia/federated_mia_{d}.csv" for d in cohorts("study_b")]
    tidy = read_rows(inputs)
    replicates = read_replicates({d: Path(args.arrays) / d for d in tidy["dataset"].unique()})
    summary = with_test_sizes(across_rounds(tidy, replicates), tidy)
    clients = client_utility(tidy)
    regressions = regressions_by_dataset(tidy)
    with atomic_path(args.summary) as tmp:
        summary.to_csv(tmp, index=False)
    cum = Cumulative(args.accounting)
    head = headline(summary, without_points(regressions), cum, clients)
    write_headline(args.json, head)
    write_text_atomic(args.tables, tables_md(summary, without_points(regressions), cum, clients))
    paths = figures(tidy, regressions, Path(args.figures), cum)
    for dataset, rows in tidy.groupby("dataset", sort=True):
        means = {key: entry["mean"] for key, entry in head.items() if key.startswith(f"{dataset}/")
                 and isinstance(entry, dict) and entry.get("mean") is not None}
        cells, cell_tags = run_metrics(summary, dataset)
        log_dataset_run(dataset, rows, {**means, **cells},
                        [Path(args.summary), Path(args.json), Path(args.tables), *paths], cell_tags)
    print(f"federated-mia report: {len(summary)} summary rows -> {args.json}, {args.tables}, "
          f"{len(paths)} figures in {args.figures}")
    return 0
