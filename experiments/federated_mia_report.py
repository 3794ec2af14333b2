"""Stage ``federated_mia_report`` (study B): the per-dataset rows of ``federated_mia`` summarised across rounds
and seeds (:mod:`eegprivacy.studies.federated.report`) into the summary CSV, the headline JSON, tables in the
shape of the paper's Tables 4-9 and the figures (:mod:`eegprivacy.reporting.federated`), with the cumulative ε of
``federated_accounting`` beside every per-step ε."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.reporting.federated import figures, headline, tables_md, write_headline
from eegprivacy.studies.federated.cumulative import Cumulative
from eegprivacy.studies.federated.report import (
    across_rounds,
    read_rows,
    regressions_by_dataset,
    without_points,
)


def add_arguments(parser) -> None:
    parser.add_argument("--inputs", nargs="+", default=["metrics/federated_mia_eegmat.csv",
                                                         "metrics/federated_mia_synthetic_mi.csv"])
    parser.add_argument("--json", default="metrics/federated_mia.json")
    parser.add_argument("--summary", default="metrics/federated_mia.csv")
    parser.add_argument("--tables", default="reports/federated_mia_tables.md")
    parser.add_argument("--figures", default="reports/figures")
    parser.add_argument("--accounting", default="metrics/federated_accounting.csv",
                        help="federated-accounting's rows: cumulative ε beside every per-step ε")


def run(args) -> int:
    tidy = read_rows(args.inputs)
    summary = across_rounds(tidy)
    regressions = regressions_by_dataset(tidy)
    with atomic_path(args.summary) as tmp:
        summary.to_csv(tmp, index=False)
    cum = Cumulative(args.accounting)
    write_headline(args.json, headline(summary, without_points(regressions), cum))
    write_text_atomic(args.tables, tables_md(summary, without_points(regressions), cum))
    paths = figures(tidy, regressions, Path(args.figures), cum)
    print(f"federated-mia report: {len(summary)} summary rows -> {args.json}, {args.tables}, "
          f"{len(paths)} figures in {args.figures}")
    return 0
