"""Stage ``federated_accounting`` (study B): the cumulative ε of the per-step Laplace gradient DP over local steps
and rounds (:mod:`eegprivacy.studies.federated.accounting`), written as tidy rows, per-round curves, a headline
JSON, markdown tables and a figure (:mod:`eegprivacy.reporting.federated_accounting`); no training."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import atomic_paths
from eegprivacy.pipeline.stage_script import add_output_flags
from eegprivacy.reporting.federated_accounting import closing_note_lines, markdown, summary_json, write_figure
from eegprivacy.studies.federated.accounting import (account, attach_audit, headline_and_curves, log_to_mlflow,
                                                     selected_datasets)
from eegprivacy.studies.federated.config import FederatedMIAConfig


def add_arguments(parser) -> None:
    parser.add_argument("--grid", default="params/federated_mia.yaml", help="study B grid (federated_mia)")
    parser.add_argument("--datasets", nargs="*", help="subset of the grid's datasets (default: all)")
    add_output_flags(parser, "federated_accounting", out="tidy rows", summary="headline numbers",
                     curves=("plots/federated_accounting_curves.csv", "cumulative ε after every round (plot data)"),
                     report="markdown tables", figure=None)
    parser.add_argument("--audit", default="metrics/federated_audit.csv",
                        help="federated_audit's rows: the one-run empirical ε put beside each certified ε (a missing "
                             "file leaves those columns empty, and says so)")


def run(args) -> int:
    config = args.config
    grid = FederatedMIAConfig.load(args.grid, "federated_mia")
    accounting = account(config, grid, selected_datasets(grid, args.datasets, args.grid))
    summary = summary_json(accounting, config.delta)
    headline, curves = headline_and_curves(accounting.tidy)
    audit_path = Path(args.audit)
    if not audit_path.exists():
        print(f"federated-accounting: no {audit_path} (run federated_audit first): no empirical ε beside the rows")
    headline = attach_audit(headline, pd.read_csv(audit_path) if audit_path.exists() else None)
    with atomic_paths(args.out, args.curves, args.summary, args.report, args.figure) as (out, cv, js, md, png):
        headline.to_csv(out, index=False)
        curves.to_csv(cv, index=False)
        js.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        md.write_text(markdown(accounting.tidy, summary))
        write_figure(accounting.tidy, summary, png)
    log_to_mlflow(accounting.tidy, summary, config, grid, [
        (args.out, "metrics"), (args.curves, "plots"), (args.summary, "metrics"), (args.report, "reports"),
        (args.figure, "figures")])
    for line in closing_note_lines(summary):
        print(line)
    print(f"federated-accounting: {len(headline)} rows -> {args.out}, {len(curves)} curve points -> {args.curves} "
          f"(δ = {config.delta:g}; timings {accounting.timings})")
    return 0
