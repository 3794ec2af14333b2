"""Issue 20 (study B): a DP client sends nothing un-noised that depends on its data.

Runs the real ClientApp handlers through the ServerApp's FedAvg loop on the in-process grid, on tiny SYNTHETIC
partitions, and inspects every reply a client sends: with DP on, a reply may hold only the DP-trained trainable
parameters (the arrays the Laplace step noises) and values on the public allow-list (``num-examples``, the
``partition-id``). Query and evaluate, which would send raw statistics of the partition, are refused.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402

from eegprivacy.federated.client_app import (  # noqa: E402
    ARRAYS,
    CLIENT_INFO,
    METRICS,
    PUBLIC_CLIENT_INFO,
    PUBLIC_METRICS,
    make_client_app,
    partition_loader,
)
from eegprivacy.federated.dp import LaplaceGradientDP  # noqa: E402
from eegprivacy.federated.server_app import FederationLog, make_server_app  # noqa: E402
from eegprivacy.federated.simulation import _run_inprocess  # noqa: E402
from eegprivacy.federated.torch_task import TorchTask  # noqa: E402

SHAPES = {"simplenet": (4,), "eegnet": (4, 64)}


def _partitions(shape, n_clients=3, n=10, seed=0):
    """SYNTHETIC: Gaussian rows with a class shift, per client."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n_clients):
        y = np.arange(n) % 2
        X = rng.normal(size=(n, int(np.prod(shape)))) + y[:, None]
        parts.append((X, y))
    return parts


class Recorder:
    """A ClientApp stand-in that forwards to the real one and keeps every reply it sends."""

    def __init__(self, app):
        self.app, self.replies = app, []

    def __call__(self, msg, context):
        reply = self.app(msg, context)
        self.replies.append(reply)
        return reply


def _task(model, epsilon=1.0, **kw):
    return TorchTask(model, SHAPES[model], batch_size=4, dp=LaplaceGradientDP(1.0, epsilon), **kw)


def _run(task, parts, rounds=2):
    recorder = Recorder(make_client_app(lambda: task, partition_loader(parts)))
    log = FederationLog()
    server = make_server_app(task.initial_weights(0), num_rounds=rounds, num_clients=len(parts), local_epochs=1,
                             seed=0, log=log)
    _run_inprocess(server, recorder, len(parts))
    return recorder.replies


@pytest.mark.parametrize("model", ["simplenet", "eegnet"])
def test_every_dp_client_message_is_noised_or_public(model):
    task = _task(model, batchnorm_stats="local")
    replies = _run(task, _partitions(SHAPES[model]))
    assert replies, "the federation sent no messages"
    net = task.build(0)
    noised = [(name, tuple(p.shape)) for name, p in net.named_parameters() if p.requires_grad]
    for reply in replies:
        content = reply.content
        assert set(content.keys()) <= {ARRAYS, METRICS, CLIENT_INFO}, sorted(content.keys())
        for record in content.array_records.values():
            arrays = record.to_numpy_ndarrays()
            # Exactly the trainable parameters, in order: what the DP step clips and noises (no BatchNorm buffer).
            assert [tuple(a.shape) for a in arrays] == [shape for _, shape in noised]
        for record in content.metric_records.values():
            assert set(record.keys()) <= set(PUBLIC_METRICS), sorted(record.keys())
        for record in content.config_records.values():
            assert set(record.keys()) <= set(PUBLIC_CLIENT_INFO), sorted(record.keys())


@pytest.mark.parametrize("kind", [MessageType.QUERY, MessageType.EVALUATE])
def test_dp_client_refuses_raw_statistics(kind):
    task = _task("simplenet")
    app = make_client_app(lambda: task, partition_loader(_partitions((4,))))
    context = Context(run_id=1, node_id=1000, node_config={"partition-id": 0, "num-partitions": 1},
                      state=RecordDict(), run_config={})
    content = RecordDict({"config": ConfigRecord({"statistic": "moments"})})
    if kind == MessageType.EVALUATE:
        from flwr.app import ArrayRecord

        content = RecordDict({"arrays": ArrayRecord(task.initial_weights(0)), "config": ConfigRecord({})})
    msg = Message(content=content, message_type=kind, dst_node_id=1000)
    try:
        reply = app(msg, context)
    except Exception:  # refused by raising: nothing was sent
        return
    assert reply.has_error(), f"a DP client answered {kind} with {dict(reply.content)}"


def test_non_dp_client_still_reports_its_loss():
    """Without DP there is no guarantee to protect: the server keeps its per-client train loss."""
    task = TorchTask("simplenet", (4,), batch_size=4)
    replies = _run(task, _partitions((4,)), rounds=1)
    assert all("train_loss" in next(iter(r.content.metric_records.values())) for r in replies)


def test_fedbn_keeps_batchnorm_statistics_on_each_client():
    """FedBN: the global EEGNet holds trainable parameters only; each client keeps its own running statistics
    (from its own SYNTHETIC rows), and evaluating a client's rows with them differs from another client's."""
    from eegprivacy.federated import run_fedavg

    task = TorchTask("eegnet", SHAPES["eegnet"], batch_size=4, dp=LaplaceGradientDP(1.0, 5.0),
                     batchnorm_stats="local")
    parts = _partitions(SHAPES["eegnet"])
    parts[1] = (parts[1][0] * 4.0 + 2.0, parts[1][1])  # client 1's data on another scale
    result = run_fedavg(task, parts, 2, 1, 0, keep_updates=True)
    n_trainable = sum(1 for p in task.build(0).parameters() if p.requires_grad)
    assert len(result.weights) == n_trainable and len(result.sent[1]) == n_trainable
    own = [result.local_state(c) for c in range(len(parts))]
    assert all(len(s) == len(task.local_names) > 0 for s in own)
    assert not np.allclose(own[0][0], own[1][0])  # each client's statistics are its own
    assert result.diagnostics[1][0]["train_loss"] >= 0  # kept on the experimenter side, not sent
    with_own = task.predict_proba(result.weights, parts[1][0], local=own[1])
    with_other = task.predict_proba(result.weights, parts[1][0], local=own[0])
    assert not np.allclose(with_own, with_other)
