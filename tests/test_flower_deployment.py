"""Study B's module-level Flower apps (``eegprivacy.federated.apps``, app project ``deploy/flower``) under Flower's
own runtimes: the deployment engine (a SuperLink and three SuperNodes as separate processes on 127.0.0.1,
``flwr run --stream``) with the DP path on, checked against the stage's in-process federation; and the
simulation engine (a SuperLink in simulation mode) running the same FAB.

Everything Flower writes goes to the test's tmp folder (FLWR_HOME, the SuperLink database, the logs, the
ServerApp's summary); every process started here, and whatever it started, is ended when the test ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

APP = REPO / "deploy" / "flower"
BIN = Path(sys.executable).parent  # the venv's flwr, flower-superlink, flower-supernode, flower-superexec

pytestmark = pytest.mark.slow

N_CLIENTS = 3
ROUNDS = 2
# A tiny SYNTHETIC motor-imagery cohort (one client per subject), as in tests/test_federated_mia_stage.py.
SPEC = {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
        "dataset": {"n_subjects": N_CLIENTS, "n_sessions": 1, "n_runs": 1, "n_trials_per_class": 10, "seed": 0}}
PARAMS = {"clip_norm": 1.0, "learning_rate": 0.001, "batch_size": 32, "num_rounds": ROUNDS, "local_epochs": 1,
          "clients_per_round": 8, "test_size": 0.2, "split_seed": 0, "csp_components": 4}
EPSILON, SEED = 1.0, 3


def _run_config(output_dir: Path) -> str:
    """The run-config overrides as a TOML file (``flwr run --run-config <file>``)."""
    values = {
        "dataset": "synthetic_mi", "dataset-kwargs": json.dumps(SPEC["dataset"]), "paradigm": SPEC["paradigm"],
        "epoch-s": SPEC["epoch_s"], "resample": SPEC["resample"], "model": "simplenet", "epsilon": EPSILON,
        "clip-norm": PARAMS["clip_norm"], "seed": SEED, "split-seed": PARAMS["split_seed"],
        "test-size": PARAMS["test_size"], "csp-components": PARAMS["csp_components"],
        "num-server-rounds": ROUNDS, "local-epochs": PARAMS["local_epochs"],
        "clients-per-round": PARAMS["clients_per_round"], "num-clients": N_CLIENTS,
        "learning-rate": PARAMS["learning_rate"], "batch-size": PARAMS["batch_size"], "node-timeout-s": 120.0,
        "output-dir": str(output_dir),
    }
    return "".join(f"{k} = {json.dumps(v) if isinstance(v, str) else repr(v)}\n" for k, v in values.items())


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


class Processes:
    """Processes started in their own process groups; ``stop`` ends them and every descendant.

    Flower's SuperLink and SuperNodes start their SuperExec detached (a session of its own), which starts the
    ServerApp/ClientApp processes, so a process group alone does not reach them: descendants are collected
    (psutil) before anything is signalled.
    """

    def __init__(self, folder: Path, env: dict):
        self.folder, self.env = folder, env
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(BIN / args[0]), *args[1:]], env=self.env, cwd=self.folder, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append((proc, log))
        return proc, log

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}" for _, log in self.procs)

    def stop(self) -> None:
        import psutil

        family = []
        for proc, _ in self.procs:
            try:
                family += psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for proc, _ in reversed(self.procs):  # SuperNodes first, then the SuperLink
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for child in family:
            try:
                child.terminate()
            except psutil.NoSuchProcess:
                pass
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        _, alive = psutil.wait_procs(family, timeout=10)
        for child in alive:
            child.kill()
        psutil.wait_procs(alive, timeout=10)


@pytest.fixture
def flower(tmp_path):
    """``(processes, env, folder)``: FLWR_HOME and all state under tmp, telemetry off, this checkout's code
    first on the path of every Flower process; all processes ended afterwards, whatever happened."""
    folder = tmp_path / "flower"
    (folder / "home").mkdir(parents=True)
    env = dict(os.environ, FLWR_HOME=str(folder / "home"), FLWR_TELEMETRY_ENABLED="0",
               FLWR_DISABLE_UPDATE_CHECK="1", FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.2",  # 1 s by default
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    processes = Processes(folder, env)
    try:
        yield processes, env, folder
    finally:
        processes.stop()


def _connection(folder: Path, name: str, port: int) -> None:
    """A SuperLink connection in FLWR_HOME's config.toml, where Flower 1.42 reads them (not pyproject.toml)."""
    (folder / "home" / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')


def _flwr_run(env: dict, folder: Path, connection: str, *extra: str, timeout: float = 240.0):
    overrides = folder / "run_config.toml"
    overrides.write_text(_run_config(folder / "out"))
    return subprocess.run([str(BIN / "flwr"), "run", str(APP), connection, "--run-config", str(overrides),
                           "--stream", *extra], env=env, cwd=folder, capture_output=True, text=True,
                          timeout=timeout)


def _run_status(env: dict, folder: Path, connection: str) -> list[dict]:
    out = subprocess.run([str(BIN / "flwr"), "ls", connection, "--format", "json"], env=env, cwd=folder,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["runs"]


def _stage_federation():
    """The same cell through the stage's own code: Federation (per-client CSP) and federate (run_fedavg)."""
    import dataclasses

    from eegprivacy.federated.splits import member_split
    from eegprivacy.studies.federated import mia
    from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig

    _, trials = mia.load_trials("synthetic_mi", DatasetSpec.from_mapping(SPEC))
    member = member_split(trials.y, trials.metadata["subject"], PARAMS["test_size"], PARAMS["split_seed"])
    fed = mia.Federation(trials, member, "logvar", PARAMS["csp_components"])
    shipped = FederatedMIAConfig.load(REPO / "params/federated_mia.yaml", "federated_mia")
    config = dataclasses.replace(shipped, **PARAMS)  # the shipped knobs with this test's (attack rounds unused)
    _, result = mia.federate({"model": "simplenet", "epsilon": EPSILON}, SEED, fed, config)
    return result


def _check_summary(folder: Path) -> tuple[dict, list[np.ndarray]]:
    summary = json.loads((folder / "out" / "summary.json").read_text())
    assert summary["num_rounds_completed"] == ROUNDS
    assert [r["round"] for r in summary["rounds"]] == list(range(1, ROUNDS + 1))
    assert all(r["clients"] == list(range(N_CLIENTS)) for r in summary["rounds"])  # 3 clients every round
    assert summary["config"]["epsilon"] == EPSILON and summary["config"]["dataset"] == "synthetic_mi"
    with np.load(folder / "out" / "final_weights.npz") as npz:
        weights = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    return summary, weights


def test_deployment_engine_runs_study_b_like_the_stage(flower, torch_one_thread):
    """SuperLink + 3 SuperNodes (separate processes), `flwr run` for 2 rounds with ε = 1: the run completes,
    every round trains all 3 partitions, and the final weights equal the stage's in-process federation's."""
    processes, env, folder = flower
    link_port, *node_ports = _free_ports(1 + N_CLIENTS)
    link, link_log = processes.start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1",
                                     "--port", str(link_port), "--database", str(folder / "superlink.db"),
                                     "--disable-runtime-dependency-installation")
    _wait_for_port(link_port, link, link_log)
    for k, port in enumerate(node_ports):
        processes.start(f"supernode{k}", "flower-supernode", "--insecure", "--superlink",
                        f"127.0.0.1:{link_port}", "--port", str(port),
                        "--node-config", f"partition-id={k} num-partitions={N_CLIENTS}")
    _connection(folder, "local-deployment", link_port)

    run = _flwr_run(env, folder, "local-deployment")
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{processes.logs()}"
    streamed = run.stdout + run.stderr
    assert "Successfully started run" in streamed
    for rnd in range(1, ROUNDS + 1):
        assert f"[ROUND {rnd}/{ROUNDS}]" in streamed
        assert f"study B round {rnd}: clients [0, 1, 2]" in streamed
    assert f"Received {N_CLIENTS} results and 0 failures" in streamed
    # A DP client sends its noised weights and its size only (issue 20): no gradient norm, no loss reaches the
    # server; that the Laplace DP step ran shows in the weights, bit-identical to the stage's DP federation below.
    assert "grad_norm_mean" not in streamed
    runs = _run_status(env, folder, "local-deployment")
    assert len(runs) == 1 and runs[0]["status"] == "finished:completed", runs
    summary, weights = _check_summary(folder)

    expected = _stage_federation()
    assert len(weights) == len(expected.weights)
    # Same seeds, same partitions, replies aggregated in partition order: bit-identical.
    assert all(np.array_equal(w, e) for w, e in zip(weights, expected.weights))
    assert not any("train_loss" in r for r in summary["rounds"])  # un-noised: stays on the DP clients
    assert [r["n_examples"] for r in summary["rounds"]] == [h["n_examples"] for h in expected.history]


def test_simulation_engine_runs_the_same_apps(flower):
    """The same FAB on a SuperLink in simulation mode (Flower's simulation engine, 3 virtual SuperNodes)."""
    processes, env, folder = flower
    (port,) = _free_ports(1)
    link, link_log = processes.start("superlink", "flower-superlink", "--insecure", "--simulation", "--host",
                                     "127.0.0.1", "--port", str(port), "--database", str(folder / "superlink.db"),
                                     "--disable-runtime-dependency-installation")
    _wait_for_port(port, link, link_log)
    _connection(folder, "local-simulation", port)
    run = _flwr_run(env, folder, "local-simulation", "--federation-config",
                    f"num-supernodes={N_CLIENTS} init-args-num-cpus=2 client-resources-num-cpus=1")
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{processes.logs()}"
    assert f"study B round {ROUNDS}: clients [0, 1, 2]" in run.stdout + run.stderr
    _check_summary(folder)
    assert "train_loss" not in json.loads((folder / "out" / "summary.json").read_text())["rounds"][-1]
