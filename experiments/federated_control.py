"""Stage ``federated_control`` (study B): the controlled membership table
(:mod:`eegprivacy.studies.federated.control`). Per (model, preprocessing, ε) one MLflow parent with a child per
seed; each cell trains the federation and its leave-fold-out control federations and keeps every attack's
per-row scores (``<cells>/federated_control/<dataset>/arrays``). The subjects+seeds summary (attack, control,
untrained and attack − control with Holm per model) goes to ``metrics/federated_control.csv``, an MLflow summary
run (``federated_control-<dataset>-summary``, what ``reports/study-b.md`` opens with),
``reports/federated_control.md`` and a figure."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.profile import profile_name
from eegprivacy.pipeline.sweep import PrefetchedCells, SweepRunner, expand_grid
from eegprivacy.reporting.federated_control import draw, metrics_of, report_md
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.control import (
    TRAINING_KNOBS,
    cell_rows,
    certified_epsilons,
    preprocessing_options,
    summarise,
)
from eegprivacy.studies.federated.mia import NOTE, load_trials, mechanism
from eegprivacy.tracking import log_metrics, required_tags, start_run
from eegprivacy.tracking.runs import log_artifact


def add_arguments(parser) -> None:
    parser.add_argument("--training-params", default="params/federated_mia.yaml",
                        help="federated_mia's params: the dataset's spec and every training knob")
    parser.add_argument("--out", default="metrics/federated_control.csv", help="the subjects+seeds summary")
    parser.add_argument("--report", default="reports/federated_control.md", help="markdown table")
    parser.add_argument("--figure", default="reports/figures/federated_control.png", help="attack − control figure")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing cells ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it")


def cell_cost(config: dict, seed: int) -> float:
    """A cell's relative compute time (the order cells are handed to the workers, longest first): local steps,
    an EEGNet step ~35 times a SimpleNet one (measured on eegmmidb: ~60 s per 10 x 10 EEGNet cell, ~7 s per
    20 x 20 SimpleNet cell)."""
    return config["num_rounds"] * config["local_epochs"] * (35.0 if config["model"] == "eegnet" else 1.0)


def run(args) -> int:
    config, stage = args.config, args.stage.name
    training = FederatedMIAConfig.load(args.training_params, "federated_mia").for_dataset(config.dataset,
                                                                                          args.training_params)
    spec = training.dataset_spec(config.dataset, args.training_params)
    dataset, trials = load_trials(config.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    knobs = {key: getattr(training, key) for key in TRAINING_KNOBS}
    own = {key: getattr(config, key) for key in ("control_folds", "calibration_fraction", "dp_csp_epsilon",
                                                 "dp_csp_delta", "attack_folds")}
    own["attackers"] = ",".join(config.attackers)
    base = {"dataset_version": version, "code_hash": args.stage.code_hash(), "paradigm": spec.paradigm_text(),
            **knobs, **own}

    def tags_of(seed, **extra):
        return required_tags(study="b", stage=stage, dataset=config.dataset, dataset_version=version,
                             synthetic=synthetic, seed=seed, dvc_stage=stage, split="per_subject_60_20_20", **extra)

    plan = []
    for model in config.models:
        protocol = config.for_model(model)
        for prep in preprocessing_options(config, model):
            for eps in [float(e) for e in protocol["epsilons"]]:
                cells = expand_grid({"model": [model], "preprocessing": [prep], "epsilon": [eps],
                                     "mechanism": [mechanism(eps)], "num_rounds": [protocol["num_rounds"]],
                                     "local_epochs": [protocol["local_epochs"]]},
                                    seeds=range(protocol["seeds"]), base=base)
                tags = functools.partial(tags_of, model=model, epsilon=f"{eps:g}", mechanism=mechanism(eps),
                                         preprocessing=prep)
                name = f"{stage}-{config.dataset}-{model}-{prep}-eps{eps:g}"
                runner = SweepRunner(name=name, study="b", dataset=config.dataset,
                                     out_dir=Path(args.cells) / stage / config.dataset / name,
                                     parent_tags=tags(None), tags_fn=lambda cell, t=tags: t(cell.seed),
                                     params={"federated_control": {**knobs, **own, "seeds": protocol["seeds"],
                                                                   "num_rounds": protocol["num_rounds"],
                                                                   "local_epochs": protocol["local_epochs"],
                                                                   "model": model,
                                                                   "preprocessing": prep, "epsilon": eps,
                                                                   "epsilon_scope": NOTE},
                                             "synthetic": synthetic},
                                     progress=not args.no_progress)
                plan.append((model, prep, eps, runner, cells))
    arrays_dir = Path(args.cells) / stage / config.dataset / "arrays"
    for *_, runner, cells in plan:  # rows cached without their arrays: compute those cells again
        for cell in cells:
            if runner.cell_path(cell).exists() and not (arrays_dir / f"{cell.key}.npz").exists():
                runner.cell_path(cell).unlink()
    jobs = [(cell.config, cell.seed) for *_, runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(functools.partial(cell_rows, trials=trials, training=training, config=config,
                                                arrays_dir=arrays_dir), jobs, n_jobs=args.jobs, cost=cell_cost)
    done = []
    for model, prep, eps, runner, cells in plan:
        runner.run(cells, compute)
        for cell in cells:
            with np.load(arrays_dir / f"{cell.key}.npz") as data:
                done.append((cell.config, cell.seed, {k: data[k] for k in data.files}))
        print(f"{config.dataset}: {runner.name} done")
    summary = summarise(done, len(trials.subjects()), config.bootstrap, config.confidence)
    epsilons = certified_epsilons(config, training, [(m, p, e) for m, p, e, _, _ in plan], trials)
    summary = summary.merge(epsilons, on=["model", "preprocessing", "epsilon"], how="left")
    summary = summary.assign(dataset=config.dataset, dataset_version=version, synthetic=synthetic)
    protocols = {m: {**config.for_model(m), "epsilons": [f"{float(e):g}" for e in config.for_model(m)["epsilons"]]}
                 for m in config.models}
    meta = {"dataset": config.dataset, "dataset_version": version, "synthetic": synthetic, "profile": profile_name(),
            "n_subjects": len(trials.subjects()), "protocols": protocols,
            "control_folds": config.control_folds, "calibration_fraction": config.calibration_fraction,
            "dp_csp_epsilon": config.dp_csp_epsilon, "dp_csp_delta": config.dp_csp_delta,
            "test_size": training.test_size, "clients_per_round": training.clients_per_round,
            "bootstrap": config.bootstrap, "attackers": list(config.attackers)}
    out, md, fig_path = Path(args.out), Path(args.report), Path(args.figure)
    for path in (out, md, fig_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        summary.to_csv(tmp, index=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5))
    draw(summary, fig)
    with atomic_path(fig_path) as tmp:
        fig.savefig(tmp, dpi=120)
    write_text_atomic(md, report_md(summary, meta))
    tags = tags_of(None, model=",".join(config.models), epsilon=",".join(f"{float(e):g}" for e in config.epsilons),
                   mechanism="laplace_gradient", preprocessing=",".join(config.preprocessing))
    with start_run(study="b", tags=tags, run_name=f"{stage}-{config.dataset}-summary",
                   params={"federated_control": {**knobs, **own, "bootstrap": config.bootstrap,
                                                 "per_model": json.dumps(protocols), "profile": meta["profile"]},
                           "synthetic": synthetic}):
        log_metrics(metrics_of(summary))
        for path in (out, md, fig_path):
            log_artifact(path, "report")
    significant = summary[summary["arm"].eq("attack_minus_control")]
    print(f"{config.dataset}: {len(summary)} summary rows -> {out}; {int(significant['significant'].sum())} of "
          f"{len(significant)} attack − control cells significant (Holm per model); {md}; {fig_path}")
    return 0
