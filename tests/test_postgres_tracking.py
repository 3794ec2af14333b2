"""Tracking and search on PostgreSQL, on loopback, as real processes: a throwaway PostgreSQL
(:mod:`eegprivacy.tracking.postgres`) is the backend store of an ``mlflow server`` (artifacts served by it) and
the Optuna storage of two concurrent ``eegprivacy optuna-study-a`` worker processes on one study, each logging to
the server over HTTP, as on several machines (README "Running across machines").

Checked through Optuna's storage and the server's REST API only: the study holds exactly ``n_trials`` COMPLETE
trials numbered 0..n-1 (none lost, none duplicated, no overshoot), both workers ran some, every trial is exactly
one MLflow child run (under the parent of the worker that ran it) with its number and values, each worker
re-evaluated a front (one more child per front trial, param ``phase`` reevaluation), and the
PostgreSQL password (given to the workers in the URL, to the server in a pgpass file) shows up nowhere.

Skips only without PostgreSQL's server binaries (``.ci/run`` installs them when it runs as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _mlflow_server import free_port, ui, wait_healthy
from test_optuna_study_a import CONFIG

from eegprivacy.pipeline.search import public_url
from eegprivacy.tracking import EXPERIMENTS
from eegprivacy.tracking.postgres import LocalPostgres, PostgresNotFound, find_bin_dir

REPO = Path(__file__).resolve().parents[1]
N_TRIALS = 12
WORKERS = 2


class _Secret(str):
    """A string that pytest's failure reports show as ``***`` (the throwaway password, the URL holding it)."""

    def __repr__(self) -> str:
        return "'***'"


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    try:
        find_bin_dir()
    except PostgresNotFound as err:
        pytest.skip(f"{err} (.ci/run installs the Debian package when it runs as root)")
    with LocalPostgres(tmp_path_factory.mktemp("postgres")) as server:
        yield server


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    process.kill()  # a no-op once it has exited
    process.wait()


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory):
    """``mlflow server`` on PostgreSQL (password from the pgpass file, not the URL) with served artifacts. Not
    waited for here: its schema migrations take ~20 s, which the workers' start-up overlaps (``ready()``)."""
    folder = tmp_path_factory.mktemp("mlflow-pg")
    port, stderr = free_port(), folder / "server.stderr"
    command = [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri", postgres.url("mlflow"),
               "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]
    with open(stderr, "wb") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                   env={**postgres.env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        yield {"base": base, "stderr": stderr, "ready": lambda: wait_healthy(base, process, stderr, timeout=150)}
    finally:
        _stop(process)


def _run_together(commands: list[list[str]], folder: Path, env: dict, before_go=lambda: None) -> list[tuple]:
    """Run each command in its own tests/_optuna_worker.py process, all released at once (after ``before_go``)
    once every one has started up; returns (pid, output) of each, each having exited 0."""
    go, workers, logs = folder / "go", [], [folder / f"worker{i}.log" for i in range(len(commands))]
    env = {k: v for k, v in env.items() if k != "PGPASSFILE"}
    for i, command in enumerate(commands):
        with open(logs[i], "wb") as log:
            workers.append(subprocess.Popen([sys.executable, str(REPO / "tests" / "_optuna_worker.py"),
                                             str(folder / f"ready{i}"), str(go), "--", *command],
                                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO))
    try:
        deadline = time.monotonic() + 120
        while not all((folder / f"ready{i}").exists() for i in range(len(commands))):
            assert time.monotonic() < deadline and all(w.poll() is None for w in workers), \
                [log.read_text()[-2000:] for log in logs]
            time.sleep(0.1)
        before_go()
        go.touch()
        codes = [w.wait(timeout=240) for w in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                _stop(worker)
    output = [log.read_text() for log in logs]
    assert codes == [0] * len(commands), output
    return [(w.pid, text) for w, text in zip(workers, output)]


@pytest.fixture(scope="module")
def search(postgres, server, synthetic_features_dir, tmp_path_factory):
    """Two workers started together on one study (the name each derives from the same config and data)."""
    import optuna

    folder = tmp_path_factory.mktemp("workers")
    params = folder / "optuna.yaml"
    params.write_text(yaml.safe_dump({"optuna_study_a": {**CONFIG, "n_trials": N_TRIALS}}))
    url = _Secret(postgres.url("optuna", password=True))  # in the URL, not a pgpass file: the masking is under test
    features = synthetic_features_dir("synthetic_rest_task")
    commands = [["optuna-study-a", "--params", str(params), "--storage", url, "--no-progress", "--features-dir",
                 str(features), "--metrics", str(folder / f"worker{i}" / "front.json"),
                 "--trials-csv", str(folder / f"worker{i}" / "trials.csv"),
                 "--figure", str(folder / f"worker{i}" / "pareto.png")] for i in range(WORKERS)]
    pids, logs = zip(*_run_together(commands, folder, {**os.environ, "MLFLOW_TRACKING_URI": server["base"]},
                                    server["ready"]))
    fronts = [json.loads((folder / f"worker{i}" / "front.json").read_text()) for i in range(WORKERS)]
    name = fronts[0]["study_name"]
    assert all(f["study_name"] == name for f in fronts)
    study = optuna.load_study(study_name=name, storage=url)
    experiment = ui.experiment_id(server["base"], EXPERIMENTS["a"])
    return {"url": url, "password": _Secret(postgres.password), "study": study, "pids": pids, "logs": logs,
            "folder": folder, "base": server["base"], "experiment": experiment,
            "runs": ui.search_runs(server["base"], experiment)}


def _split(runs, phase="search"):
    """(parents, children of ``phase``: search = one per trial, reevaluation = one per re-evaluated front trial)."""
    parents = [r for r in runs if "mlflow.parentRunId" not in ui.run_tags(r)]
    children = [r for r in runs if "mlflow.parentRunId" in ui.run_tags(r) and _params(r).get("phase") == phase]
    return parents, children


def _params(run) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def test_study_holds_exactly_the_target(search):
    import optuna

    trials = search["study"].get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(N_TRIALS))  # none lost, none duplicated, no overshoot
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}


def test_both_workers_ran_trials(search):
    parents, children = _split(search["runs"])
    assert len(parents) == WORKERS
    by_pid = {int(ui.run_tags(p)["owner_pid"]): p for p in parents}
    assert sorted(by_pid) == sorted(search["pids"])  # one parent per worker process
    counts, complete = {}, {}
    for pid, parent in by_pid.items():
        mine = [c for c in children if ui.run_tags(c)["mlflow.parentRunId"] == parent["info"]["run_id"]]
        assert {ui.run_tags(c)["owner_pid"] for c in mine} == {str(pid)}  # logged by the process that ran it
        metrics = {m["key"]: m["value"] for m in parent["data"]["metrics"]}
        assert metrics["new_trials"] == len(mine)
        counts[pid], complete[pid] = len(mine), metrics["n_trials"]
    assert all(n > 0 for n in counts.values()) and sum(counts.values()) == N_TRIALS, counts
    # each summarises the study as it stood when it finished: the last one to finish saw every worker's trials
    assert max(complete.values()) == N_TRIALS and min(complete.values()) >= max(counts.values())
    print(f"trials per worker: {sorted(counts.values())}, total {sum(counts.values())}")


def test_every_trial_is_one_child_run(search):
    _, children = _split(search["runs"])
    assert all(c["info"]["status"] == "FINISHED" for c in children)
    by_number = {int(_params(c)["trial_number"]): c for c in children}
    assert len(by_number) == len(children) == N_TRIALS
    for trial in search["study"].get_trials(deepcopy=False):
        child = by_number[trial.number]
        params = _params(child)
        assert params["study_name"] == search["study"].study_name and params["mechanism"] == trial.params["mechanism"]
        assert float(params["epsilon"]) == pytest.approx(trial.params["epsilon"])
        metrics = {m["key"]: m["value"] for m in child["data"]["metrics"]}
        assert [metrics["auroc_minus_null"], metrics["top1_accuracy"]] == pytest.approx(trial.values)


def test_each_worker_reevaluated_a_front(search):
    parents, reevaluations = _split(search["runs"], "reevaluation")
    numbers = {t.number for t in search["study"].get_trials(deepcopy=False)}
    for parent in parents:  # each worker re-evaluates the front of the study as it stood when it finished
        mine = [r for r in reevaluations if ui.run_tags(r)["mlflow.parentRunId"] == parent["info"]["run_id"]]
        assert mine and {int(_params(r)["trial_number"]) for r in mine} <= numbers


def test_artifacts_are_served(search):
    experiment = ui.rest(search["base"], f"/api/2.0/mlflow/experiments/get?experiment_id={search['experiment']}")
    assert experiment["experiment"]["artifact_location"].startswith("mlflow-artifacts:")
    parents, _ = _split(search["runs"])
    for parent in parents:
        listing = ui.rest(search["base"], f"/api/2.0/mlflow/artifacts/list?run_id={parent['info']['run_id']}")
        assert {"front.json", "trials.csv", "pareto.png"} <= {f["path"] for f in listing["files"]}


def test_password_reaches_neither_mlflow_nor_outputs(search, server):
    password = search["password"]
    assert len(password) >= 20 and password in search["url"]
    parents, _ = _split(search["runs"])
    for parent in parents:
        storage = [v for k, v in _params(parent).items() if k.endswith("storage")]
        assert storage == [public_url(search["url"])] and "***" in storage[0]
    assert password not in json.dumps(search["runs"])  # every param, tag, metric and input of every run
    outputs = [p.read_text(errors="replace") for p in search["folder"].rglob("*") if p.suffix in (".json", ".csv")]
    for text in (*outputs, *search["logs"], server["stderr"].read_text(errors="replace")):
        assert password not in text


def test_throwaway_server_is_loopback_only_and_needs_the_password(postgres):
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    conf = (postgres.data_dir / "postgresql.conf").read_text()
    assert "listen_addresses = '127.0.0.1'" in conf and "unix_socket_directories = ''" in conf
    assert (postgres.pgpass.stat().st_mode & 0o077) == 0  # libpq ignores a pgpass others can read
    engine = create_engine(postgres.url("optuna"), connect_args={"passfile": str(postgres.folder / "no-pgpass")})
    with pytest.raises(OperationalError, match="password"):
        engine.connect()
    engine.dispose()
    engine = create_engine(postgres.url("optuna", password=True))
    with engine.connect() as connection:
        assert connection.execute(text("select current_database()")).scalar() == "optuna"
    engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_workers_stop_exactly_at_the_target(backend, tmp_path, request):
    """Two processes released together on a 0.25-s objective: exactly the target, each having run some. Optuna's
    MaxTrialsCallback alone overshoots here (each worker checks the count after its own trial, then starts
    another while the other's is in flight); search.optimize_to_target creates trials under a database lock."""
    import optuna

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'toy.db'}"
    else:
        url = _Secret(request.getfixturevalue("postgres").url("optuna", password=True))
    n = 8
    output = _run_together([["toy", url, f"toy-{backend}", str(n), str(seed)] for seed in range(2)], tmp_path,
                           dict(os.environ))
    started = [int(text.rsplit("started ", 1)[1].split()[0]) for _, text in output]
    trials = optuna.load_study(study_name=f"toy-{backend}", storage=url).get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(n))
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    assert sum(started) == n and min(started) > 0, started
