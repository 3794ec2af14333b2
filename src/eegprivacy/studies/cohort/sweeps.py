"""The audit's sweeps: the plan (study A's utility sweeps, then the attack sweeps), each run by an audit
:class:`~eegprivacy.pipeline.sweep.SweepRunner` with its own names and tags, the cache and idempotency keys
(:func:`code_hash`, :func:`audit_key`), and running every pending cell (:func:`run_sweeps`).

Every cell is a resumable cache file and a nested MLflow child run under one run per sweep; per-patient LOSO
predictions (for the patient-level bootstrap) are kept in the cell cache beside the rows and are never logged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.pipeline.sweep import (
    Cell,
    PrefetchedCells,
    SweepRunner,
    expand_grid,
)
from eegprivacy.privacy import NO_NOISE, make_mechanism
from eegprivacy.studies.cohort.cells import audit_cell
from eegprivacy.studies.cohort.config import STAGE, AuditConfig, study_a_configs
from eegprivacy.studies.cohort.loading import Cohort
from eegprivacy.studies.release import utility as study_a
from eegprivacy.studies.release.table import PatientTable
from eegprivacy.tracking import required_tags

# dp_utility's sweep names (its runners' name suffixes) -> the audit's (kept as they were: utility-baseline, ...).
_SWEEP_NAMES = {"none": "baseline", "permuted_labels": "permuted"}


# The package's sources an audit's numbers depend on (relative to the package folder): the cell cache's code key.
# The audit's own code is studies/cohort_audit.py and every file of the studies/cohort package.
CODE = ("studies/cohort_audit.py", "studies/cohort", "studies/release", "signal", "privacy", "evaluation", "attacks",
        "data", "batched", "defaults")


@functools.cache
def code_hash() -> str:
    """The cell cache's code key: sha256 (16 hex) over the sources in :data:`CODE` by package-relative path and
    content, so a cached cell is never reused after a change to them, in a checkout or an installed wheel alike.
    Each entry in :data:`CODE` order, a folder's files sorted by path (``.py``, ``.yaml``, ``.tsv``; no caches)."""
    import eegprivacy

    package = Path(eegprivacy.__file__).resolve().parent
    digest = hashlib.sha256()
    for entry in CODE:
        path = package / entry
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and file.suffix in (".py", ".yaml", ".tsv") and "__pycache__" not in file.parts:
                digest.update(file.relative_to(package).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def run_tags(cohort: Cohort, seed: int | None, **extra) -> dict:
    """The MLflow tags of an audit run (``stage = audit_cohort``, the dataset, its version, the seed), plus the
    ``extra`` tags that are not None."""
    return required_tags(study="a", stage=STAGE, dataset=cohort.dataset, dataset_version=cohort.dataset_version,
                         synthetic=cohort.synthetic, seed=seed, dvc_stage=f"{STAGE}@{cohort.dataset}",
                         **{k: v for k, v in extra.items() if v is not None})


@dataclass
class Sweep:
    """One sweep of the audit: its name (``utility-<arm>``, ``<attack>-<mechanism>``), its runner, its cells and its
    kind (``utility``, ``reidentification`` or ``membership``)."""

    name: str
    runner: SweepRunner
    cells: list[Cell]
    kind: str


def patient_table(cohort: Cohort) -> PatientTable:
    """The cohort as study A's patient table (canonical patient order; LOSO groups are positions)."""
    X = pd.DataFrame(cohort.X, columns=cohort.feature_names)
    return PatientTable(cohort.dataset, cohort.dataset_version, cohort.features_hash, cohort.synthetic, X,
                        np.asarray(cohort.y, dtype=int), np.arange(len(cohort.y)))


class _AuditRunner(SweepRunner):
    """A sweep runner that also reports each computed cell to ``on_cell(config, seed)`` (the audit's one overall
    progress line), in place of a bar per sweep."""

    on_cell = None

    def run(self, cells, cell_fn):
        if self.on_cell is None:
            return super().run(cells, cell_fn)

        def counted(config, seed):
            rows = cell_fn(config, seed)
            self.on_cell(config, seed)
            return rows

        return super().run(cells, counted)


def audit_key(cohort: Cohort, config: AuditConfig) -> str:
    """The audit's idempotency key: a hash of everything its results depend on (the stage, the dataset and its
    version, the feature settings, every knob, the code), so a rerun of the same inputs and parameters reopens the
    same MLflow runs instead of adding new ones (:func:`eegprivacy.tracking.runs.start_run`)."""
    text = json.dumps({"stage": STAGE, "dataset": cohort.dataset, "dataset_version": cohort.dataset_version,
                       "features_hash": cohort.features_hash, "config": config.to_dict(), "code": code_hash()},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runner(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, name: str, progress: bool,
            parent_tags: dict, tags_fn, key: str | None = None) -> SweepRunner:
    """The audit runner of sweep ``name``; with the audit's ``key``, the sweep's own (the two hashed)."""
    sweep_key = None if key is None else hashlib.sha256(f"{key}/{name}".encode()).hexdigest()[:16]
    return _AuditRunner(name=f"{STAGE}-{cohort.dataset}-{name}", study="a", dataset=cohort.dataset,
                        out_dir=Path(cells_dir) / name, parent_tags=parent_tags, tags_fn=tags_fn,
                        params={"audit": config.to_dict(), **cohort.base_config}, progress=progress,
                        idempotency_key=sweep_key)


def utility_plan(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, progress: bool = True,
                 key: str | None = None) -> list[Sweep]:
    """Study A's utility plan (:func:`eegprivacy.studies.release.utility.utility_plan`) for the cohort: the same
    arms and cells (configs, seeds, cache keys) as ``dp_utility`` on this table, each sweep run by an audit runner
    (named ``audit_cohort-<dataset>-utility-<sweep>``, its cells under ``cells_dir``, tagged ``stage =
    audit_cohort`` on top of dp_utility's own tags: mechanism, model, attack, ε, δ); with the audit's ``key``
    (:func:`audit_key`) each sweep's runs are reused by a rerun."""
    release_config, utility_config = study_a_configs(config, cohort.dataset)
    prefix = f"dp_utility-{cohort.dataset}-"
    sweeps = []
    for runner, cells in study_a.utility_plan(patient_table(cohort), release_config, utility_config, "label",
                                              cells_dir=cells_dir, progress=progress):
        suffix = runner.name.removeprefix(prefix)
        name = f"utility-{_SWEEP_NAMES.get(suffix, suffix)}"

        def tags_fn(cell, _own=runner.tags_fn):
            return {**_own(cell), **run_tags(cohort, cell.seed)}

        sweeps.append(Sweep(name, _runner(cohort, config, cells_dir, name, progress,
                                          {**runner.parent_tags, **run_tags(cohort, None)}, tags_fn, key),
                            cells, "utility"))
    return sweeps


def plan(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, progress: bool = True,
         key: str | None = None) -> list[Sweep]:
    """Every sweep of the audit: study A's utility sweeps (:func:`utility_plan`), then the attacks; with the
    audit's ``key`` (:func:`audit_key`) a rerun reuses each sweep's runs."""
    sweeps = utility_plan(cohort, config, cells_dir, progress, key)
    base = {**cohort.base_config, "clip_norm": float(config.clip_norm), "code_hash": code_hash()}

    def add(name, kind, cells, mechanism, **tags):
        def child_tags(cell):
            eps = float(cell.config.get("epsilon", math.inf))
            own = {"epsilon": eps} if math.isfinite(eps) else {}
            if "delta" in cell.config and cell.config["mechanism"] != NO_NOISE:
                own["delta"] = cell.config["delta"]
            return run_tags(cohort, cell.seed, mechanism=mechanism, **tags, **own)

        runner = _runner(cohort, config, cells_dir, name, progress, run_tags(cohort, None, mechanism=mechanism, **tags),
                         child_tags, key)
        sweeps.append(Sweep(name, runner, cells, kind))

    noise_seeds = range(config.noise_seeds)
    attacks = []
    if cohort.reid_release is not None:
        attacks.append(("reidentification", {"n_reidentification": int(len(cohort.reid_release)),
                                             "reid_kind": cohort.reid_kind}))
    attacks.append(("membership", {"membership_trials": int(config.membership_trials),
                                   "member_fraction": float(config.member_fraction)}))
    for attack, extra in attacks:
        add(f"{attack}-none", attack,
            expand_grid({"mechanism": [NO_NOISE], "epsilon": [math.inf]}, noise_seeds,
                        {**base, **extra, "kind": attack}), NO_NOISE, attack=attack)
        for mechanism in config.mechanisms:
            delta = config.delta if make_mechanism(mechanism, 1.0, config.delta).uses_delta else 0.0
            add(f"{attack}-{mechanism}", attack,
                expand_grid({"mechanism": [mechanism], "epsilon": list(config.epsilons)}, noise_seeds,
                            {**base, **extra, "kind": attack, "delta": delta}), mechanism, attack=attack)
    return sweeps


def _pending(sweep: Sweep, cells_dir: Path) -> list[Cell]:
    """Cells a run computes: not on disk, or (utility) on disk without their kept predictions."""
    missing = {cell.key for cell in sweep.runner.pending(sweep.cells)}
    return [cell for cell in sweep.cells if cell.key in missing
            or (sweep.kind == "utility" and not study_a.predictions_path(cells_dir, cell.key).exists())]


def cell_cost(config: dict, seed: int, n_patients: int) -> float:
    """A cell's work in LOSO fits, the unit of the progress line's cells phase: a utility cell's
    (:func:`eegprivacy.studies.release.utility.loso_fits`: n, or n plus the nested protocol's inner fits), an
    attack cell's one (a few releases and distance computations: about one fit's time)."""
    if config.get("kind") in ("reidentification", "membership"):
        return 1.0
    return study_a.loso_fits(config, seed, n_patients)


def run_sweeps(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, *, progress: bool = True,
               n_jobs: int = 1, bar=None, key: str | None = None) -> tuple[list[Sweep], list[pd.DataFrame], dict]:
    """Run every sweep: the utility sweeps through study A's
    :func:`~eegprivacy.studies.release.utility.run_keeping_predictions` (per-patient predictions kept under
    ``cells_dir``), then the attacks; pending cells are computed ahead by ``n_jobs`` processes or the process-wide
    executor. With ``bar`` (a :class:`~eegprivacy.pipeline.progress.PhaseProgress`) the cells are one phase of it,
    counted in LOSO fits (:func:`cell_cost`), and no sweep draws its own. With the audit's ``key``
    (:func:`audit_key`) a rerun reuses the sweeps' MLflow runs."""
    cells_dir = Path(cells_dir)
    sweeps = plan(cohort, config, cells_dir, progress and bar is None, key)
    utility = [s for s in sweeps if s.kind == "utility"]
    attacks = [s for s in sweeps if s.kind != "utility"]
    pending = [cell for s in sweeps for cell in _pending(s, cells_dir)]
    if bar is not None:
        cost = functools.partial(cell_cost, n_patients=len(cohort.y))
        bar.phase("audit: utility and attack cells", sum(cost(c.config, c.seed) for c in pending), "LOSO fits")
        for sweep in sweeps:
            sweep.runner.on_cell = lambda config, seed, _cost=cost: bar.advance(_cost(config, seed))
    frames = study_a.run_keeping_predictions([(s.runner, s.cells) for s in utility],
                                             functools.partial(study_a.utility_cell, X=cohort.X, y=cohort.y),
                                             cells_dir, n_jobs)
    arrays = {"X": cohort.X, "y": cohort.y, "reid_release": cohort.reid_release,
              "reid_auxiliary": cohort.reid_auxiliary}
    cell_fn = functools.partial(audit_cell, cohort_arrays=arrays,
                                audit={"membership_trials": config.membership_trials,
                                       "member_fraction": config.member_fraction})
    jobs = [(cell.config, cell.seed) for s in attacks for cell in s.runner.pending(s.cells)]
    compute = PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs)
    frames += [s.runner.run(s.cells, compute) for s in attacks]
    n_cells = sum(len(s.cells) for s in sweeps)
    return utility + attacks, frames, {"sweeps": len(sweeps), "cells": n_cells, "cells_computed": len(pending),
                                       "cells_resumed": n_cells - len(pending)}
