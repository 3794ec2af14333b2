"""Stage ``federated_mia`` (study B): one dataset's sweep over (model, ε, seed) cells of
:func:`eegprivacy.studies.federated.mia.cell_rows`, resumable per cell, one MLflow parent per (model, ε) with a
child per seed; the tidy rows go to ``metrics/federated_mia_<dataset>.csv`` and every cell's raw per-round
arrays (client update vectors, per-trial gradient norms) to ``data/federated_mia/<dataset>/``."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.pipeline.stage_script import (PURE_CELLS, add_jobs_flag, cell_base, drop_cells_without_arrays,
                                              stage_tags, sweep_runner, workers_help, write_csv)
from eegprivacy.pipeline.sweep import expand_grid, iter_prefetched
from eegprivacy.studies.federated.mia import NOTE, cell_knobs, cell_rows, mechanism, versioned_trials


def add_arguments(parser) -> None:
    parser.add_argument("--arrays", help="folder for every cell's raw per-round arrays: client update vectors and "
                                         "per-trial gradient norms (default data/federated_mia/<dataset>)")
    add_jobs_flag(parser, workers_help(detail=PURE_CELLS))


def sweep_plan(args, config, base: dict, knobs: dict, synthetic: bool, tags_of) -> list[tuple]:
    """(model, ε, runner, cells) in the order they run: one runner (MLflow parent) per (model, ε); ``config`` is
    the grid as this dataset runs it (its per-dataset overrides applied)."""
    stage = args.stage.name
    plan = []
    for model in config.models:
        for eps in [float(e) for e in config.epsilons]:
            cells = expand_grid({"model": [model], "epsilon": [eps], "mechanism": [mechanism(eps)]},
                                seeds=range(config.seeds), base=base)
            tags = functools.partial(tags_of, model=model, epsilon=epsilon_key(eps), mechanism=mechanism(eps))
            runner = sweep_runner(args, f"{stage}-{args.dataset}-{model}-eps{eps:g}",
                                  Path(stage, args.dataset, f"{model}-eps{eps:g}"), study="b", dataset=args.dataset,
                                  tags=tags, params={"federated_mia": {**knobs, "model": model, "epsilon": eps,
                                                                       "epsilon_scope": NOTE}, "synthetic": synthetic})
            plan.append((model, eps, runner, cells))
    return plan


def export_arrays(plan: list[tuple], arrays_dir: Path, export: Path) -> None:
    """Every cell's arrays under a readable name, ``<model>-eps<ε>-seed<seed>.npz``."""
    export.mkdir(parents=True, exist_ok=True)
    for model, eps, _, cells in plan:
        for cell in cells:
            with atomic_path(export / f"{model}-eps{eps:g}-seed{cell.seed}.npz") as tmp:
                shutil.copyfile(arrays_dir / f"{cell.key}.npz", tmp)


def run(args) -> int:
    config, stage = args.config.for_dataset(args.dataset, args.params), args.stage.name
    spec = config.dataset_spec(args.dataset, args.params)
    trials, version, synthetic = versioned_trials(args.dataset, spec)
    knobs = cell_knobs(config)
    base = cell_base(args, version, attackers=",".join(config.attackers), paradigm=spec.paradigm_text(), **knobs)
    tags_of = stage_tags(study="b", stage=stage, dataset=args.dataset, dataset_version=version, synthetic=synthetic,
                         dvc_stage=f"{stage}@{args.dataset}", split="per_subject_80_20")
    plan = sweep_plan(args, config, base, knobs, synthetic, tags_of)
    arrays_dir = Path(args.cells) / stage / args.dataset / "arrays"
    sweeps = [(runner, cells) for _, _, runner, cells in plan]
    drop_cells_without_arrays(sweeps, arrays_dir)
    compute = functools.partial(cell_rows, trials=trials, config=config, arrays_dir=arrays_dir)
    label = "SYNTHETIC " if synthetic else ""
    frames = []
    for (model, eps, _, _), (_, _, frame) in zip(plan, iter_prefetched(sweeps, compute, n_jobs=args.jobs)):
        frame["synthetic"] = synthetic
        frames.append(frame)
        print(f"{label}{args.dataset}: {model} eps={eps:g} done")
    tidy = pd.concat(frames, ignore_index=True)
    export = Path(args.arrays or f"data/federated_mia/{args.dataset}")
    export_arrays(plan, arrays_dir, export)
    out = write_csv(tidy, args.out or f"metrics/federated_mia/federated_mia_{args.dataset}.csv")
    print(f"{label}{args.dataset}: {len(tidy)} rows -> {out}; per-round update vectors and gradient norms -> "
          f"{export}/ ({NOTE})")
    return 0
