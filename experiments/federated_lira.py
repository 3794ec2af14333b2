"""Stage ``federated_lira`` (study B): LiRA with shadow federations and RLA with LR/RF/MLP attackers against the
federated model, LiRA against its preprocessing-only control (fold federations that never saw the attacked client,
scored through its own CSP) as a paired, Holm-corrected difference (:mod:`eegprivacy.studies.federated.lira`),
written as tidy rows, a markdown report, a headline JSON and a log-log ROC figure (:mod:`eegprivacy.reporting.lira`);
the pooled numbers, the differences, their p-values and Holm p-values go to each ε's MLflow parent run."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import write_text_atomic
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.pipeline.stage_script import (add_output_flags, add_params_flags, dataset_section, output_paths,
                                              write_csv, write_json_file)
from eegprivacy.reporting.lira import cumulative_label, headline, report_md, roc_figure
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.cumulative import Cumulative
from eegprivacy.studies.federated.lira.config import DIFF_METRIC
from eegprivacy.studies.federated.lira.pooled import summarise
from eegprivacy.studies.federated.lira.study import LiRAStudy
from eegprivacy.tracking.runs import log_to_named_run


def add_arguments(parser) -> None:
    add_params_flags(parser, training="the target's training knobs and dataset specs (shadows must match them)")
    add_output_flags(parser, "federated_lira", out="tidy rows", json="headline summary", report="markdown tables",
                     figure=("reports/figures/federated_lira_roc.png", "log-log ROC"))
    parser.add_argument("--cells", default="data/sweeps", help="resumable cache (shadows and target cells)")
    parser.add_argument("--accounting", default="metrics/federated_accounting.csv",
                        help="federated-accounting's rows: cumulative ε beside every per-step ε")


def run(args) -> int:
    start = time.perf_counter()
    config = args.config
    training, spec = dataset_section(FederatedMIAConfig, args.training_params, args.dataset)
    study = LiRAStudy(config, training, args.dataset, spec, Path(args.cells), args.stage.code_hash(),
                      progress=not args.no_progress)
    label = "SYNTHETIC " if study.synthetic else ""
    t0 = time.perf_counter()
    study.train_shadows()
    print(f"{label}{args.dataset}: {config.n_shadows} shadow federations x {len(study.epsilons)} eps in "
          f"{time.perf_counter() - t0:.0f} s")
    plans = study.plans()
    frames = study.run_targets(plans)
    pooled = []
    for plan in plans:
        pooled.append(study.pooled(plan))
        print(f"{label}{args.dataset}: eps={epsilon_key(plan.epsilon)} done")
    tidy = study.tidy(frames, pooled)
    summary, meta = summarise(tidy), study.meta()
    for r in summary[summary["metric"] == DIFF_METRIC].to_dict("records"):  # LiRA − preprocessing-only control
        print(f"{label}{args.dataset}: eps={epsilon_key(r['epsilon'])} {r['attack']} - control: AUROC "
              f"{r['attack_auroc']:.3f} - {r['control_auroc']:.3f} = {r['value']:+.3f} "
              f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], p_holm {r['p_holm']:.3g}")
    write_outputs(args, tidy, summary, meta, study, start)
    print(f"{label}{args.dataset}: {len(tidy)} rows -> {args.out}; {args.report}; {args.figure} "
          f"({meta['wall_time_s']} s)")
    return 0


def write_outputs(args, tidy: pd.DataFrame, summary: pd.DataFrame, meta: dict, study: LiRAStudy,
                  start: float) -> None:
    """The tidy CSV, the ROC figure, the markdown report and the headline JSON; the pooled numbers and the files
    go to each ε's MLflow parent run."""
    out, js, md, fig = output_paths(args.out, args.json, args.report, args.figure)
    write_csv(tidy, out)
    cum = Cumulative(args.accounting)
    label = "SYNTHETIC " if meta["synthetic"] else ""
    roc_figure(study.curves, fig, f"{label}{args.dataset}, {meta['model']}: membership ROC (log-log), ε per local "
               "step", eps_label=cumulative_label(cum, args.dataset, meta["model"]))
    write_text_atomic(md, report_md(summary, meta, cum))
    meta["wall_time_s"] = round(time.perf_counter() - start, 1)
    write_json_file(js, headline(summary, meta), sort_keys=True)
    for name, metrics in study.parent_metrics.items():
        log_to_named_run("b", name, metrics, [out, js, md, fig])
