"""Stage ``federated_transfer`` (study B): leave-one-subject-out over the federation
(:mod:`eegprivacy.studies.federated.transfer`): per (model, ε) one MLflow parent, per seed a child holding every
held-out subject's fold; the per-subject rows go to ``metrics/federated_transfer.csv``, the subjects+seeds summary
to ``metrics/federated_transfer.json``, ``reports/federated_transfer.md`` and a figure."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.sweep import PrefetchedCells, SweepRunner, expand_grid
from eegprivacy.reporting.federated_transfer import headline, parent_metrics, report_md, transfer_figure
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.mia import NOTE, load_trials, mechanism
from eegprivacy.studies.federated.transfer import TRAINING_KNOBS, held_out_rows, summarise
from eegprivacy.tracking import required_tags
from eegprivacy.tracking.runs import log_to_named_run


def add_arguments(parser) -> None:
    parser.add_argument("--training-params", default="params/federated_mia.yaml",
                        help="federated_mia's params: the dataset's spec and every training knob of a fold")
    parser.add_argument("--out", default="metrics/federated_transfer.csv", help="per-subject tidy rows")
    parser.add_argument("--json", default="metrics/federated_transfer.json", help="the subjects+seeds summary")
    parser.add_argument("--report", default="reports/federated_transfer.md", help="markdown table")
    parser.add_argument("--figure", default="reports/figures/federated_transfer.png", help="per-subject figure")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing seeds ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it")


def run(args) -> int:
    config, stage = args.config, args.stage.name
    training = FederatedMIAConfig.load(args.training_params, "federated_mia").for_dataset(config.dataset,
                                                                                          args.training_params)
    spec = training.dataset_spec(config.dataset, args.training_params)
    dataset, trials = load_trials(config.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    knobs = {key: getattr(training, key) for key in TRAINING_KNOBS}
    base = {"dataset_version": version, "code_hash": args.stage.code_hash(), "paradigm": spec.paradigm_text(),
            **knobs}

    def tags_of(seed, **extra):
        return required_tags(study="b", stage=stage, dataset=config.dataset, dataset_version=version,
                             synthetic=synthetic, seed=seed, dvc_stage=stage, split="leave_one_subject_out",
                             **extra)

    plan = []
    for model in config.models:
        for eps in [float(e) for e in config.epsilons]:
            cells = expand_grid({"model": [model], "epsilon": [eps], "mechanism": [mechanism(eps)]},
                                seeds=range(config.seeds), base=base)
            tags = functools.partial(tags_of, model=model, epsilon=f"{eps:g}", mechanism=mechanism(eps))
            runner = SweepRunner(name=f"{stage}-{config.dataset}-{model}-eps{eps:g}", study="b",
                                 dataset=config.dataset,
                                 out_dir=Path(args.cells) / stage / config.dataset / f"{model}-eps{eps:g}",
                                 parent_tags=tags(None), tags_fn=lambda cell, t=tags: t(cell.seed),
                                 params={"federated_transfer": {**knobs, "model": model, "epsilon": eps,
                                                                "epsilon_scope": NOTE}, "synthetic": synthetic},
                                 progress=not args.no_progress)
            plan.append((model, eps, runner, cells))
    jobs = [(cell.config, cell.seed) for _, _, runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(functools.partial(held_out_rows, trials=trials, config=training), jobs,
                              n_jobs=args.jobs)
    frames = []
    for _, _, runner, cells in plan:
        frame = runner.run(cells, compute)
        frame["synthetic"] = synthetic
        frames.append(frame)
        print(f"{config.dataset}: {runner.name} done")
    tidy = pd.concat(frames, ignore_index=True)
    summary = summarise(tidy, config.bootstrap, config.confidence)
    meta = {"dataset": config.dataset, "dataset_version": version, "synthetic": synthetic,
            "n_subjects": int(tidy["subject_index"].nunique()), "seeds": config.seeds,
            "num_rounds": training.num_rounds, "local_epochs": training.local_epochs,
            "clients_per_round": training.clients_per_round, "epsilon_scope": NOTE}
    out, js, md, fig = (Path(p) for p in (args.out, args.json, args.report, args.figure))
    for path in (out, js, md, fig):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tidy.to_csv(tmp, index=False)
    transfer_figure(tidy, summary, meta, fig)
    write_text_atomic(md, report_md(summary, meta))
    payload = headline(summary, meta)
    write_text_atomic(js, json.dumps(payload, indent=2, sort_keys=True) + "\n")
    for model, eps, runner, _ in plan:
        log_to_named_run("b", runner.name, parent_metrics(summary, model, eps), [out, js, md, fig])
    print(f"{config.dataset}: {len(tidy)} rows -> {out}; {md}; {fig}")
    return 0
