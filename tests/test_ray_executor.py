"""Sweeps on a Ray cluster of real processes on loopback: the rows equal the local executor's, cells run on every
node, a killed node's cells are retried elsewhere, a failing cell is retried then named, and the CLI flags choose
the executor.

The cluster is started with the ``ray`` command of this venv (``ray start --block`` in its own session, so each
node is a process group this module owns and kills; ``ray stop`` would kill every Ray process of the user). Each
node has 1 CPU, a 100 MB object store and its own short temp dir (Unix socket paths are limited to ~107 chars).
The nodes are started from an environment that holds a (dummy) linkage key and tracking URI, as a shell that ran a
stage might: the tasks must not see them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from argparse import Namespace
from pathlib import Path

import pandas as pd
import pytest

from eegprivacy.pipeline import executors
from eegprivacy.pipeline.executors import CellFailedError, LocalExecutor, RayExecutor
from eegprivacy.pipeline.sweep import SweepRunner, expand_grid, run_prefetched
from eegprivacy.privacy.linkage import MissingLinkageKeyError
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import write_rows
from eegprivacy.studies.release.utility import utility_sweeps
from eegprivacy.tracking import required_tags

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 90
SMALL = {  # a small study-A sweep (tests/test_study_a_stages.py's, without the costly nested protocol): 19 cells
    "dp_release": {"clip_norm": 2.0, "delta": 1.0e-5, "epsilons": [1, 10],
                   "mechanisms": ["gaussian_analytic", "laplace_implemented"], "noise_seeds": 2,
                   "datasets": {"synthetic_clinical": {"label": "label"}}},
    "dp_utility": {"mechanisms": ["gaussian_analytic", "laplace_implemented"], "baseline_mlp_seeds": 1, "nested_seeds": 0,
                   "permutations": 1, "n_jobs": 1, "figure_epsilon": 10, "bootstrap": 200},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Node:
    """One ``ray start --block`` process group with its own temp dir and log."""

    def __init__(self, *args: str):
        self.temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(RAY_USAGE_STATS_ENABLED="0",
                   # a dead node is noticed in ~1.5 s instead of ~15 s, so the node-kill test stays short
                   RAY_health_check_period_ms="500", RAY_health_check_timeout_ms="500",
                   RAY_health_check_failure_threshold="3",
                   EEGPRIVACY_LINKAGE_KEY="ab" * 32, MLFLOW_TRACKING_URI="postgresql://user:secret@nowhere/db")
        self.log = open(Path(self.temp_dir + ".log"), "w")
        self.process = subprocess.Popen(
            [str(RAY), "start", "--block", "--num-cpus", "1", "--object-store-memory", "100000000",
             "--disable-usage-stats", "--temp-dir", self.temp_dir, "--node-ip-address", "127.0.0.1",
             "--dashboard-agent-listen-port", str(_free_port()), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def owns(self, node: dict) -> bool:
        """Whether a ``ray.nodes()`` entry is this node (its sockets live in this node's temp dir)."""
        return node["RayletSocketName"].startswith(self.temp_dir)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def stop(self) -> None:
        """SIGTERM the whole group, SIGKILL what is left, remove the temp dir."""
        import psutil

        family = []
        with contextlib.suppress(psutil.NoSuchProcess):
            family = psutil.Process(self.process.pid).children(recursive=True)
        self.kill(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.kill(signal.SIGKILL)
        for proc in family:  # anything that left the group
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        self.process.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        Path(self.temp_dir + ".log").unlink(missing_ok=True)


def _wait_alive(ray, nodes: list[_Node]) -> dict[str, str]:
    """Wait until every node is alive in the cluster; ``{temp dir: node id}``."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n["Alive"]]
        ids = {node.temp_dir: n["NodeID"] for node in nodes for n in alive if node.owns(n)}
        if len(ids) == len(nodes):
            return ids
        if any(node.process.poll() is not None for node in nodes):
            break
        time.sleep(0.5)
    logs = "\n".join(Path(node.temp_dir + ".log").read_text()[-2000:] for node in nodes)
    pytest.fail(f"Ray nodes did not come up within {START_TIMEOUT_S} s:\n{logs}")


@pytest.fixture(scope="module")
def cluster():
    """A head and a worker node on loopback, with this process connected as a Ray client."""
    import ray

    if ray.is_initialized():  # e.g. a Flower simulation earlier in this session left its local Ray up
        ray.shutdown()
    gcs, client = _free_port(), _free_port()
    started: list[_Node] = []
    try:
        started.append(_Node("--head", "--port", str(gcs), "--ray-client-server-port", str(client),
                              "--include-dashboard=false"))
        started.append(_Node("--address", f"127.0.0.1:{gcs}"))
        address = f"ray://127.0.0.1:{client}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ray.is_initialized():
            try:
                ray.init(address=address, logging_level="WARNING")
            except ConnectionError:
                if time.monotonic() > deadline or started[0].process.poll() is not None:
                    raise
                time.sleep(1)
        ids = _wait_alive(ray, started)
        yield Namespace(ray=ray, address=address, gcs=f"127.0.0.1:{gcs}", head=started[0], worker=started[1],
                        node_ids=ids, started=started)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(started):
            node.stop()


def _dp_utility_rows(folder: Path, table) -> pd.DataFrame:
    """The dp_utility stage's tidy rows for the SMALL sweep on ``table``, computed by the current executor."""
    _, frames = utility_sweeps(table, DPReleaseConfig.from_mapping(SMALL["dp_release"]),
                               DPUtilityConfig.from_mapping(SMALL["dp_utility"]), "label",
                               cells_dir=folder / "cells", progress=False)
    write_rows(frames, folder / "rows.csv")
    return pd.read_csv(folder / "rows.csv")


@pytest.mark.slow
def test_study_a_sweep_on_two_nodes_equals_the_local_rows(cluster, tmp_path, monkeypatch):
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(5, 4, 4, seed=3)
    monkeypatch.setattr(executors, "_current", LocalExecutor())
    started = time.perf_counter()
    local = _dp_utility_rows(tmp_path / "local", table)
    local_s = time.perf_counter() - started

    on_ray = RayExecutor(cluster.address)
    monkeypatch.setattr(executors, "_current", on_ray)
    started = time.perf_counter()
    remote = _dp_utility_rows(tmp_path / "ray", table)
    ray_s = time.perf_counter() - started
    print(f"\nsmall dp_utility sweep (19 cells): local {local_s:.1f} s, Ray 2 nodes {ray_s:.1f} s")

    assert set(local["mechanism"]) == {"none", "permuted_labels", "gaussian_analytic", "laplace_implemented"}
    pd.testing.assert_frame_equal(local, remote)
    # baseline + scaled-and-clipped + control + 2 mechanisms x 2 ε x 2 seeds x (release, null)
    assert len(on_ray.task_nodes) == 19
    assert set(on_ray.task_nodes) == set(cluster.node_ids.values())  # both nodes computed cells


def _toy_runner(folder: Path) -> SweepRunner:
    def tags(cell):
        return required_tags(study="a", stage="toy", dataset="toy", dataset_version="v1", synthetic=True,
                             seed=cell.seed, epsilon=cell.config["epsilon"])
    return SweepRunner(name="toy-sweep", study="a", dataset="toy", out_dir=folder,
                       parent_tags=required_tags(study="a", stage="toy", dataset="toy", dataset_version="v1",
                                                 synthetic=True, seed=None),
                       tags_fn=tags, progress=False)


def _journal(folder: Path, event: str, config: dict, seed: int) -> None:
    """One line per cell start/end: which node and process ran it (the runs share this machine's disk)."""
    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "driver"
    with open(folder / "journal.txt", "a") as handle:
        handle.write(f"{event} {config['epsilon']}-{seed} {node} {os.getpid()}\n")


def _slow_cell(config: dict, seed: int, *, sleep_s: float, journal: Path) -> list[dict]:
    """A toy cell whose rows depend on (config, seed) only; ``sleep_s`` makes it long enough to kill a node."""
    import numpy as np

    _journal(journal, "start", config, seed)
    time.sleep(sleep_s)
    _journal(journal, "end", config, seed)
    value = np.random.default_rng([seed, int(config["epsilon"])]).normal()
    return [{"metric": "score", "value": float(value), "chance": 0.5}]


def _flaky_cell(config: dict, seed: int, *, journal: Path) -> list[dict]:
    """Raises on its first attempt (no marker file yet), succeeds on the next."""
    _journal(journal, "start", config, seed)
    marker = journal / f"tried-{seed}"
    if not marker.exists():
        marker.touch()
        raise RuntimeError("flaky on the first attempt")
    return [{"metric": "score", "value": float(seed)}]


def _broken_cell(config: dict, seed: int) -> list[dict]:
    raise ValueError("this cell always fails")


def _environment_cell(config: dict, seed: int) -> list[dict]:
    """What a task's worker sees: which secrets are set, BLAS threads, whether the study library imports."""
    import numpy  # noqa: F401 - loads the BLAS whose threads are counted
    from threadpoolctl import threadpool_info

    import eegprivacy.studies.release.table  # noqa: F401 - importable from the driver's checkout

    rows = [{"metric": name, "value": float(name in os.environ)} for name in executors.WORKER_UNSET_ENV]
    return rows + [{"metric": "max_blas_threads", "value": float(max(p["num_threads"] for p in threadpool_info()))}]


def _key_cell(config: dict, seed: int) -> list[dict]:
    from eegprivacy.privacy.linkage import LinkageKey

    LinkageKey.from_env()
    return [{"metric": "score", "value": 0.0}]


@pytest.fixture
def by_value():
    """This test module's cell functions travel by value: the workers cannot import a test module."""
    from ray import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


def _lines(journal: Path) -> list[list[str]]:
    path = journal / "journal.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_failing_cell_is_retried_and_a_broken_one_is_named(cluster, tmp_path, by_value, monkeypatch):
    monkeypatch.setenv("EEGPRIVACY_LINKAGE_KEY", "cd" * 32)  # the driver has a key; the workers must not get it
    journal = tmp_path / "journal"
    journal.mkdir()
    executor = RayExecutor(cluster.address, max_retries=1)
    jobs = [({"epsilon": 1}, 0), ({"epsilon": 1}, 1)]
    rows = list(executor.map(functools.partial(_flaky_cell, journal=journal), jobs))
    assert rows == [[{"metric": "score", "value": 0.0}], [{"metric": "score", "value": 1.0}]]
    starts = [key for event, key, *_ in _lines(journal) if event == "start"]
    assert sorted(starts) == ["1-0", "1-0", "1-1", "1-1"]  # each cell ran twice: the failure, then the retry

    failure = r"cell [0-9a-f]{16} \(seed 3.*after 2 attempts: ValueError: this cell always fails"
    with pytest.raises(CellFailedError, match=failure):
        list(executor.map(_broken_cell, [({"epsilon": 10}, 3)]))
    # The nodes were started with a key and a tracking URI in their environment: a task sees neither, so a cell
    # that needs the key is computed by the driver, which holds it (not retried on a worker); every BLAS has one
    # thread.
    [seen] = executor.map(_environment_cell, [({"epsilon": 10}, 4)])
    assert {row["metric"]: row["value"] for row in seen} == {
        "EEGPRIVACY_LINKAGE_KEY": 0.0, "EEGPRIVACY_LINKAGE_KEY_FILE": 0.0, "MLFLOW_TRACKING_URI": 0.0,
        "max_blas_threads": 1.0}
    assert list(executor.map(_key_cell, [({"epsilon": 10}, 5), ({"epsilon": 10}, 6)])) == [
        [{"metric": "score", "value": 0.0}]] * 2
    assert executor.task_nodes[-2:] == ["driver", "driver"]
    monkeypatch.delenv("EEGPRIVACY_LINKAGE_KEY")  # without a key in the driver either, the cell's own error
    with pytest.raises(MissingLinkageKeyError):
        list(executor.map(_key_cell, [({"epsilon": 10}, 7)]))


@pytest.mark.slow
def test_killing_a_node_mid_sweep_still_completes_the_sweep(cluster, tmp_path, by_value):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray = cluster.ray
    victim = _Node("--address", cluster.gcs)
    try:
        victim_id = _wait_alive(ray, [victim])[victim.temp_dir]
        cells = expand_grid({"epsilon": [1, 10, 100]}, seeds=range(4))
        (tmp_path / "local").mkdir()
        local_fn = functools.partial(_slow_cell, sleep_s=0.0, journal=tmp_path / "local")
        local = _toy_runner(tmp_path / "local" / "cells").run(cells, local_fn)

        journal = tmp_path / "ray"
        journal.mkdir()
        killed_at: list[float] = []

        def kill_when_busy():  # once the victim finished a cell and started another: SIGKILL its whole group
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                on_victim = [(event, key) for event, key, node, _ in _lines(journal) if node == victim_id]
                ended = {key for event, key in on_victim if event == "end"}
                if ended and any(event == "start" and key not in ended for event, key in on_victim):
                    victim.kill()
                    killed_at.append(time.perf_counter())
                    return
                time.sleep(0.05)

        executor = RayExecutor(cluster.address)
        # Start the victim's task worker before the sweep, as the other nodes' are from the earlier tests: a cold
        # start there takes seconds, enough for the others to take every cell of this short sweep.
        pin = NodeAffinitySchedulingStrategy(victim_id, soft=False)
        ray.get(ray.remote(lambda: None).options(num_cpus=1, runtime_env=executor.runtime_env(),
                                                 scheduling_strategy=pin).remote())
        watcher = threading.Thread(target=kill_when_busy, daemon=True)
        watcher.start()
        started = time.perf_counter()
        [remote] = run_prefetched([(_toy_runner(journal / "cells"), cells)],
                                  functools.partial(_slow_cell, sleep_s=1.0, journal=journal), executor=executor)
        finished = time.perf_counter()
        watcher.join()
        assert killed_at, "the victim node never ran a cell"
        print(f"\nnode-kill sweep (12 x 1 s cells, 3 nodes, one killed {killed_at[0] - started:.1f} s in): "
              f"{finished - started:.1f} s, done {finished - killed_at[0]:.1f} s after the kill")
        pd.testing.assert_frame_equal(local, remote)

        # Retried: cells the victim started whose rows came from another node.
        rows_from = {f"{cell.config['epsilon']}-{cell.seed}": node for cell, node in zip(cells, executor.task_nodes)}
        retried = {key for event, key, node, _ in _lines(journal)
                   if event == "start" and node == victim_id and rows_from[key] != victim_id}
        print(f"cells lost with the node and retried elsewhere: {sorted(retried)}; "
              f"nodes per cell: {[n[:8] for n in executor.task_nodes]}")
        assert retried, "no cell was running on the victim when it was killed"
        assert victim_id in executor.task_nodes  # it did compute cells before it died
        assert not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == victim_id)
    finally:
        victim.stop()


def test_cli_flags_choose_the_executor(monkeypatch, capsys):
    from eegprivacy import cli

    monkeypatch.setattr(executors, "_current", None)
    monkeypatch.delenv(executors.EXECUTOR_ENV, raising=False)
    monkeypatch.delenv(executors.ADDRESS_ENV, raising=False)
    monkeypatch.setattr(cli, "cmd_datasets", lambda args: 0)  # the subcommand itself is beside the point

    assert cli.main(["--executor", "ray", "--address", "ray://127.0.0.1:10001", "datasets"]) == 0
    chosen = executors.current_executor()
    assert isinstance(chosen, RayExecutor) and chosen.address == "ray://127.0.0.1:10001"
    assert chosen.memory == 2**30

    assert cli.main(["datasets"]) == 0
    assert isinstance(executors.current_executor(), LocalExecutor)

    monkeypatch.setenv(executors.ADDRESS_ENV, "ray://head:10001")
    monkeypatch.setenv(executors.EXECUTOR_ENV, "ray")
    assert cli.main(["--task-memory", "2", "datasets"]) == 0
    assert executors.current_executor().address == "ray://head:10001"
    assert executors.current_executor().memory == 2 * 2**30

    for argv, message in ((["--executor", "spark", "datasets"], "invalid choice: 'spark'"),
                          (["--executor", "local", "--address", "ray://x:1", "datasets"], "needs --executor ray")):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    monkeypatch.delenv(executors.ADDRESS_ENV)
    with pytest.raises(SystemExit):
        cli.main(["--executor", "ray", "datasets"])
    assert "needs the cluster's address" in capsys.readouterr().err
    monkeypatch.setenv(executors.EXECUTOR_ENV, "spark")
    with pytest.raises(SystemExit):
        cli.main(["datasets"])
    assert "unknown executor 'spark'" in capsys.readouterr().err
