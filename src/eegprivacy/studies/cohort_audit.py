"""Cohort audit: study A's pipeline on a user's own labelled cohort (any :class:`EEGDataset`, e.g. a BIDS folder).

This module composes the parts in :mod:`eegprivacy.studies.cohort` into one resumable audit (:func:`run_audit`):

1. **Cohort** (:mod:`~eegprivacy.studies.cohort.loading`) — labels checked before any signal is read, the project's
   window features (``params/features.yaml``; low-pass and bands above Nyquist are clipped and flagged by the signal
   layer), cached in the private cache folder by dataset version + config; one vector per patient
   (:func:`~eegprivacy.privacy.patient_vectors`), patient = subject, in a canonical order that depends on the
   values only, so numbers depend on the recordings' data, labels and seeds only.
2. **Utility** (:mod:`~eegprivacy.studies.cohort.sweeps`) — study A's ``dp_utility`` protocol itself
   (:mod:`eegprivacy.studies.release.utility`): its plan (baseline, the noise-free ``clipped`` table, the
   permuted-label control, and per mechanism × ε × noise seed the release and its matched null), its LOSO cell and
   its summary (intervals, release − null, the fixed-sequence horizon test), so ``audit-cohort`` and the
   ``dp_utility`` stage print the same test. Only the runners differ: the audit's cells are cached and logged under
   its own names and tags.
3. **Table attacks** (:mod:`~eegprivacy.studies.cohort.cells`) — re-identification when subjects have two
   recordings (sessions/runs; with one recording per subject, optionally its two halves, labelled *same-session*),
   and membership inference on the released table.
4. **Summary and verdict** (:mod:`~eegprivacy.studies.cohort.summary`, :mod:`~eegprivacy.studies.cohort.verdict`) —
   study A's utility summary plus the attacks, logged as metrics of the audit's run with the verdict's lead as its
   headline columns, and written as ``rows.csv``/``summary.json`` beside the figures and ``report.html``.

Every cell is a :class:`~eegprivacy.pipeline.sweep.SweepRunner` cell: a resumable cache file, a nested MLflow child
run under one run per sweep, the sweeps nested under one top-level run per audit, which a rerun of the same inputs
and parameters reopens (:func:`~eegprivacy.studies.cohort.sweeps.audit_key`). The report is drawn by a caller-given
:class:`AuditReport` (:mod:`eegprivacy.reporting.cohort`), since reporting sits above the studies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_paths
from eegprivacy.data.base import EEGDataset
from eegprivacy.studies.cohort.config import STAGE, AuditConfig
from eegprivacy.studies.cohort.loading import Cohort, load_cohort
from eegprivacy.studies.cohort.summary import summarise, summary_metrics
from eegprivacy.studies.cohort.sweeps import audit_key, run_sweeps, run_tags
from eegprivacy.studies.cohort.verdict import finite_or_none, headline_columns, headline_metrics, summary_document


class AuditReport(Protocol):
    """What draws the audit's figures and writes its ``report.html`` (:mod:`eegprivacy.reporting.cohort` is one).

    :func:`run_audit` computes and hands the rows and summary to it, so that this study never imports the reporting
    layer, which sits above the studies (``tests/test_architecture.py``): the caller passes the reporter in.
    """

    def figures(self, rows: pd.DataFrame, summary: dict) -> dict:
        """The report's figures by name (``utility``, ``attacks``), drawn from the summary rows."""

    def write_html(self, path: str | Path, rows: pd.DataFrame, summary: dict, images: dict) -> Path:
        """The report, written to ``path``, with the saved figures ``images`` (name -> file) in it."""

    def close(self, figs: dict) -> None:
        """Release what :meth:`figures` drew."""


@dataclass
class AuditResult:
    """What :func:`run_audit` returns: the cohort, the summary rows and document, the cell counts and the paths
    written."""

    cohort: Cohort
    rows: pd.DataFrame
    summary: dict
    counts: dict = field(default_factory=dict)  # cells, cells_computed, cells_resumed
    paths: dict = field(default_factory=dict)


def default_out_dir(dataset: str, version: str) -> Path:
    return Path("reports") / "cohort_audit" / f"{dataset}-{version[:8]}"


def default_cache_dir(dataset: str, version: str) -> Path:
    """Where the feature table (it holds subject ids) and the cell cache live: under the git-ignored data/cache,
    never beside the shareable report."""
    return Path("data") / "cache" / "cohort_audit" / f"{dataset}-{version[:8]}"


def run_audit(dataset: EEGDataset, config: AuditConfig = AuditConfig(), out_dir: str | Path | None = None, *,
              report: AuditReport, cache_dir: str | Path | None = None, progress: bool = True,
              n_jobs: int = 1) -> AuditResult:
    """The whole audit: cohort -> one top-level MLflow run for the audit, its sweeps nested under it -> summary
    rows, logged on that run with the verdict's headline columns
    (:func:`~eegprivacy.studies.cohort.verdict.headline_metrics`) -> rows.csv, summary.json, figures and
    report.html in ``out_dir`` (written together, atomically; the report reads the logged rows). A rerun of the
    same inputs and parameters reopens the same runs (:func:`~eegprivacy.studies.cohort.sweeps.audit_key`), and
    the runs table's first screen for the cohort is stored in the experiment
    (:func:`~eegprivacy.tracking.runs.share_view`). ``report`` draws the figures and writes report.html
    (:class:`AuditReport`; pass :mod:`eegprivacy.reporting.cohort`). ``cache_dir`` keeps the feature table and
    every finished cell, so a rerun computes only what is missing.
    One progress line: recordings read, then LOSO fits computed, each phase's ETA from its own measured pace
    (:class:`~eegprivacy.pipeline.progress.PhaseProgress`)."""
    from eegprivacy.pipeline.progress import PhaseProgress
    from eegprivacy.tracking import log_artifact, log_metrics, start_run
    from eegprivacy.tracking.runs import search_literal, share_view

    out = Path(out_dir) if out_dir is not None else default_out_dir(dataset.name, dataset.version())
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(dataset.name, dataset.version())
    line = PhaseProgress(enabled=progress)
    line.note("audit: checking labels and recordings")
    try:
        def on_recording():
            if line.unit != "recordings":
                line.phase("audit: reading recordings", len(dataset.recordings()), "recordings")
            line.advance()

        cohort = load_cohort(dataset, config, cache_dir=cache, progress=False, on_recording=on_recording)
        key = audit_key(cohort, config)
        with start_run(study="a", tags=run_tags(cohort, None), run_name=f"{STAGE}-{cohort.dataset}",
                       params={"audit": config.to_dict(), **cohort.base_config}, idempotency_key=key) as run:
            sweeps, frames, counts = run_sweeps(cohort, config, cache / "cells", progress=progress, n_jobs=n_jobs,
                                                bar=line if progress else None, key=key)
            line.note("audit: intervals and report")
            rows = summarise(cohort, config, sweeps, frames, cache / "cells")
            paths = {"rows": out / "rows.csv", "summary": out / "summary.json", "report": out / "report.html",
                     "utility_figure": out / "utility_vs_epsilon.png",
                     "attack_figure": out / "attacks_vs_epsilon.png"}
            summary = summary_document(cohort, config, rows, run.info.run_id)
            summary["counts"] = counts
            log_metrics({**summary_metrics(rows), **{f"sweep/{k}": float(v) for k, v in counts.items()},
                         **headline_metrics(summary)})
            figures = report.figures(rows, summary)
            with atomic_paths(*paths.values()) as (tmp_rows, tmp_summary, tmp_report, tmp_utility, tmp_attack):
                rows.to_csv(tmp_rows, index=False)
                tmp_summary.write_text(json.dumps(summary, indent=1, default=_json_default) + "\n")
                figures["utility"].savefig(tmp_utility, dpi=110)
                figures["attacks"].savefig(tmp_attack, dpi=110)
                report.write_html(tmp_report, rows, summary, {"utility": tmp_utility, "attacks": tmp_attack})
            report.close(figures)
            for name in ("rows", "summary", "report"):
                log_artifact(paths[name], STAGE)
            for name in ("utility_figure", "attack_figure"):
                log_artifact(paths[name], f"{STAGE}/figures")
        name = search_literal(cohort.dataset)  # None: a name with both kinds of quotes, which no filter can hold
        share_view("a", runs_view_key(cohort.dataset), f"tags.stage = '{STAGE}'"
                   + (f" and tags.dataset = {name}" if name else ""), headline_columns(config))
    except BaseException:
        line.close(leave=False)  # an error or Ctrl-C: clear the line, so the message that follows starts a line
        raise
    line.close()
    return AuditResult(cohort, rows, summary, counts, paths)


def runs_view_key(dataset: str) -> str:
    """The key of the cohort's runs view in MLflow (``viewStateShareKey`` in the address the command prints)."""
    return f"{STAGE}-{hashlib.sha256(dataset.encode()).hexdigest()[:16]}"


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return finite_or_none(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
