"""Run a federation: one function, two backends that execute the same ServerApp and ClientApp.

- ``backend="flower"``: Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend, one
  virtual SuperNode per partition). ``run_simulation`` is marked deprecated in Flower 1.42 in favour of
  ``flwr run``, which packages the app as a FAB and submits it to a SuperLink; that route cannot hand
  in-memory partitions to the clients or return the final weights to the caller, so this backend keeps the
  Python entry point. Both apps use the current Message API (``ServerApp`` main + ``Grid`` + ``ArrayRecord``,
  ``flwr.serverapp.strategy.FedAvg``); :mod:`eegprivacy.federated.apps` wraps the same handlers and server
  loop as module-level apps for ``flwr run`` (``deploy/flower``), which read their data from each node's disk.
- ``backend="inprocess"``: :class:`InProcessGrid`, a Flower ``Grid`` that delivers each message straight to
  the ClientApp in this process. The ServerApp's main function, FedAvg's ``start`` loop and its aggregation
  code all run unchanged; only the transport differs. No threads, no polling, no serialisation beyond
  Flower's own records, replies in node order: deterministic, and fast enough for the thousands of small
  federations study A runs inside leave-one-patient-out loops.

Both backends give the same final weights: the server aggregates train replies in partition order, whatever
order they arrive in; ``tests/test_federated.py`` checks it.

Flower's INFO chatter is dropped and two expected notices are filtered (that deprecation, and "evaluation
skipped" for ``fraction_evaluate=0``); every other warning or error still shows.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import random
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from eegprivacy.federated.client_app import (DIAGNOSTICS, LOCAL_STATE, clear_primed, context_partition,
                                             make_client_app, partition_loader, prime_train_result, train_job)
from eegprivacy.federated.server_app import FederationLog, make_server_app
from eegprivacy.federated.task import Task

__all__ = ["run_fedavg", "FederationResult", "InProcessGrid", "BACKENDS"]

BACKENDS = ("inprocess", "flower")
SERVER_NODE_ID = 1  # Flower's SUPERLINK_NODE_ID: the sender of every server message
_NODE_ID_OFFSET = 1_000  # in-process node ids: offset + partition index
_run_ids = itertools.count(1)

# Expected notices, filtered so thousands of federations do not repeat them; any other warning still shows.
_EXPECTED_NOTICES = (
    "`run_simulation` function is deprecated",  # see the module docstring
    "Federated evaluation will be skipped",  # fraction_evaluate=0 is the design, not an accident
)


@dataclass
class FederationResult:
    """Final global weights and what the server recorded, per round.

    `history`: one dict per round — ``round``, ``train_loss`` (FedAvg's num-examples-weighted mean of the
    clients' last-epoch losses), ``clients`` (partition indices), ``n_examples`` and ``client_train_loss``
    per client (and ``eval_loss``/``eval_accuracy`` with federated evaluation).
    `updates[r][c]`: weights client c returned in round r; `sent[r]`: global weights it started from (both
    only with ``keep_updates=True``).
    Experimenter-side, never seen by the server (in-process backend only; None with ``flower``):
    `local_states[r][c]`: client c's local state (FedBN's BatchNorm statistics) after its training in round r,
    `initial_local`: every client's state before its first round; `diagnostics[r][c]`: its train metrics (last
    epoch loss, pre-clip gradient norms), which a DP client does not send.
    """

    weights: list[np.ndarray]
    history: list[dict]
    num_clients: int
    n_examples: list[int]
    seed: int
    backend: str
    feature_mean: np.ndarray | None = None
    feature_scale: np.ndarray | None = None
    updates: dict[int, dict[int, list[np.ndarray]]] | None = None
    sent: dict[int, list[np.ndarray]] | None = None
    local_states: dict[int, dict[int, list[np.ndarray]]] | None = None
    initial_local: list[np.ndarray] | None = None
    diagnostics: dict[int, dict[int, dict[str, float]]] | None = None

    def local_state(self, client: int, rnd: int | None = None) -> list[np.ndarray] | None:
        """Client `client`'s local state after round `rnd` (default: the last): from the last round it trained in
        up to `rnd`, else its initial state. None when the task keeps nothing local."""
        if self.initial_local is None:
            return None
        if self.local_states is None:
            raise ValueError("client-local state is only kept by the in-process backend")
        last = max(self.local_states, default=0) if rnd is None else int(rnd)
        joined = [r for r, states in self.local_states.items() if r <= last and client in states]
        return self.local_states[max(joined)][client] if joined else self.initial_local

    def update(self, rnd: int, client: int) -> list[np.ndarray]:
        """Client `client`'s model delta in round `rnd` (returned minus received weights)."""
        if self.updates is None or self.sent is None:
            raise ValueError("run with keep_updates=True to keep per-round client updates")
        return [w - g for w, g in zip(self.updates[rnd][client], self.sent[rnd])]


class InProcessGrid(Grid):
    """A Flower Grid whose nodes are one ClientApp called in this process, node i holding partition i.

    Each node gets its own Context (``partition-id``, ``num-partitions``, a persistent ``state``) as in
    Flower's simulation, and each message is delivered as its own copy, as a real transport would.

    Batched rounds: given the `task` and `partition` (``context -> (partition_id, X, y)``) the ClientApp serves,
    and when the task has ``train_many``, a delivery of several train messages first trains every recipient at
    once — ``train_batcher(task, jobs)`` (default ``task.train_many(jobs)``), jobs from
    :func:`~eegprivacy.federated.client_app.train_job` — and primes each node's handler with its result. The
    messages are then delivered one by one as before (mods, replies, local state, diagnostics unchanged); a
    handler whose input no longer matches its primed job (a mod changed it) trains on its own.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_id: int | None = None, *, task=None,
                 partition: Callable | None = None, train_batcher: Callable | None = None):
        self.client_app = client_app
        self.task, self.partition = task, partition
        self.train_batcher = train_batcher
        self._run = Run.create_empty(run_id if run_id is not None else next(_run_ids))
        self._contexts = {
            _NODE_ID_OFFSET + p: Context(run_id=self._run.run_id, node_id=_NODE_ID_OFFSET + p,
                                         node_config={"partition-id": p, "num-partitions": num_nodes},
                                         state=RecordDict(), run_config={})
            for p in range(num_nodes)
        }
        self._message_ids = itertools.count(1)
        self._outbox: list[Message] = []
        self.local_states: dict[int, dict[int, list[np.ndarray]]] = {}
        self.diagnostics: dict[int, dict[int, dict[str, float]]] = {}

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self._outbox = self._deliver(messages)
        return [m.metadata.reply_to_message_id for m in self._outbox]

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        wanted = set(message_ids)
        return [m for m in self._outbox if m.metadata.reply_to_message_id in wanted]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._deliver(messages)

    def _deliver(self, messages: Iterable[Message]) -> list[Message]:
        copies = []
        for msg in messages:
            msg = copy.deepcopy(msg)  # FedAvg shares one RecordDict between all its messages of a round
            # Flower's runtimes assign the id on push the same way (there is no public setter).
            msg.metadata.__dict__["_message_id"] = str(next(self._message_ids))
            copies.append(msg)
        primed = self._prime(copies)
        replies = []
        try:
            for msg in copies:
                context = self._contexts[msg.metadata.dst_node_id]
                replies.append(self.client_app(msg, context))
                self._observe(msg, context)
        finally:
            for context in primed:
                clear_primed(context)
        return sorted(replies, key=lambda m: m.metadata.src_node_id)  # node order: deterministic FedAvg sums

    def _prime(self, messages: list[Message]) -> list[Context]:
        """Train the recipients of several train messages in one batched call; the contexts it primed."""
        task = self.task
        if task is None or self.partition is None or not callable(getattr(task, "train_many", None)):
            return []
        train = [m for m in messages if m.metadata.message_type.split(".")[0] == "train"]
        contexts = [self._contexts[m.metadata.dst_node_id] for m in train]
        if len(train) < 2 or len({id(c) for c in contexts}) != len(contexts):
            return []
        jobs = [train_job(task, m, c, self.partition) for m, c in zip(train, contexts)]
        batcher = self.train_batcher or (lambda t, js: t.train_many(js))
        results = list(batcher(task, jobs))
        if len(results) != len(jobs):
            raise RuntimeError(f"train_batcher returned {len(results)} results for {len(jobs)} jobs")
        for context, job, result in zip(contexts, jobs, results):
            prime_train_result(context, job, result)
        return contexts


    def _observe(self, msg: Message, context: Context) -> None:
        """Experimenter-side copy of what a client keeps after a train message (its local state and its train
        diagnostics); the server never sees these."""
        if msg.metadata.message_type.split(".")[0] != "train":
            return
        rnd = int(next(iter(msg.content.config_records.values()))["server-round"])
        pid = int(context.node_config["partition-id"])
        if LOCAL_STATE in context.state:
            self.local_states.setdefault(rnd, {})[pid] = context.state[LOCAL_STATE].to_numpy_ndarrays()
        if DIAGNOSTICS in context.state:
            self.diagnostics.setdefault(rnd, {})[pid] = dict(context.state[DIAGNOSTICS])


@contextmanager
def _flower_output(verbose: bool):
    """Flower logs every round at INFO; keep WARNING and above, minus the expected notices."""
    logger = logging.getLogger("flwr")
    if verbose:
        yield
        return

    def expected(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(notice in message for notice in _EXPECTED_NOTICES)

    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addFilter(expected)
    try:
        yield
    finally:
        logger.removeFilter(expected)
        logger.setLevel(level)


_controller = None


def _blas_limit(threads: int | None):
    """Cap BLAS threads: 12x209 matrices spend more on thread hand-off than on arithmetic."""
    global _controller
    if threads is None:
        return ExitStack()
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()  # inspecting the loaded libraries is the slow part: once
    return _controller.limit(limits=threads)


def _run_inprocess(server_app, client_app, num_clients: int, **batching) -> InProcessGrid:
    grid = InProcessGrid(client_app, num_clients, **batching)
    # Message() reads the sender's identity from TaskIdentity, as in a Flower ServerApp process.
    TaskIdentity.task_id = 1
    TaskIdentity.run_id = grid.run.run_id
    TaskIdentity.node_id = SERVER_NODE_ID
    context = Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config={})
    server_app(grid, context)
    return grid


def _run_flower(server_app, client_app, num_clients: int, *, num_cpus: int | None, client_cpus: float,
                verbose: bool) -> None:
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # the project never phones home
    backend_config = {
        "client_resources": {"num_cpus": client_cpus, "num_gpus": 0.0},
        "init_args": {
            "num_cpus": int(num_cpus or max(1, min(num_clients, os.cpu_count() or 1))),
            "include_dashboard": False,
            "logging_level": "INFO" if verbose else "ERROR",
            "log_to_driver": bool(verbose),
        },
    }
    pythonpath = os.environ.get("PYTHONPATH")  # Flower's Ray backend rewrites it for its workers
    try:
        _simulate(server_app, client_app, num_clients, backend_config, verbose)
    finally:
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath


def _simulate(server_app, client_app, num_clients: int, backend_config: dict, verbose: bool) -> None:
    from flwr.simulation import run_simulation

    with warnings.catch_warnings():
        # Ray's notice about a future default for CUDA_VISIBLE_DEVICES with num_gpus=0; today's behaviour
        # (CPU-only clients see no GPU) is the one wanted here.
        warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_clients,
                       backend_name="ray", backend_config=backend_config, verbose_logging=verbose)


def _check_partitions(partitions: Sequence) -> list[tuple[np.ndarray, np.ndarray]]:
    parts = []
    for i, (X, y) in enumerate(partitions):
        X = np.asarray(X, dtype=float)
        y = np.asarray(y).ravel()
        if X.ndim != 2 or X.shape[0] != y.size:
            raise ValueError(f"partition {i}: X must be 2-D with one row per label; got {X.shape}, {y.size}")
        if X.shape[0] == 0:
            raise ValueError(f"partition {i} is empty: leave a client without rows out of the federation")
        if not np.isfinite(X).all():
            raise ValueError(f"partition {i} holds NaN or infinite features")
        parts.append((X, y))
    if not parts:
        raise ValueError("a federation needs at least one partition")
    if len({X.shape[1] for X, _ in parts}) != 1:
        raise ValueError("all partitions must have the same number of features")
    return parts


def run_fedavg(task_factory: Callable[[], Task], partitions: Sequence[tuple[np.ndarray, np.ndarray]],
               num_rounds: int, local_epochs: int, seed: int, backend: str = "inprocess", *,
               standardize: bool = False, keep_updates: bool = False, federated_evaluation: bool = False,
               train_mods: list | None = None, strategy_factory: Callable | None = None,
               blas_threads: int | None = 1, num_cpus: int | None = None, client_cpus: float = 1.0,
               verbose: bool = False, batch_clients: bool = False, train_batcher: Callable | None = None
               ) -> FederationResult:
    """FedAvg of `task_factory()`'s model over `partitions` (one client per (X, y) pair).

    The server draws the initial weights from `seed` and sends them to every client; client c's local
    training in round r is seeded by (seed, c, r), so a run is reproducible and backend-independent.
    `standardize`: clients standardise features with a federated StandardScaler (pooled mean/std combined
    from per-client moments in one query round; rows never leave a client). `train_mods`/`strategy_factory`
    are the hooks for DP (client mods, strategy wrappers). `blas_threads` caps BLAS threads while the
    in-process backend runs (None: leave them); `num_cpus`/`client_cpus` size Ray for the flower backend.
    `batch_clients` (in-process backend, a task with ``train_many``): train all clients of a round as one
    tensor program, equal to the one-at-a-time loop to ~1e-7, not bit for bit (False, the default: the loop).
    Opt-in because it pays for small models only: ``make bench`` (federated_round) measured SimpleNet 3-4x faster
    and EEGNet no faster (its 64-tap convolution is arithmetic-bound either way), and a stage switching paths
    must be rerun and compared against its old intervals (issue 37). `train_batcher`: a callable
    ``(task, jobs) -> results`` that runs a round's jobs instead of ``task.train_many`` (e.g. to batch several
    federations run in lock-step, :mod:`eegprivacy.federated.lockstep`); it implies `batch_clients`.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if int(num_rounds) < 1 or int(local_epochs) < 0:
        raise ValueError("num_rounds must be >= 1 and local_epochs >= 0")
    parts = _check_partitions(partitions)
    seed = int(seed)
    task = task_factory()
    log = FederationLog(keep_updates=keep_updates)
    server_app = make_server_app(task.initial_weights(seed), num_rounds=num_rounds, num_clients=len(parts),
                                 local_epochs=local_epochs, seed=seed, log=log, standardize=standardize,
                                 federated_evaluation=federated_evaluation, strategy_factory=strategy_factory)
    # FedAvg samples nodes with the global `random` module; a federation should not move the caller's stream.
    random_state = random.getstate()
    grid = None
    try:
        with _flower_output(verbose):
            if backend == "inprocess":
                # The task built above serves every in-process client; Ray workers build their own.
                loader = partition_loader(parts)
                client_app = make_client_app(lambda: task, loader, train_mods=train_mods)
                batching = dict(task=task, partition=context_partition(loader), train_batcher=train_batcher) \
                    if batch_clients or train_batcher is not None else {}
                with _blas_limit(blas_threads):
                    grid = _run_inprocess(server_app, client_app, len(parts), **batching)
            else:
                client_app = make_client_app(task_factory, partition_loader(parts), train_mods=train_mods)
                _run_flower(server_app, client_app, len(parts), num_cpus=num_cpus, client_cpus=client_cpus,
                            verbose=verbose)
    finally:
        random.setstate(random_state)
    if log.final_weights is None:
        raise RuntimeError("the federation ended without a global model")
    initial_local = task.initial_local() if getattr(task, "local_names", None) else None
    return FederationResult(
        weights=log.final_weights,
        history=log.history(),
        num_clients=len(parts),
        n_examples=[int(X.shape[0]) for X, _ in parts],
        seed=seed,
        backend=backend,
        feature_mean=log.feature_mean,
        feature_scale=log.feature_scale,
        updates=log.updates if keep_updates else None,
        sent=log.sent if keep_updates else None,
        local_states=grid.local_states if grid is not None else None,
        initial_local=initial_local,
        diagnostics=grid.diagnostics if grid is not None else None,
    )
