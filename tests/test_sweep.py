"""The sweep runner: grid × seeds, resumable cells written atomically, parent/child MLflow runs with aggregates."""

from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest

from eegprivacy.pipeline.sweep import SweepRunner, expand_grid
from eegprivacy.tracking import required_tags, tracking_uri


def _runner(tmp_path):
    def tags(cell):
        return required_tags(study="a", stage="toy", dataset="toy", dataset_version="v1", synthetic=True,
                             seed=cell.seed, epsilon=cell.config["epsilon"])
    return SweepRunner(name="toy-sweep", study="a", dataset="toy", out_dir=tmp_path / "cells",
                       parent_tags=required_tags(study="a", stage="toy", dataset="toy", dataset_version="v1",
                                                 synthetic=True, seed=None),
                       tags_fn=tags, params={"grid": {"epsilon": [1, 10]}, "seeds": 3}, progress=False)


def test_grid_expansion_and_keys():
    cells = expand_grid({"epsilon": [1, 10], "mechanism": ["a", "b"]}, seeds=range(3), base={"clip": 2.0})
    assert len(cells) == 12 and len({c.key for c in cells}) == 12
    assert len({c.group for c in cells}) == 4  # seeds share a group
    assert all(c.config["clip"] == 2.0 for c in cells)


def test_sweep_rows_aggregates_and_mlflow_parent_child(tmp_path):
    calls = []

    def cell_fn(config, seed):
        calls.append((config["epsilon"], seed))
        return [{"metric": "score", "value": config["epsilon"] + seed, "chance": 0.5}]

    cells = expand_grid({"epsilon": [1, 10]}, seeds=[0, 1, 2])
    tidy = _runner(tmp_path).run(cells, cell_fn)
    assert len(calls) == 6 and len(tidy) == 6
    assert set(tidy.columns) >= {"study", "dataset", "config_key", "seed", "metric", "value", "ci_low", "ci_high",
                                 "n", "chance", "epsilon"}

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 6
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert {c.data.tags["seed"] for c in children} == {"0", "1", "2"}
    metrics = parents[0].data.metrics
    assert metrics["epsilon_10/score_mean"] == pytest.approx(11.0)
    assert metrics["epsilon_10/score_ci_low"] < 11.0 < metrics["epsilon_10/score_ci_high"]
    assert metrics["cells_resumed"] == 0


def test_resume_after_a_crash_runs_only_missing_cells(tmp_path):
    cells = expand_grid({"epsilon": [1, 10]}, seeds=[0, 1])
    calls = []

    def crashing(config, seed):
        if len(calls) == 2:
            raise RuntimeError("killed mid-sweep")
        calls.append(seed)
        return [{"metric": "score", "value": float(seed)}]

    runner = _runner(tmp_path)
    with pytest.raises(RuntimeError):
        runner.run(cells, crashing)
    assert len(list((tmp_path / "cells").glob("*.csv"))) == 2
    assert not list((tmp_path / "cells").glob("*.tmp"))

    calls.clear()
    again = []
    tidy = runner.run(cells, lambda config, seed: again.append(seed) or [{"metric": "score", "value": float(seed)}])
    assert len(again) == 2 and len(tidy) == 4  # only the two unfinished cells ran
    finished = pd.read_csv(runner.cell_path(cells[0]))
    assert finished["seed"].tolist() == [cells[0].seed]
    assert not math.isnan(tidy["value"].sum())


def _noisy_cell(config, seed):
    """Module-level (picklable) so worker processes can run it; a pure function of (config, seed)."""
    import numpy as np

    rng = np.random.default_rng([int(seed), int(config["epsilon"])])
    return [{"metric": "score", "value": float(rng.normal()), "chance": 0.5}]


def test_prefetched_cells_in_two_processes_give_the_serial_tables(tmp_path):
    from eegprivacy.pipeline.sweep import PrefetchedCells

    cells = expand_grid({"epsilon": [1, 10]}, seeds=[0, 1, 2])
    serial = _runner(tmp_path / "serial").run(cells, _noisy_cell)
    runner = _runner(tmp_path / "parallel")
    (runner.out_dir).mkdir(parents=True)
    runner.run(cells[:2], _noisy_cell)  # two cells already on disk: only the rest is prefetched
    pending = runner.pending(cells)
    assert [c.key for c in pending] == [c.key for c in cells[2:]]
    compute = PrefetchedCells(_noisy_cell, [(c.config, c.seed) for c in pending], n_jobs=2)
    parallel = runner.run(cells, compute)
    assert compute.remaining() == 0
    pd.testing.assert_frame_equal(serial, parallel)

    # asking out of order is an error, not a silent mix-up of two cells' rows
    shuffled = PrefetchedCells(_noisy_cell, [(c.config, c.seed) for c in cells], n_jobs=1)
    with pytest.raises(RuntimeError, match="order"):
        shuffled(cells[1].config, cells[1].seed)


def _epsilon_cost(config: dict, seed: int) -> float:
    return float(config["epsilon"])


class _RecordingExecutor:
    """Computes in this process, in the order it is handed the jobs, and remembers that order."""

    def __init__(self):
        self.order: list[tuple[float, int]] = []

    def map(self, cell_fn, jobs, n_jobs=1):
        jobs = list(jobs)
        self.order = [(config["epsilon"], seed) for config, seed in jobs]
        return (cell_fn(config, seed) for config, seed in jobs)


def test_longest_first_schedule_changes_the_order_of_work_not_the_tables(tmp_path):
    """Issue 37: with a cost estimate the costliest cells are handed to the workers first (ties in job order) and
    their rows held until the runner asks, so the tables, files and MLflow runs are those of a serial run."""
    from eegprivacy.pipeline.sweep import PrefetchedCells, longest_first, run_prefetched

    cells = expand_grid({"epsilon": [1, 10, 5]}, seeds=[0, 1])
    jobs = [(c.config, c.seed) for c in cells]
    assert longest_first(jobs, _epsilon_cost) == [2, 3, 4, 5, 0, 1]
    serial = _runner(tmp_path / "serial").run(cells, _noisy_cell)

    recorder = _RecordingExecutor()
    compute = PrefetchedCells(_noisy_cell, jobs, n_jobs=2, executor=recorder, cost=_epsilon_cost)
    assert recorder.order == [(10, 0), (10, 1), (5, 0), (5, 1), (1, 0), (1, 1)]
    pd.testing.assert_frame_equal(serial, _runner(tmp_path / "recorded").run(cells, compute))
    assert compute.remaining() == 0

    [parallel] = run_prefetched([(_runner(tmp_path / "parallel"), cells)], _noisy_cell, n_jobs=2,
                                cost=_epsilon_cost)
    pd.testing.assert_frame_equal(serial, parallel)


def _linkage_key_seen(config: dict, seed: int) -> list[dict]:
    import os

    return [{"metric": "key_set", "value": float(bool(os.environ.get("EEGPRIVACY_LINKAGE_KEY")))}]


def test_local_workers_see_a_linkage_key_set_after_the_pool_started(monkeypatch):
    """Loky reuses its workers across sweeps; a key set later in the same process (a notebook, the test suite) must
    still reach the cells that read it (dp-scenarios' server-side scenario), so the pool is restarted."""
    from eegprivacy.pipeline.executors import LocalExecutor

    jobs = [({"cell": i}, 0) for i in range(4)]
    monkeypatch.delenv("EEGPRIVACY_LINKAGE_KEY", raising=False)
    assert [rows[0]["value"] for rows in LocalExecutor().map(_linkage_key_seen, jobs, n_jobs=2)] == [0.0] * 4
    monkeypatch.setenv("EEGPRIVACY_LINKAGE_KEY", "ab" * 32)
    assert [rows[0]["value"] for rows in LocalExecutor().map(_linkage_key_seen, jobs, n_jobs=2)] == [1.0] * 4
