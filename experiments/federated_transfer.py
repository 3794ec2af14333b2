"""Stage ``federated_transfer`` (study B): leave-one-subject-out over the federation
(:mod:`eegprivacy.studies.federated.transfer`): per (model, ε) one MLflow parent, per seed a child holding every
held-out subject's fold; the per-subject rows go to ``metrics/federated_transfer.csv``, the subjects+seeds summary
to ``metrics/federated_transfer.json``, ``reports/federated_transfer.md`` and a figure."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import write_text_atomic
from eegprivacy.pipeline.stage_script import (add_jobs_flag, add_output_flags, add_params_flags, cell_base,
                                              dataset_section, output_paths, stage_tags, sweep_runner, workers_help,
                                              write_csv, write_json_file)
from eegprivacy.pipeline.sweep import expand_grid, iter_prefetched
from eegprivacy.reporting.federated_transfer import headline, parent_metrics, report_md, transfer_figure
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.mia import NOTE, mechanism, versioned_trials
from eegprivacy.studies.federated.transfer import TRAINING_KNOBS, held_out_rows, summarise
from eegprivacy.tracking.runs import log_to_named_run


def add_arguments(parser) -> None:
    add_params_flags(parser, training="federated_mia's params: the dataset's spec and every training knob of a fold")
    add_output_flags(parser, "federated_transfer", out="per-subject tidy rows", json="the subjects+seeds summary",
                     report="markdown table", figure="per-subject figure")
    add_jobs_flag(parser, workers_help("seeds"))


def run(args) -> int:
    config, stage = args.config, args.stage.name
    training, spec = dataset_section(FederatedMIAConfig, args.training_params, config.dataset)
    trials, version, synthetic = versioned_trials(config.dataset, spec)
    knobs = {key: getattr(training, key) for key in TRAINING_KNOBS}
    base = cell_base(args, version, paradigm=spec.paradigm_text(), **knobs)
    tags_of = stage_tags(study="b", stage=stage, dataset=config.dataset, dataset_version=version, synthetic=synthetic,
                         dvc_stage=stage, split="leave_one_subject_out")

    plan = []
    for model in config.models:
        for eps in [float(e) for e in config.epsilons]:
            cells = expand_grid({"model": [model], "epsilon": [eps], "mechanism": [mechanism(eps)]},
                                seeds=range(config.seeds), base=base)
            runner = sweep_runner(args, f"{stage}-{config.dataset}-{model}-eps{eps:g}",
                                  Path(stage, config.dataset, f"{model}-eps{eps:g}"), study="b",
                                  dataset=config.dataset,
                                  tags=functools.partial(tags_of, model=model, epsilon=f"{eps:g}",
                                                         mechanism=mechanism(eps)),
                                  params={"federated_transfer": {**knobs, "model": model, "epsilon": eps,
                                                                 "epsilon_scope": NOTE}, "synthetic": synthetic})
            plan.append((model, eps, runner, cells))
    frames = []
    for runner, _, frame in iter_prefetched([(runner, cells) for _, _, runner, cells in plan],
                                         functools.partial(held_out_rows, trials=trials, config=training),
                                         n_jobs=args.jobs):
        frame["synthetic"] = synthetic
        frames.append(frame)
        print(f"{config.dataset}: {runner.name} done")
    tidy = pd.concat(frames, ignore_index=True)
    summary = summarise(tidy, config.bootstrap, config.confidence)
    meta = {"dataset": config.dataset, "dataset_version": version, "synthetic": synthetic,
            "n_subjects": int(tidy["subject_index"].nunique()), "seeds": config.seeds,
            "num_rounds": training.num_rounds, "local_epochs": training.local_epochs,
            "clients_per_round": training.clients_per_round, "epsilon_scope": NOTE}
    out, js, md, fig = output_paths(args.out, args.json, args.report, args.figure)
    write_csv(tidy, out)
    transfer_figure(tidy, summary, meta, fig)
    write_text_atomic(md, report_md(summary, meta))
    write_json_file(js, headline(summary, meta), sort_keys=True)
    for model, eps, runner, _ in plan:
        log_to_named_run("b", runner.name, parent_metrics(summary, model, eps), [out, js, md, fig])
    print(f"{config.dataset}: {len(tidy)} rows -> {out}; {md}; {fig}")
    return 0
