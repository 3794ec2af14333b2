"""Stage ``federated_mia`` (study B): one dataset's sweep over (model, ε, seed) cells of
:func:`eegprivacy.studies.federated.mia.cell_rows`, resumable per cell, one MLflow parent per (model, ε) with a
child per seed; the tidy rows go to ``metrics/federated_mia_<dataset>.csv`` and every cell's raw per-round
arrays (client update vectors, per-trial gradient norms) to ``data/federated_mia/<dataset>/``."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.pipeline.sweep import PrefetchedCells, SweepRunner, expand_grid
from eegprivacy.studies.federated.mia import (
    NOTE,
    cell_knobs,
    cell_rows,
    load_trials,
    mechanism,
)
from eegprivacy.tracking import required_tags


def add_arguments(parser) -> None:
    parser.add_argument("--arrays", help="folder for every cell's raw per-round arrays: client update vectors and "
                                         "per-trial gradient norms (default data/federated_mia/<dataset>)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing cells ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it: each cell is a pure function of its config and seed")


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
            runner = SweepRunner(name=f"{stage}-{args.dataset}-{model}-eps{eps:g}", study="b",
                                 dataset=args.dataset,
                                 out_dir=Path(args.cells) / stage / args.dataset / f"{model}-eps{eps:g}",
                                 parent_tags=tags(None), tags_fn=lambda cell, t=tags: t(cell.seed),
                                 params={"federated_mia": {**knobs, "model": model, "epsilon": eps,
                                                           "epsilon_scope": NOTE}, "synthetic": synthetic},
                                 progress=not args.no_progress)
            plan.append((model, eps, runner, cells))
    return plan


def drop_cells_without_arrays(plan: list[tuple], arrays_dir: Path) -> None:
    """Rows cached without their arrays (an older cache): compute those cells again."""
    for _, _, runner, cells in plan:
        for cell in cells:
            if runner.cell_path(cell).exists() and not (arrays_dir / f"{cell.key}.npz").exists():
                runner.cell_path(cell).unlink()


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
    dataset, trials = load_trials(args.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    knobs = cell_knobs(config)
    base = {"dataset_version": version, "code_hash": args.stage.code_hash(), "attackers": ",".join(config.attackers),
            "paradigm": spec.paradigm_text(), **knobs}

    def tags_of(seed, **extra):
        return required_tags(study="b", stage=stage, dataset=args.dataset, dataset_version=version,
                             synthetic=synthetic, seed=seed, dvc_stage=f"{stage}@{args.dataset}",
                             split="per_subject_80_20", **extra)

    plan = sweep_plan(args, config, base, knobs, synthetic, tags_of)
    arrays_dir = Path(args.cells) / stage / args.dataset / "arrays"
    drop_cells_without_arrays(plan, arrays_dir)
    jobs = [(cell.config, cell.seed) for _, _, runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(functools.partial(cell_rows, trials=trials, config=config, arrays_dir=arrays_dir),
                              jobs, n_jobs=args.jobs)
    label = "SYNTHETIC " if synthetic else ""
    frames = []
    for model, eps, runner, cells in plan:
        frame = runner.run(cells, compute)
        frame["synthetic"] = synthetic
        frames.append(frame)
        print(f"{label}{args.dataset}: {model} eps={eps:g} done")
    tidy = pd.concat(frames, ignore_index=True)
    export = Path(args.arrays or f"data/federated_mia/{args.dataset}")
    export_arrays(plan, arrays_dir, export)
    out = Path(args.out or f"metrics/federated_mia/federated_mia_{args.dataset}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tidy.to_csv(tmp, index=False)
    print(f"{label}{args.dataset}: {len(tidy)} rows -> {out}; per-round update vectors and gradient norms -> "
          f"{export}/ ({NOTE})")
    return 0
