"""Flower ``ServerApp`` (Message API): plain FedAvg, an optional federated StandardScaler, and a server-side log.

The server loop (:func:`serve_fedavg`) is the same whichever runtime delivers its messages (Flower's
deployment engine via :mod:`eegprivacy.federated.apps`, its simulation engine, or the in-process driver): it
wraps the grid it is given in a :class:`RecordingGrid`, which files what an honest-but-curious server sees
each round (who took part, with how many rows, their training loss and, on
request, the weights each client returned) — the view study B's attacks on per-round updates start from.

Strategy: ``flwr.serverapp.strategy.FedAvg`` (weighted by each reply's ``num-examples``) drives the rounds
with its own ``start`` loop and aggregation code. DP enters later by passing a `strategy_factory` that wraps
it (e.g. ``DifferentialPrivacyClientSideFixedClipping``) together with client ``train_mods``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Strategy

from eegprivacy.federated.client_app import CLIENT_INFO

__all__ = ["make_server_app", "serve_fedavg", "fedavg_strategy", "sampling_strategy", "FederationLog",
           "RecordingGrid", "combine_moments"]


def fedavg_strategy(num_clients: int, federated_evaluation: bool = False) -> FedAvg:
    """FedAvg over every client in every round (cross-silo: hospitals do not drop out)."""
    return FedAvg(
        fraction_train=1.0,
        fraction_evaluate=1.0 if federated_evaluation else 0.0,
        min_train_nodes=num_clients,
        min_evaluate_nodes=num_clients if federated_evaluation else 0,
        min_available_nodes=num_clients,
    )


def sampling_strategy(per_round: int, seed: int) -> Callable[[int], FedAvg]:
    """FedAvg sampling `per_round` clients per round (study B). Flower samples with the global `random`, seeded
    here from the run seed when the strategy is built, so the draws repeat for the same node ids
    (``run_fedavg`` restores the caller's stream afterwards)."""

    def factory(num_clients: int) -> FedAvg:
        k = min(int(per_round), num_clients)
        random.seed(int(seed))
        return FedAvg(fraction_train=k / num_clients, fraction_evaluate=0.0, min_train_nodes=k,
                      min_evaluate_nodes=0, min_available_nodes=num_clients)

    return factory


@dataclass
class FederationLog:
    """What the server saw. Clients are partition indices, never names."""

    keep_updates: bool = False
    rounds: dict[int, dict] = field(default_factory=dict)
    updates: dict[int, dict[int, list[np.ndarray]]] = field(default_factory=dict)  # round -> client -> weights
    sent: dict[int, list[np.ndarray]] = field(default_factory=dict)  # round -> global weights sent that round
    feature_mean: np.ndarray | None = None
    feature_scale: np.ndarray | None = None
    final_weights: list[np.ndarray] | None = None

    def history(self) -> list[dict]:
        return [self.rounds[r] for r in sorted(self.rounds)]


class RecordingGrid(Grid):
    """A Grid that forwards everything to `inner` and files train replies in `log`.

    A client error is raised instead of being skipped: FedAvg would otherwise average the remaining
    clients without telling anyone, and a silently smaller federation is a wrong result.
    """

    def __init__(self, inner: Grid, log: FederationLog):
        self.inner = inner
        self.log = log

    def set_run(self, run) -> None:
        self.inner.set_run(run)

    @property
    def run(self):
        return self.inner.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        replies = list(self.inner.send_and_receive(messages, timeout=timeout))
        failed = [m for m in replies if m.has_error()]
        if failed:
            raise RuntimeError(f"{len(failed)} client(s) failed: {failed[0].error.reason}")
        if len(replies) != len(messages):
            raise RuntimeError(f"{len(messages) - len(replies)} client(s) did not reply before the timeout")
        if messages and messages[0].metadata.message_type.split(".")[0] == MessageType.TRAIN:
            # Partition order, whatever order the transport delivered them in: FedAvg's sums then run in the
            # same order on every backend (the in-process driver already replies in this order).
            replies.sort(key=lambda m: int(m.content[CLIENT_INFO]["partition-id"]))
            self._file_train_round(messages, replies)
        elif messages and messages[0].metadata.message_type.split(".")[0] == MessageType.EVALUATE:
            self._file_evaluate_round(messages, replies)
        return replies

    @staticmethod
    def _round_of(msg: Message) -> int:
        return int(next(iter(msg.content.config_records.values()))["server-round"])

    def _file_train_round(self, messages: list[Message], replies: list[Message]) -> None:
        rnd = self._round_of(messages[0])
        rows = []
        for reply in replies:
            content = reply.content
            pid = int(content[CLIENT_INFO]["partition-id"])
            metrics = next(iter(content.metric_records.values()))
            rows.append((pid, int(metrics["num-examples"]), float(metrics.get("train_loss", np.nan))))
            if self.log.keep_updates:
                arrays = next(iter(content.array_records.values()))
                self.log.updates.setdefault(rnd, {})[pid] = arrays.to_numpy_ndarrays()
        rows.sort()
        if self.log.keep_updates:
            self.log.sent[rnd] = next(iter(messages[0].content.array_records.values())).to_numpy_ndarrays()
        self.log.rounds[rnd] = {
            "round": rnd,
            "clients": [r[0] for r in rows],
            "n_examples": [r[1] for r in rows],
            "client_train_loss": [r[2] for r in rows],
        }

    def _file_evaluate_round(self, messages: list[Message], replies: list[Message]) -> None:
        rnd = self._round_of(messages[0])
        metrics = [next(iter(r.content.metric_records.values())) for r in replies]
        n = np.array([m["num-examples"] for m in metrics], dtype=float)
        entry = self.log.rounds.setdefault(rnd, {"round": rnd})
        for key in ("loss", "accuracy"):
            entry[f"eval_{key}"] = float(np.dot(n, [m[key] for m in metrics]) / n.sum())


def combine_moments(n: np.ndarray, means: np.ndarray, m2s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooled mean and standard deviation from per-client (count, mean, sum of squared deviations), the
    parallel-variance combination: equal to StandardScaler on the pooled rows without pooling them."""
    n = np.asarray(n, dtype=float)
    means = np.asarray(means, dtype=float)
    total = n.sum()
    mean = n @ means / total
    m2 = np.asarray(m2s, dtype=float).sum(axis=0) + n @ (means - mean) ** 2
    scale = np.sqrt(m2 / total)
    # A constant feature keeps scale 1, as StandardScaler does.
    scale[scale <= 10 * np.finfo(float).eps * np.maximum(1.0, np.abs(mean))] = 1.0
    return mean, scale


def _federated_standardization(grid: Grid, node_ids: list[int], timeout: float) -> tuple[np.ndarray, np.ndarray]:
    """One query round: each client answers its feature moments; the server combines them."""
    messages = [
        Message(content=RecordDict({"config": ConfigRecord({"statistic": "moments"})}),
                message_type=MessageType.QUERY, dst_node_id=nid)
        for nid in node_ids
    ]
    replies = sorted(grid.send_and_receive(messages, timeout=timeout), key=lambda m: m.metadata.src_node_id)
    metrics = [next(iter(r.content.metric_records.values())) for r in replies]
    return combine_moments([m["num-examples"] for m in metrics], [m["mean"] for m in metrics],
                           [m["m2"] for m in metrics])


def _wait_for_nodes(grid: Grid, num_clients: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {num_clients} clients connected")
        time.sleep(0.1)
    return nodes


def serve_fedavg(grid: Grid, initial_weights: list[np.ndarray], *, num_rounds: int, num_clients: int,
                 local_epochs: int, seed: int, log: FederationLog, standardize: bool = False,
                 federated_evaluation: bool = False, strategy_factory: Callable[[int], Strategy] | None = None,
                 timeout: float = 3600.0) -> FederationLog:
    """The server side of a federation, the one implementation every ServerApp runs: wait for `num_clients`
    nodes, optionally standardise federatedly, run `num_rounds` of FedAvg from `initial_weights`, fill `log`."""
    grid = RecordingGrid(grid, log)
    nodes = _wait_for_nodes(grid, num_clients, timeout)
    config = ConfigRecord({"local-epochs": int(local_epochs), "seed": int(seed)})
    if standardize:
        mean, scale = _federated_standardization(grid, nodes, timeout)
        config["feature-mean"] = mean.tolist()
        config["feature-scale"] = scale.tolist()
        log.feature_mean, log.feature_scale = mean, scale
    evaluate_config = ConfigRecord({k: v for k, v in config.items() if k.startswith("feature-")})
    if strategy_factory is not None:
        strategy = strategy_factory(num_clients)
    else:
        strategy = fedavg_strategy(num_clients, federated_evaluation)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord([np.asarray(w, dtype=float) for w in initial_weights]),
        num_rounds=int(num_rounds),
        timeout=timeout,
        train_config=config,
        evaluate_config=evaluate_config,
    )
    for rnd, metrics in result.train_metrics_clientapp.items():
        if "train_loss" in metrics:
            log.rounds.setdefault(rnd, {"round": rnd})["train_loss"] = float(metrics["train_loss"])
    log.final_weights = result.arrays.to_numpy_ndarrays()
    return log


def make_server_app(initial_weights: list[np.ndarray], *, num_rounds: int, num_clients: int, local_epochs: int,
                    seed: int, log: FederationLog, standardize: bool = False, federated_evaluation: bool = False,
                    strategy_factory: Callable[[int], Strategy] | None = None, timeout: float = 3600.0) -> ServerApp:
    """A ServerApp that runs `num_rounds` of FedAvg from `initial_weights` and fills `log`.

    `log` is filled in the calling process: Flower's simulation runs the ServerApp in a thread of this
    process, and the in-process driver calls it directly.
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        serve_fedavg(grid, initial_weights, num_rounds=num_rounds, num_clients=num_clients,
                     local_epochs=local_epochs, seed=seed, log=log, standardize=standardize,
                     federated_evaluation=federated_evaluation, strategy_factory=strategy_factory,
                     timeout=timeout)

    return app
