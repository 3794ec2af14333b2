"""The sweep runner every study's sweep goes through.

A sweep is a param grid × seeds, expanded into cells. Each cell is keyed by the hash of its resolved config, so a
re-run skips cells whose rows are already on disk (resume after a crash loses at most the cell in flight), and
each cell's rows are written atomically (temporary file, fsync, rename): a killed process leaves either the whole
file or none, and its leftover temporary files are never read and are removed by the next run. MLflow gets one
parent run per sweep and one nested child per cell, open while the cell computes, so a killed sweep leaves both
RUNNING; the next run marks them FAILED (``runs.fail_orphaned_runs``) and reopens them (``runs.resumable_run``), as
it does after Ctrl-C, so a resumed sweep keeps one parent and one child per cell. Children are named by their
config and seed (:func:`run_names`). The parent carries the aggregates (mean and 95% CI over seeds).

``PrefetchedCells`` computes the cells of several runners ahead in worker processes, so a 2-core machine stays
busy across runner boundaries, while each runner still logs and writes its cells in order in the main process.
Where those workers are (local processes or a Ray cluster) is the executor's business
(:mod:`eegprivacy.pipeline.executors`), chosen once per process.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.pipeline.executors import Executor, LocalExecutor, current_executor
from eegprivacy.pipeline.keys import config_key
from eegprivacy.tracking.runs import _host_key, log_metrics, param_text, start_run

log = logging.getLogger(__name__)

ROW_COLUMNS = ["study", "dataset", "config_key", "seed", "metric", "value", "ci_low", "ci_high", "n", "chance"]


@dataclass(frozen=True)
class Cell:
    config: dict[str, Any]
    seed: int

    @property
    def key(self) -> str:
        return config_key({**self.config, "seed": self.seed})

    @property
    def group(self) -> str:
        """The cell's config without the seed: cells sharing it are aggregated over seeds."""
        return config_key(self.config)


def expand_grid(grid: Mapping[str, Iterable[Any]], seeds: Iterable[int],
                base: Mapping[str, Any] | None = None) -> list[Cell]:
    """Cartesian product of the grid's values, times every seed, on top of ``base``."""
    names = list(grid)
    cells = []
    for values in itertools.product(*(list(grid[n]) for n in names)):
        config = {**(base or {}), **dict(zip(names, values))}
        cells.extend(Cell(config, int(seed)) for seed in seeds)
    return cells


# Config keys that name a cell first in its run name, in this order (when the cell has them); then the keys that
# differ between the sweep's cells, then the seed.
NAME_KEYS = ("arm", "mechanism", "epsilon", "eps", "model", "encoder", "attack", "defense")
NAME_LABELS = {"epsilon": "ε", "eps": "ε", "delta": "δ"}
NAME_VALUE_CHARS = 24  # longer text values (paths, hashes, lists) stay out of a run name
MAX_RUN_NAME = 250  # MLflow's runs.name column (VARCHAR(250) on PostgreSQL)


def _name_value(value: Any, exact: bool = False) -> str | None:
    """A config value as a run name shows it: short text; numbers by :func:`param_text` where ``exact`` (ε, δ:
    what a filter matches), else to 4 significant digits (a derived noise scale needs no 17); None to leave it
    out."""
    if isinstance(value, (Mapping, list, tuple, set, bytes)) or value is None:
        return None
    if not exact and isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        value = float(f"{value:.4g}")
    text = param_text(value)
    if len(text) > NAME_VALUE_CHARS or any(ch in text for ch in "'\"\\\n") or not text.strip():
        return None
    return text


def run_names(name: str, cells: Iterable[Cell]) -> dict[str, str]:
    """Each cell's child run name (by cell key), readable in the MLflow UI: ``<sweep> · mechanism=gaussian_analytic
    ε=10 seed=3``. It shows the NAME_KEYS the cell has and the config keys that differ between the cells, with
    short values only; cells that would still share a name get their key's first 6 characters appended, so a name
    is unique within the sweep's parent."""
    cells = list(cells)
    varying = sorted({k for c in cells for k in c.config if k not in NAME_KEYS
                      and len({param_text(o.config.get(k)) for o in cells}) > 1})
    names = {}
    for cell in cells:
        parts = []
        for key in [k for k in NAME_KEYS if k in cell.config] + varying:
            text = _name_value(cell.config.get(key), exact=key in NAME_LABELS)
            if text is not None:
                parts.append(f"{NAME_LABELS.get(key, key)}={text}")
        names[cell.key] = f"{name} · {' '.join([*parts, f'seed={cell.seed}'])}"
    counts: dict[str, int] = {}
    for text in names.values():
        counts[text] = counts.get(text, 0) + 1
    for key, text in names.items():
        if counts[text] > 1 or len(text) > MAX_RUN_NAME:
            names[key] = f"{text[:MAX_RUN_NAME - 8]} #{key[:6]}"
    return names


def _write_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Write, fsync, rename: the final name only ever holds a complete file, even across a power cut."""
    tmp = path.with_suffix(f".{_host_key()}-{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as handle:
        frame.to_csv(handle, index=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself is durable only once the folder is
    finally:
        os.close(directory)


def _read_cell(path: Path, text_columns: Iterable[str] = ()) -> pd.DataFrame | None:
    """A finished cell's rows, or None when the file is not a readable cell table (then the cell reruns).

    ``round_trip`` parsing gives back exactly the floats that were written, and ``text_columns`` (string config
    values, hashes) stay text even when they look like numbers, so resumed and fresh rows agree.
    """
    try:
        rows = pd.read_csv(path, float_precision="round_trip", dtype={c: str for c in text_columns})
    except (OSError, ValueError, pd.errors.ParserError) as err:  # EmptyDataError is a ValueError
        log.warning("cell file %s is unreadable (%s); recomputing the cell", path.name, type(err).__name__)
        return None
    if not {"metric", "value", "seed"} <= set(rows.columns):
        log.warning("cell file %s lacks the row columns; recomputing the cell", path.name)
        return None
    return rows


def _remove_stale_tmp(folder: Path) -> int:
    """Delete this host's ``<key>.<host>-<pid>.tmp`` files whose writer is gone (killed mid-write); a live
    writer's, and other hosts' on a shared folder, are kept."""
    removed, host = 0, _host_key()
    for tmp in folder.glob("*.tmp"):
        parts = tmp.name.split(".")
        owner_host, _, pid = parts[1].rpartition("-") if len(parts) == 3 else ("", "", "")
        if owner_host != host or not pid.isdigit():
            continue
        if int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
                continue  # still running: another sweep on this folder is writing it
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


def aggregate(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean and 95% t-interval over seeds for each (config..., metric)."""
    out = []
    for keys, part in rows.groupby([*by, "metric"], dropna=False, sort=True):
        mean, low, high = mean_ci(part["value"].to_numpy(dtype=float))
        record = dict(zip([*by, "metric"], keys if isinstance(keys, tuple) else (keys,)))
        chance = part["chance"].dropna().unique() if "chance" in part else []
        record.update(value=mean, ci_low=low, ci_high=high, n=int(part["value"].notna().sum()),
                      chance=float(chance[0]) if len(chance) == 1 else float("nan"))
        out.append(record)
    return pd.DataFrame(out)


class SweepRunner:
    """Run ``cell_fn(config, seed) -> list[row dict]`` over cells, resumable, with parent/child MLflow runs.

    Rows need at least ``metric`` and ``value``; ``ci_low``, ``ci_high``, ``n`` and ``chance`` are optional.
    ``tags_fn(cell)`` returns the child's tags (the required set, see :func:`required_tags`).
    """

    def __init__(self, *, name: str, study: str, dataset: str, out_dir: str | Path, parent_tags: Mapping[str, str],
                 tags_fn: Callable[[Cell], Mapping[str, str]], params: Mapping[str, Any] | None = None,
                 progress: bool = True, idempotency_key: str | None = None):
        self.name, self.study, self.dataset = name, study, dataset
        self.out_dir = Path(out_dir)
        self.parent_tags, self.tags_fn = dict(parent_tags), tags_fn
        self.params = dict(params or {})
        self.progress = progress
        # With a key (a hash of everything the sweep's results depend on), a rerun reuses the parent run and the
        # children of that key, whatever their status (start_run), instead of adding new ones.
        self.idempotency_key = idempotency_key

    def child_key(self, cell: Cell) -> str | None:
        """The idempotency key of ``cell``'s child run: the sweep's key and the cell's, hashed (None without one)."""
        if self.idempotency_key is None:
            return None
        return hashlib.sha256(f"{self.idempotency_key}/{cell.key}".encode()).hexdigest()[:16]

    def cell_path(self, cell: Cell) -> Path:
        return self.out_dir / f"{cell.key}.csv"

    def pending(self, cells: Iterable[Cell]) -> list[Cell]:
        """The cells whose rows are not on disk yet, in order: what ``run`` will compute."""
        return [cell for cell in cells
                if not self.cell_path(cell).exists() or _read_cell(self.cell_path(cell)) is None]

    def run(self, cells: list[Cell], cell_fn: Callable[[dict, int], list[dict]]) -> pd.DataFrame:
        """All cells' rows (tidy), running only the cells not already on disk."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_tmp(self.out_dir)
        grid_keys = sorted({k for c in cells for k in c.config})
        names = run_names(self.name, cells)
        with start_run(study=self.study, tags=self.parent_tags, params=self.params, run_name=self.name,
                       idempotency_key=self.idempotency_key) as parent:
            frames, resumed = [], 0
            for cell in tqdm(cells, desc=self.name, unit="cell", disable=not self.progress):
                path = self.cell_path(cell)
                text = ["study", "dataset", "config_key", "metric",
                        *(k for k, v in cell.config.items() if isinstance(v, str))]
                done = _read_cell(path, text) if path.exists() else None
                if done is not None:  # finished in an earlier run
                    frames.append(done)
                    resumed += 1
                    continue
                # The child run is open while the cell computes: a crash marks it FAILED, a kill leaves it
                # RUNNING for the next start to mark FAILED.
                with start_run(study=self.study, tags=self.tags_fn(cell), run_name=names[cell.key],
                               params={**cell.config, "seed": cell.seed}, parent_run_id=parent.info.run_id,
                               idempotency_key=self.child_key(cell)):
                    rows = pd.DataFrame(cell_fn(dict(cell.config), cell.seed))
                    for column, value in (("study", self.study), ("dataset", self.dataset),
                                          ("config_key", cell.group), ("seed", cell.seed)):
                        rows[column] = value
                    for key in grid_keys:
                        rows[key] = cell.config.get(key)
                    for column in ("ci_low", "ci_high", "n", "chance"):
                        if column not in rows:
                            rows[column] = float("nan")
                    log_metrics(_child_metrics(rows, grid_keys))
                _write_atomic(path, rows)
                # Read back what was written, so a fresh run and a resumed one return identical tables.
                written = _read_cell(path, text)
                if written is None:
                    raise RuntimeError(f"cell file {path} could not be read back after writing it")
                frames.append(written)
            tidy = pd.concat(frames, ignore_index=True)
            # Aggregate over seeds within each varying knob (constant ones would only lengthen the names) and
            # within any extra row column a cell adds (e.g. ``protocol``).
            varying = [k for k in grid_keys if tidy[k].astype(str).nunique() > 1]
            extra = [c for c in tidy.columns if c not in ROW_COLUMNS and c not in grid_keys]
            summary = aggregate(tidy, varying + extra)
            aggregates = {"cells": len(cells), "cells_resumed": resumed}
            for _, record in summary.iterrows():
                for stat, column in (("mean", "value"), ("ci_low", "ci_low"), ("ci_high", "ci_high")):
                    aggregates[metric_name(record, varying + extra, stat)] = record[column]
            log_metrics(aggregates)
        return tidy


CostFn = Callable[[Mapping[str, Any], int], float]


def longest_first(jobs: list[tuple[dict, int]], cost: CostFn) -> list[int]:
    """Job positions in decreasing ``cost(config, seed)``, ties in job order: the order to hand cells to a pool of
    workers so that the expensive ones start first and the cheap ones fill the gaps at the end (longest processing
    time first), instead of one slow cell running alone on one core while the others idle."""
    costs = [float(cost(config, seed)) for config, seed in jobs]
    return sorted(range(len(jobs)), key=lambda k: -costs[k])  # sorted() is stable: ties keep the job order


class PrefetchedCells:
    """A ``cell_fn`` for ``SweepRunner.run`` whose results are computed ahead by ``n_jobs`` processes.

    ``jobs`` lists every (config, seed) the runners will ask for, in the order they will ask (build it from
    ``SweepRunner.pending``). Each call checks that it is asked for the next job, then waits for that job's rows,
    so logging, cell files and the returned tables are exactly those of a serial run. A cell must be a pure
    function of (config, seed) and picklable arguments; on a crash the cells already handed over are on disk and
    the ones computed ahead are lost. ``executor`` (default: the process-wide one,
    :func:`~eegprivacy.pipeline.executors.current_executor`) computes them: local processes, where ``n_jobs``
    counts them, or a Ray cluster, whose CPUs do.

    ``cost``: an estimate of a cell's compute time from its (config, seed) (any unit; only the order matters).
    Given it, the cells are handed to the workers longest first (:func:`longest_first`) and their rows held until
    the runners ask for them, so both cores stay busy to the end of a sweep whose slow cells would otherwise come
    last. Rows never depend on it: every cell is seeded by its config alone and runs on one thread wherever it
    runs. A single local process (``n_jobs`` 1) computes in job order: there is nothing to balance.
    """

    def __init__(self, cell_fn: Callable[[dict, int], list[dict]], jobs: Iterable[tuple[Mapping[str, Any], int]],
                 n_jobs: int = 1, executor: Executor | None = None, cost: CostFn | None = None):
        jobs = [(dict(config), int(seed)) for config, seed in jobs]
        self._expected = deque((k, config_key(config), seed) for k, (config, seed) in enumerate(jobs))
        executor = executor or current_executor()
        balance = cost is not None and len(jobs) > 1 and (int(n_jobs) > 1
                                                          or not isinstance(executor, LocalExecutor))
        self._order = longest_first(jobs, cost) if balance else list(range(len(jobs)))
        self._results = executor.map(cell_fn, [jobs[k] for k in self._order], n_jobs=n_jobs)
        self._computed = 0  # how many of self._order the executor has handed back
        self._held: dict[int, list[dict]] = {}  # rows computed ahead of their turn, by job position

    def __call__(self, config: dict, seed: int) -> list[dict]:
        if not self._expected:
            raise RuntimeError("a runner asked for a cell that was not prefetched")
        position, *expected = self._expected.popleft()
        if tuple(expected) != (config_key(config), int(seed)):
            raise RuntimeError("cells were requested in another order than they were prefetched")
        while position not in self._held:
            self._held[self._order[self._computed]] = next(self._results)
            self._computed += 1
        return self._held.pop(position)

    def remaining(self) -> int:
        return len(self._expected)


def run_prefetched(plan: Iterable[tuple[SweepRunner, list[Cell]]], cell_fn: Callable[[dict, int], list[dict]],
                   n_jobs: int = 1, executor: Executor | None = None,
                   cost: CostFn | None = None) -> list[pd.DataFrame]:
    """Run each (runner, cells) in turn with every pending cell computed ahead by ``n_jobs`` processes, or by the
    Ray cluster when that is the executor (:class:`PrefetchedCells`), so the cores stay busy across the runners
    while the tables, cell files and MLflow runs are exactly those of running them one by one. ``cell_fn`` serves
    every runner (dispatch on the config); ``cost`` estimates a cell's time, to start the slow ones first."""
    return [frame for _, _, frame in iter_prefetched(plan, cell_fn, n_jobs=n_jobs, executor=executor, cost=cost)]


def iter_prefetched(plan: Iterable[tuple[SweepRunner, list[Cell]]], cell_fn: Callable[[dict, int], list[dict]],
                    n_jobs: int = 1, executor: Executor | None = None,
                    cost: CostFn | None = None) -> Iterator[tuple[SweepRunner, list[Cell], pd.DataFrame]]:
    """:func:`run_prefetched` one runner at a time: each (runner, cells, its table) as soon as the runner is done
    (the pending cells are listed when the first is asked for), so a stage can report on it or extend it before
    the next starts."""
    plan = list(plan)
    jobs = [(cell.config, cell.seed) for runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs, executor=executor, cost=cost)
    for runner, cells in plan:
        yield runner, cells, runner.run(cells, compute)


def _child_metrics(rows: pd.DataFrame, grid_keys: list[str]) -> dict[str, float]:
    """A cell's rows as MLflow metrics; extra row columns (``protocol``, ``attacker``...) prefix the name so
    rows that share a metric name do not overwrite one another."""
    extra = [c for c in rows.columns if c not in ROW_COLUMNS and c not in grid_keys]
    out = {}
    for record in rows.to_dict("records"):
        keys = [k for k in extra if pd.notna(record.get(k))]
        out[metric_name(record, keys, "").removesuffix("_")] = float(record["value"])
    return out


def metric_name(record: Mapping[str, Any], keys: list[str], stat: str) -> str:
    """MLflow-safe aggregate name, e.g. ``epsilon_10/balanced_accuracy_mean``."""
    prefix = "/".join(f"{k}_{record[k]}" for k in keys)
    name = f"{prefix}/{record['metric']}_{stat}" if prefix else f"{record['metric']}_{stat}"
    return "".join(ch if ch.isalnum() or ch in "_-./ " else "_" for ch in name)
