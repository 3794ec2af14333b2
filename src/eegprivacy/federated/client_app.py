"""Flower ``ClientApp`` (Message API) around a task and a partition loader.

One ClientApp serves every node; a node finds its data through ``context.node_config["partition-id"]``,
which Flower's simulation engine, the in-process driver and a SuperNode's ``--node-config`` all set. Everything a client
does in a round is a pure function of (received weights, config, partition, seed), so the same numbers come
out whichever process runs it, in whatever order.

Message protocol (what the server in :mod:`server_app` sends):

- ``train``: an ArrayRecord (global weights) and a ConfigRecord with ``local-epochs``, ``seed``,
  ``server-round`` and, when the federation standardises, ``feature-mean``/``feature-scale``. Reply: the
  locally trained weights, a MetricRecord (``num-examples``, ``train_loss``; a private client: ``num-examples``
  only) and a ConfigRecord
  ``client-info`` with the partition index (a simulation label, so the server can file per-client history).
- ``query``: reply with this client's feature moments (``num-examples``, per-feature ``mean`` and ``m2``,
  the sum of squared deviations from its own mean) for a federated StandardScaler; no row leaves the client.
- ``evaluate``: loss and accuracy of the received weights on the local partition.

Private clients (a task whose ``private`` is true: a DP step with finite ε) send nothing un-noised that depends on
their data. Their train reply holds only the DP-trained weights (with FedBN, ``batchnorm_stats="local"``, the
trainable parameters alone), ``num-examples`` and the ``partition-id`` — both public by the protocol: FedAvg
weights by the client's size, which the accounting's schedule assumes known, and the node id is who the server
sent the message to (:data:`PUBLIC_METRICS`, :data:`PUBLIC_CLIENT_INFO`). The train loss and the pre-clip gradient
norms stay on the client, in its node state under :data:`DIAGNOSTICS` (an experimenter-side record, never part
of a message). They refuse ``query`` (feature moments) and ``evaluate`` (loss, accuracy): both are raw statistics
of the partition. A task with client-local state (``local_names``, e.g. FedBN's BatchNorm statistics) keeps it in
the node state under :data:`LOCAL_STATE` across rounds and never sends it.

DP comes later as Flower mods on the train handler only (``train_mods``), e.g. ``fixedclipping_mod``; they
expect exactly one ArrayRecord and one ConfigRecord in the train message, which is what the server sends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from eegprivacy.federated.task import Task, derive_seed

__all__ = ["make_client_app", "add_client_handlers", "partition_loader", "context_partition", "train_job",
           "prime_train_result", "clear_primed", "CLIENT_INFO", "ARRAYS", "METRICS", "CONFIG", "LOCAL_STATE",
           "DIAGNOSTICS", "PUBLIC_METRICS", "PUBLIC_CLIENT_INFO", "is_private"]

ARRAYS = "arrays"
METRICS = "metrics"
CONFIG = "config"
CLIENT_INFO = "client-info"
LOCAL_STATE = "local-state"  # node state: the client's local arrays (FedBN statistics), never sent
DIAGNOSTICS = "diagnostics"  # node state: last train call's loss and gradient norms, never sent by a private client
PUBLIC_METRICS = ("num-examples",)  # all a private client's train reply carries besides its noised weights
PUBLIC_CLIENT_INFO = ("partition-id",)

PartitionLoader = Callable[[int], tuple[np.ndarray, np.ndarray]]
ContextPartition = Callable[[Context], tuple[int, np.ndarray, np.ndarray]]


def partition_loader(partitions: Sequence[tuple[np.ndarray, np.ndarray]]) -> PartitionLoader:
    """Serve in-memory (X, y) partitions by index; large data sets should load per index instead."""
    parts = [(np.asarray(X, dtype=float), np.asarray(y)) for X, y in partitions]

    def load(partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        return parts[partition_id]

    return load


def _standardise(X: np.ndarray, config: ConfigRecord) -> np.ndarray:
    if "feature-mean" not in config:
        return X
    return (X - np.asarray(config["feature-mean"], dtype=float)) / np.asarray(config["feature-scale"], dtype=float)


def is_private(task) -> bool:
    """Whether `task` trains under DP with finite ε (its ``private`` attribute; tasks without one are not)."""
    return bool(getattr(task, "private", False))


def _refuse_if_private(task, what: str) -> None:
    if is_private(task):
        raise PermissionError(f"a DP client does not answer {what}: it would send un-noised statistics of its "
                              "data that the DP step does not cover")


def _local_state(task, context: Context) -> list | None:
    """The client's stored local arrays; on its first round, the task's initial (data-independent) ones."""
    if not getattr(task, "local_names", None):
        return None
    if LOCAL_STATE in context.state:
        return context.state[LOCAL_STATE].to_numpy_ndarrays()
    return task.initial_local()


def _train(task, weights, local, X, y, *, epochs: int, seed: int):
    if local is None:
        new, metrics = task.train(weights, X, y, epochs=epochs, seed=seed)
        return new, None, metrics
    return task.train_local(weights, local, X, y, epochs=epochs, seed=seed)


def _config(msg: Message) -> ConfigRecord:
    records = msg.content.config_records
    return next(iter(records.values())) if records else ConfigRecord()


def _train_inputs(task, msg: Message, context: Context, partition: ContextPartition):
    """(partition id, weights, local state, standardised X, y, epochs, seed): everything a train call reads."""
    pid, X, y = partition(context)
    config = _config(msg)
    weights = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
    seed = derive_seed(int(config["seed"]), pid, int(config["server-round"]))
    return pid, weights, _local_state(task, context), _standardise(X, config), y, int(config["local-epochs"]), seed


def train_job(task, msg: Message, context: Context, partition: ContextPartition):
    """The :class:`~eegprivacy.federated.torch_task.TrainJob` the train handler would run for `msg` on this node:
    how a driver collects a round's local trainings to run them together (``task.train_many``)."""
    from eegprivacy.federated.torch_task import TrainJob

    _, weights, local, X, y, epochs, seed = _train_inputs(task, msg, context, partition)
    return TrainJob(weights, local, X, y, epochs, seed)


# Results computed ahead of the handler (a batched round), keyed by the node's Context object: the handler takes
# its own and trains only when none matches. Each Context belongs to one node of one grid, so federations run
# side by side in threads never see each other's results.
_PRIMED: dict[int, tuple[tuple, tuple]] = {}


def _job_key(weights, local, epochs: int, seed: int) -> tuple:
    digest = hashlib.sha256()
    for array in [*weights, *(local or [])]:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return int(seed), int(epochs), local is None, digest.hexdigest()


def prime_train_result(context: Context, job, result) -> None:
    """Hand the train handler of `context`'s node the `result` (``(weights, local, metrics)``, what
    ``train_local`` returns) of `job`: the next train message with the same seed, epochs, weights and local state
    uses it instead of training again; any other message trains as usual."""
    _PRIMED[id(context)] = (_job_key(job.weights, job.local, job.epochs, job.seed), result)


def clear_primed(context: Context) -> None:
    """Drop a primed result the handler did not take (a mod changed the message, the delivery failed)."""
    _PRIMED.pop(id(context), None)


def _take_primed(context: Context, weights, local, epochs: int, seed: int):
    entry = _PRIMED.pop(id(context), None)
    if entry is None or entry[0] != _job_key(weights, local, epochs, seed):
        return None
    return entry[1]


def make_client_app(task_factory: Callable[[], Task], load_partition: PartitionLoader, *,
                    train_mods: list | None = None) -> ClientApp:
    """A ClientApp whose nodes train `task_factory()`'s model on ``load_partition(partition_id)``.

    The task is built lazily, once per process that runs the app (Flower may ship the app to worker
    processes). `train_mods` wrap the train handler only (query/evaluate carry no weights to clip).
    """
    cache: dict[str, Task] = {}

    def task(context: Context) -> Task:
        if "task" not in cache:
            cache["task"] = task_factory()
        return cache["task"]

    return add_client_handlers(ClientApp(), task, context_partition(load_partition), train_mods=train_mods)


def context_partition(load_partition: PartitionLoader) -> ContextPartition:
    """``partition(context) -> (partition_id, X, y)`` from a loader by index (the node's ``partition-id``)."""

    def partition(context: Context) -> tuple[int, np.ndarray, np.ndarray]:
        pid = int(context.node_config["partition-id"])
        X, y = load_partition(pid)
        return pid, X, y

    return partition


def add_client_handlers(app: ClientApp, task: Callable[[Context], Task], partition: ContextPartition, *,
                        train_mods: list | None = None) -> ClientApp:
    """Register the train/query/evaluate handlers on `app`: the one client implementation.

    `task(context)` and `partition(context) -> (partition_id, X, y)` say where the model and the rows come
    from: closures over in-memory partitions (:func:`make_client_app`) or the node's own data set found through
    the run and node config (:mod:`eegprivacy.federated.apps`, what a SuperNode runs).
    """

    @app.train(mods=list(train_mods or []))
    def train(msg: Message, context: Context) -> Message:
        model = task(context)
        pid, weights, local, X, y, epochs, seed = _train_inputs(model, msg, context, partition)
        primed = _take_primed(context, weights, local, epochs, seed)
        if primed is None:
            new_weights, local, metrics = _train(model, weights, local, X, y, epochs=epochs, seed=seed)
        else:  # trained together with the round's other clients (InProcessGrid): the same numbers
            new_weights, new_local, metrics = primed
            local = None if local is None else new_local
        if local is not None:
            context.state[LOCAL_STATE] = ArrayRecord([np.asarray(a) for a in local])
        diagnostics = {k: float(v) for k, v in metrics.items()}
        context.state[DIAGNOSTICS] = MetricRecord(diagnostics)
        sent = {"num-examples": int(X.shape[0])}
        if not is_private(model):  # without DP there is no guarantee to break: the server may see its loss
            sent.update(diagnostics)
        content = RecordDict({
            ARRAYS: ArrayRecord(new_weights),
            METRICS: MetricRecord(sent),
            CLIENT_INFO: ConfigRecord({"partition-id": pid}),
        })
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        _refuse_if_private(task(context), "a feature-moments query")
        _, X, _ = partition(context)
        mean = X.mean(axis=0)
        m2 = ((X - mean) ** 2).sum(axis=0)
        record = MetricRecord({"num-examples": int(X.shape[0]), "mean": mean.tolist(), "m2": m2.tolist()})
        return Message(RecordDict({METRICS: record}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        model = task(context)
        _refuse_if_private(model, "federated evaluation")
        _, X, y = partition(context)
        config = _config(msg)
        weights = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
        local = _local_state(model, context)
        X = _standardise(X, config)
        metrics = model.evaluate(weights, X, y) if local is None else model.evaluate(weights, X, y, local=local)
        record = MetricRecord({"num-examples": int(X.shape[0]), **{k: float(v) for k, v in metrics.items()}})
        return Message(RecordDict({METRICS: record}), reply_to=msg)

    return app
