"""Stage ``dp_audit`` (study A): empirical lower bounds on ε for every mechanism × ε × d, over seeds, from a
worst-case neighbour pair; no data enters (:mod:`eegprivacy.studies.release.mechanism_audit`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from eegprivacy.pipeline.sweep import SweepRunner, run_prefetched
from eegprivacy.reporting.mechanism_audit import audit_figure, write_headline
from eegprivacy.studies.release import mechanism_audit as audit
from eegprivacy.tracking import log_artifact, log_metrics, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--summary", default="metrics/dp_audit.json", help="headline bounds per mechanism × ε × d")
    parser.add_argument("--figure", default="reports/figures/dp_audit.png")


def sweep_runner(mechanism: str, params: dict, args) -> SweepRunner:
    """One mechanism's sweep: a parent run tagged with it, a child per cell with its ε and δ."""
    def child_tags(cell):
        return audit.run_tags(cell.seed, mechanism=cell.config["mechanism"], epsilon=cell.config["epsilon"],
                              delta=cell.config["delta"])

    return SweepRunner(name=f"{audit.STAGE}-{mechanism}", study="a", dataset=audit.DATASET,
                       out_dir=Path(args.cells) / audit.STAGE / mechanism,
                       parent_tags=audit.run_tags(None, mechanism=mechanism), tags_fn=child_tags, params=params,
                       progress=not args.no_progress)


def run(args) -> int:
    config, code_hash = args.config, args.stage.code_hash()
    params = {"dp_audit": config.to_dict()}
    plan = [(sweep_runner(mechanism, params, args), audit.cells_for(config, mechanism, code_hash))
            for mechanism in config.mechanisms]
    # Whole cells in n_jobs processes, the larger d first: the audit's own threads only overlap the noise draws,
    # not the sorting.
    tidy = pd.concat(run_prefetched(plan, audit.audit_cell, n_jobs=config.n_jobs, cost=audit.audit_cost),
                     ignore_index=True)
    summary = audit.headline(tidy, config)
    out = Path(args.out or args.stage.outs[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(out, index=False)
    write_headline(summary, args.summary)
    fig = audit_figure(audit.bound_stats(tidy), summary)
    Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    plt.close(fig)

    with start_run(study="a", tags=audit.run_tags(None), run_name=f"{audit.STAGE}-summary", params=params):
        log_metrics(audit.headline_metrics(summary))
        log_artifact(args.summary, "metrics")
        log_artifact(args.figure, "figures")

    print(f"dp-audit: {len(summary['claims_refuted'])} (mechanism, d, ε) claims refuted by every seed "
          f"(ceiling {summary['max_certifiable_epsilon']:.2f}): " + "; ".join(summary["claims_refuted"]))
    return 0
