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
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.profile import profile_name
from eegprivacy.pipeline.stage_script import (add_jobs_flag, add_output_flags, add_params_flags, cell_base,
                                              dataset_section, drop_cells_without_arrays, log_run, output_paths,
                                              stage_tags, sweep_runner, workers_help, write_csv)
from eegprivacy.pipeline.sweep import expand_grid, iter_prefetched
from eegprivacy.reporting.federated_control import draw, metrics_of, report_md
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.control import TRAINING_KNOBS, cell_rows, certified_epsilons, preprocessing_options
from eegprivacy.studies.federated.control import summarise
from eegprivacy.studies.federated.mia import NOTE, mechanism, versioned_trials


def add_arguments(parser) -> None:
    add_params_flags(parser, training="federated_mia's params: the dataset's spec and every training knob")
    add_output_flags(parser, "federated_control", out="the subjects+seeds summary", report="markdown table",
                     figure="attack − control figure")
    add_jobs_flag(parser, workers_help())


def cell_cost(config: dict, seed: int) -> float:
    """A cell's relative compute time (the order cells are handed to the workers, longest first): local steps,
    an EEGNet step ~35 times a SimpleNet one (measured on eegmmidb: ~60 s per 10 x 10 EEGNet cell, ~7 s per
    20 x 20 SimpleNet cell)."""
    return config["num_rounds"] * config["local_epochs"] * (35.0 if config["model"] == "eegnet" else 1.0)


def run(args) -> int:
    config, stage = args.config, args.stage.name
    training, spec = dataset_section(FederatedMIAConfig, args.training_params, config.dataset)
    trials, version, synthetic = versioned_trials(config.dataset, spec)
    knobs = {key: getattr(training, key) for key in TRAINING_KNOBS}
    own = {key: getattr(config, key) for key in ("control_folds", "calibration_fraction", "dp_csp_epsilon",
                                                 "dp_csp_delta", "attack_folds")}
    own["attackers"] = ",".join(config.attackers)
    base = cell_base(args, version, paradigm=spec.paradigm_text(), **knobs, **own)
    tags_of = stage_tags(study="b", stage=stage, dataset=config.dataset, dataset_version=version, synthetic=synthetic,
                         dvc_stage=stage, split="per_subject_60_20_20")

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
                runner = sweep_runner(args, name, Path(stage, config.dataset, name), study="b", dataset=config.dataset,
                                      tags=tags,
                                      params={"federated_control": {**knobs, **own, "seeds": protocol["seeds"],
                                                                    "num_rounds": protocol["num_rounds"],
                                                                    "local_epochs": protocol["local_epochs"],
                                                                    "model": model,
                                                                    "preprocessing": prep, "epsilon": eps,
                                                                    "epsilon_scope": NOTE},
                                              "synthetic": synthetic})
                plan.append((model, prep, eps, runner, cells))
    arrays_dir = Path(args.cells) / stage / config.dataset / "arrays"
    sweeps = [(runner, cells) for *_, runner, cells in plan]
    drop_cells_without_arrays(sweeps, arrays_dir)
    compute = functools.partial(cell_rows, trials=trials, training=training, config=config, arrays_dir=arrays_dir)
    done = []
    for runner, cells, _ in iter_prefetched(sweeps, compute, n_jobs=args.jobs, cost=cell_cost):
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
    out, md, fig_path = output_paths(args.out, args.report, args.figure)
    write_csv(summary, out)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5))
    draw(summary, fig)
    with atomic_path(fig_path) as tmp:
        fig.savefig(tmp, dpi=120)
    write_text_atomic(md, report_md(summary, meta))
    tags = tags_of(None, model=",".join(config.models), epsilon=",".join(f"{float(e):g}" for e in config.epsilons),
                   mechanism="laplace_gradient", preprocessing=",".join(config.preprocessing))
    log_run("b", tags, f"{stage}-{config.dataset}-summary",
            params={"federated_control": {**knobs, **own, "bootstrap": config.bootstrap,
                                          "per_model": json.dumps(protocols), "profile": meta["profile"]},
                    "synthetic": synthetic},
            metrics=metrics_of(summary), artifacts=(out, md, fig_path), folder="report")
    significant = summary[summary["arm"].eq("attack_minus_control")]
    print(f"{config.dataset}: {len(summary)} summary rows -> {out}; {int(significant['significant'].sum())} of "
          f"{len(significant)} attack − control cells significant (Holm per model); {md}; {fig_path}")
    return 0
