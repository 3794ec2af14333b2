"""Study B's Flower apps as module-level objects, so that Flower's deployment engine (``flwr run`` against a
SuperLink with one SuperNode per site) and its simulation engine can load them by name
(``eegprivacy.federated.apps:server_app`` / ``:client_app``; the app project is ``deploy/flower``).

They run the same code as :func:`~eegprivacy.federated.simulation.run_fedavg`: the client handlers of
:func:`~eegprivacy.federated.client_app.add_client_handlers` and the server loop
:func:`~eegprivacy.federated.server_app.serve_fedavg`. What the closures get as Python objects comes here from
Flower's configs instead:

- run config (``[tool.flwr.app.config]``, overridable with ``flwr run --run-config``): the data set and
  paradigm, the model, ε and the clip norm, seeds, rounds, local epochs, clients per round (see
  :class:`StudyBConfig`);
- node config (``flower-supernode --node-config "partition-id=K num-partitions=N"``): which client this node
  is. The node loads the data set from its own disk (``EEGPRIVACY_DATA``), keeps its subject's member trials
  and fits its own CSP on them (:mod:`eegprivacy.federated.cohort`); no trial leaves it.

Given the seeds, a run gives the weights the stage's in-process federation gives: the server draws the
initial weights from ``seed``, client k's local training in round r is seeded by (seed, k, r), and the server
aggregates replies in partition order. The ServerApp logs each round and, when ``output-dir`` is set, writes
``summary.json`` (per-round partition indices, example counts, losses) and ``final_weights.npz`` there, on
the SuperLink's machine; nothing names a subject.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from eegprivacy.federated.client_app import add_client_handlers
from eegprivacy.federated.server_app import FederationLog, sampling_strategy, serve_fedavg

__all__ = ["server_app", "client_app", "StudyBConfig"]


@dataclass(frozen=True)
class StudyBConfig:
    """One study-B federation as Flower's run config spells it (kebab-case keys, see ``deploy/flower``)."""

    dataset: str = "eegmat"
    dataset_kwargs: dict = field(default_factory=dict)  # run config: a JSON object string
    paradigm: str = "recording_label"
    balance: bool = True
    epoch_s: float = 4.0
    resample: float = 128.0
    tmin: float = 0.0  # motor imagery: seconds from the cue to the epoch's start
    l_freq: float = 0.0  # motor imagery band-pass in Hz; 0 and 0 keep the paradigm's default (8-32 Hz)
    h_freq: float = 0.0
    model: str = "simplenet"
    # EEGNet's BatchNorm running statistics: "local" (FedBN: each node keeps its own, nothing un-noised travels)
    # or "shared" (averaged with the weights, un-noised: no DP guarantee then)
    batchnorm_stats: str = "local"
    epsilon: float = math.inf  # per local optimiser step; inf = no DP
    clip_norm: float = 1.0
    seed: int = 0
    split_seed: int = 0  # the member split's seed as is (the sweep's run s uses splits.run_split_seed(base, s))
    test_size: float = 0.2
    csp_components: int = 4
    num_server_rounds: int = 10
    local_epochs: int = 10
    clients_per_round: int = 8
    num_clients: int = 36  # SuperNodes the server waits for (eegmat: one per subject)
    learning_rate: float = 1e-3
    batch_size: int = 32
    node_timeout_s: float = 3600.0
    output_dir: str = ""

    @classmethod
    def from_run_config(cls, run_config) -> StudyBConfig:
        """Read the known keys; an unknown key is an error (a typo would otherwise run the defaults)."""
        names = {f.replace("_", "-"): f for f in cls.__dataclass_fields__}
        unknown = sorted(set(run_config) - set(names))
        if unknown:
            raise ValueError(f"unknown run-config key(s) {unknown}; known: {sorted(names)}")
        values = {names[k]: v for k, v in run_config.items()}
        if isinstance(values.get("dataset_kwargs"), str):
            values["dataset_kwargs"] = json.loads(values["dataset_kwargs"] or "{}")
        out = cls(**values)
        for name in ("seed", "split_seed", "csp_components", "num_server_rounds", "local_epochs",
                     "clients_per_round", "num_clients", "batch_size"):
            object.__setattr__(out, name, int(getattr(out, name)))
        for name in ("epoch_s", "resample", "tmin", "l_freq", "h_freq", "epsilon", "clip_norm", "test_size",
                     "learning_rate", "node_timeout_s"):
            object.__setattr__(out, name, float(getattr(out, name)))
        return out

    def trials_spec(self) -> dict:
        """The data set's entry as ``params/federated_mia.yaml`` spells it (for :func:`cohort.load_trials`)."""
        spec = {"paradigm": self.paradigm, "balance": self.balance, "epoch_s": self.epoch_s,
                "resample": self.resample, "dataset": dict(self.dataset_kwargs)}
        if self.paradigm == "left_right_imagery":
            spec["tmin"] = self.tmin
            if self.l_freq or self.h_freq:
                spec["band"] = [self.l_freq, self.h_freq]
        return spec

    def task(self):
        """The study's TorchTask on this model's CSP input, with the Laplace gradient DP step when ε is finite."""
        from eegprivacy.federated.cohort import model_input_shape
        from eegprivacy.federated.dp import LaplaceGradientDP
        from eegprivacy.federated.torch_task import TorchTask

        dp = LaplaceGradientDP(self.clip_norm, self.epsilon) if math.isfinite(self.epsilon) else None
        shape = model_input_shape(self.model, self.csp_components, self.epoch_s, self.resample)
        return TorchTask(self.model, shape, learning_rate=self.learning_rate, batch_size=self.batch_size, dp=dp,
                         batchnorm_stats=self.batchnorm_stats)


# -- ClientApp ----------------------------------------------------------------------------------------------
# A SuperNode may serve many messages from one process; the partition and task are built once per
# (run config, partition) there, and rebuilt identically wherever a fresh process answers.
_cache: dict[tuple, object] = {}


def _key(context: Context) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in context.run_config.items()))


def _task(context: Context):
    key = ("task", *_key(context))
    if key not in _cache:
        _cache[key] = StudyBConfig.from_run_config(context.run_config).task()
    return _cache[key]


def _partition(context: Context) -> tuple[int, np.ndarray, np.ndarray]:
    pid = int(context.node_config["partition-id"])
    key = ("partition", pid, *_key(context))
    if key not in _cache:
        _cache[key] = _load_partition(StudyBConfig.from_run_config(context.run_config), pid,
                                      int(context.node_config.get("num-partitions", -1)))
    return _cache[key]


def _load_partition(cfg: StudyBConfig, pid: int, num_partitions: int) -> tuple[int, np.ndarray, np.ndarray]:
    """This node's member trials after its own CSP, flattened to rows (the stage's ``Federation.partitions``)."""
    from eegprivacy.federated.cohort import client_data, load_trials
    from eegprivacy.federated.splits import member_split
    from eegprivacy.signal.csp import MODEL_INPUT

    _, trials = load_trials(cfg.dataset, cfg.trials_spec())
    subjects = trials.subjects()
    if num_partitions not in (-1, len(subjects)) or not 0 <= pid < len(subjects):
        raise ValueError(f"node config partition-id={pid} num-partitions={num_partitions} does not fit "
                         f"{cfg.dataset}'s {len(subjects)} subjects (one partition per subject)")
    mine = trials.subject(subjects[pid])  # the split is seeded per subject: the same rows as the stage's
    member = member_split(mine.y, mine.metadata["subject"], cfg.test_size, cfg.split_seed)
    X, y, _, _ = client_data(mine, member, subjects[pid], MODEL_INPUT[cfg.model], cfg.csp_components)
    return pid, X.reshape(len(X), -1), y


client_app = add_client_handlers(ClientApp(), _task, _partition)


# -- ServerApp ----------------------------------------------------------------------------------------------
server_app = ServerApp()


@server_app.main()
def _serve(grid: Grid, context: Context) -> None:
    cfg = StudyBConfig.from_run_config(context.run_config)
    task = cfg.task()
    federation = serve_fedavg(grid, task.initial_weights(cfg.seed), num_rounds=cfg.num_server_rounds,
                              num_clients=cfg.num_clients, local_epochs=cfg.local_epochs, seed=cfg.seed,
                              log=FederationLog(), strategy_factory=sampling_strategy(cfg.clients_per_round, cfg.seed),
                              timeout=cfg.node_timeout_s)
    history = federation.history()
    for row in history:
        log(logging.INFO, "study B round %d: clients %s, train_loss %.6f", row["round"], row["clients"],
            row.get("train_loss", float("nan")))
    if cfg.output_dir:
        write_summary(Path(cfg.output_dir), cfg, history, federation.final_weights)


def write_summary(folder: Path, cfg: StudyBConfig, history: list[dict], weights: list[np.ndarray]) -> None:
    """``summary.json`` (config, per-round history) and ``final_weights.npz`` (arrays in the task's order)."""
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "final_weights.npz", *weights)
    config = {k: (v if not (isinstance(v, float) and math.isinf(v)) else "inf") for k, v in asdict(cfg).items()}
    summary = {"config": config, "rounds": history, "num_rounds_completed": len(history)}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
