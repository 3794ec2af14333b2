"""Stage ``embedding_audit_cohorts`` (study C across cohorts): the per-cohort tidy rows of ``embedding_audit@<cohort>``
(``metrics/embedding_audit_<cohort>.csv``) summarised into one answer table -- per cohort and encoder, is the
task (the diagnosis where the cohort has one), the subject's identity and the PSD attribute decodable above
control? -- one table per cohort, the headline JSON and one cross-cohort figure
(:mod:`eegprivacy.reporting.embedding_audit_cohorts`). It reads each cohort's headline JSON beside its CSV
(``metrics/embedding_audit_<cohort>.json``) for the cohort's design text when it is there, and logs one MLflow
run (``embedding_audit_cohorts``, tagged with every cohort and its version) holding the answers and estimates.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from eegprivacy.atomic import write_text_atomic
from eegprivacy.reporting.embedding_audit_cohorts import (
    FIGURE,
    answers,
    default_inputs,
    figure,
    headline,
    load,
    report_md,
    write_headline,
)


def add_arguments(parser) -> None:
    parser.add_argument("--inputs", nargs="+", default=default_inputs(),
                        help="per-cohort tidy rows (metrics/embedding_audit_<cohort>.csv), one cohort each")
    parser.add_argument("--out", default="metrics/embedding_audit_cohorts.json",
                        help="headline: per cohort and encoder the answers with their estimates and controls")
    parser.add_argument("--report", default="reports/embedding_audit_cohorts.md",
                        help="markdown: the answer table and one table per cohort")
    parser.add_argument("--figures", default="reports/figures", help=f"folder for {FIGURE}")


def _versions(cohorts: dict) -> str:
    """``cohort=version`` of every cohort, from the headline JSON its stage wrote beside its rows."""
    out = []
    for name, c in cohorts.items():
        meta_path = Path(c["path"]).with_suffix(".json")
        meta = json.loads(meta_path.read_text()).get("meta", {}) if meta_path.exists() else {}
        out.append(f"{name}={meta.get('dataset_version', 'unknown')}")
    return ",".join(out)


def log_run(cohorts: dict, table, artifacts: list[Path]) -> None:
    """One MLflow run: per (cohort, encoder, weights) the estimates the answers rest on and the answers (1 yes, 0 no
    evidence), the report, JSON and figure as artifacts."""
    from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run

    metrics = {}
    for r in table.itertuples():
        key = f"{r.cohort}/{r.encoder}/{r.weights}"
        for question in ("task", "identity", "attribute", "aeds"):
            entry = getattr(r, question)
            for stat in ("value", "ci_low", "ci_high"):
                if np.isfinite(entry[stat]):
                    metrics[f"{key}/{question}_{stat}"] = float(entry[stat])
            if question != "aeds":
                metrics[f"{key}/{question}_decodable"] = float(getattr(r, f"{question}_answer") == "yes")
    synthetic = any(c["synthetic"] for c in cohorts.values())
    tags = required_tags(study="c", stage="embedding_audit_cohorts", dataset="+".join(cohorts),
                         dataset_version=_versions(cohorts), synthetic=synthetic, seed=None,
                         dvc_stage="embedding_audit_cohorts")
    with start_run(study="c", tags=tags, run_name="embedding_audit_cohorts"):
        log_metrics(metrics)
        for path in artifacts:
            log_artifact(path, "report")


def run(args) -> int:
    cohorts = load(args.inputs)
    table = answers(cohorts)
    png = figure(table, Path(args.figures) / FIGURE, synthetic=any(c["synthetic"] for c in cohorts.values()),
                 links={name: c["design"].get("identity_link", "") for name, c in cohorts.items()})
    report = Path(args.report)
    link = Path(os.path.relpath(png, report.parent)).as_posix()
    write_text_atomic(report, report_md(cohorts, table, link))
    write_headline(args.out, headline(cohorts, table))
    log_run(cohorts, table, [Path(args.out), report, png])
    print(f"embedding audit across {len(cohorts)} cohorts ({', '.join(cohorts)}): {len(table)} cells -> "
          f"{args.out}; {report}; {png}")
    return 0
