"""Stage ``embedding_audit@<cohort>`` (study C): is releasing frozen-encoder embeddings of one cohort's EEG safe?

Runs :func:`eegprivacy.studies.embedding_audit.study.run_audit` on the ``embedding_audit`` params for the cohort
``--dataset`` names and writes its tidy rows (CSV), the headline per encoder (JSON), the markdown report and the
figures, then logs the bootstrap CIs on each parent run. The protocol: ``shared/spec/study-c-protocol.md``. Cells
are cached in ``data/sweeps/embedding_audit/<cohort>`` (resumable); embeddings, pretraining records and
checkpoints in ``data/embedding_audit/<cohort>``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.reporting.embedding_audit import figures, headline, report_md, write_headline
from eegprivacy.studies.embedding_audit.claims import claims_for_run
from eegprivacy.studies.embedding_audit.study import parent_run_name, run_audit
from eegprivacy.studies.embedding_audit.summaries import bootstrap_ci_metrics, ci_over_tags
from eegprivacy.tracking.runs import log_to_named_run


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, help="tidy rows, one per metric (default: "
                                                    "metrics/embedding_audit_<dataset>.csv)")
    parser.add_argument("--json", default=None, help="headline per encoder (default: "
                                                     "metrics/embedding_audit_<dataset>.json)")
    parser.add_argument("--claims", default=None, help="one row per claim and cell: its test, p, Holm family and "
                                                       "verdict (default: <out stem>_claims.csv beside --out, where "
                                                       "embedding-audit-cohorts reads it)")
    parser.add_argument("--report", default=None, help="markdown tables (default: "
                                                       "reports/embedding_audit_<dataset>.md)")
    parser.add_argument("--figures", default="reports/figures",
                        help="folder for embedding_audit_<dataset>_*.png (default: %(default)s)")
    parser.add_argument("--work", default="data/embedding_audit",
                        help="checkpoints, pretraining records and cached embeddings, under <work>/<dataset> "
                             "(default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing cells ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it: each cell is a pure function of its config and seed, computed on one "
                             "BLAS/torch thread")


def run(args) -> int:
    start = time.perf_counter()
    config, name = args.config, args.dataset
    audit = run_audit(config, name, work=Path(args.work), cells_dir=Path(args.cells), jobs=args.jobs,
                      progress=not args.no_progress)
    out = Path(args.out or f"metrics/embedding_audit_{name}.csv")
    js = Path(args.json or f"metrics/embedding_audit_{name}.json")
    md = Path(args.report or f"reports/embedding_audit_{name}.md")
    claims_csv = Path(args.claims) if args.claims else out.with_name(f"{out.stem}_claims.csv")
    for path in (out, js, md, claims_csv):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        audit.tidy.to_csv(tmp, index=False)
    with atomic_path(claims_csv) as tmp:
        audit.claims.to_csv(tmp, index=False)
    paths = figures(audit.summary, audit.cells, Path(args.figures), audit.title, prefix=f"embedding_audit_{name}",
                    meta=audit.meta)
    write_text_atomic(md, report_md(audit.summary, audit.cells, audit.meta, audit.encoders_meta,
                                    prefix=f"embedding_audit_{name}", claims=audit.claims))
    meta = {**audit.meta, "wall_time_s": round(time.perf_counter() - start, 1)}
    write_headline(js, headline(audit.summary, audit.cells, meta))
    for e, w in audit.cells:
        claim_metrics, claim_tags = claims_for_run(audit.claims, e, w)
        log_to_named_run("c", parent_run_name(name, e, w), {**bootstrap_ci_metrics(audit.summary, e, w),
                                                              **claim_metrics},
                         [out, js, md, claims_csv, *paths],
                         tags={**ci_over_tags(audit.summary, e, w), **claim_tags,
                               "identity_link": audit.meta["cohort"]["identity_link"]})
    print(f"{audit.title}: {len(audit.tidy)} rows -> {out}; {md}; {len(paths)} figures ({meta['wall_time_s']} s)")
    return 0
