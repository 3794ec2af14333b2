"""Lock-step federations: ``run_fedavg_many(calls)`` gives ``[run_fedavg(**c) for c in calls]`` (to 1e-6), whatever
mix of models, ε and round counts, leaves the caller's globals alone, and fails like the sequential loop."""

from __future__ import annotations

import random

import numpy as np
import pytest
from flwr.supercore.task_identity import TaskIdentity

from eegprivacy.federated import TorchTask, run_fedavg
from eegprivacy.federated.dp import LaplaceGradientDP
from eegprivacy.federated.lockstep import compatibility_key, run_fedavg_many
from eegprivacy.federated.server_app import sampling_strategy
from eegprivacy.federated.task import derive_seed

pytestmark = pytest.mark.usefixtures("torch_one_thread")

ATOL = 1e-6


def _partitions(n_clients=5, n=(14, 20), d=4, seed=0):
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_clients):
        rows = int(rng.integers(*n))
        y = np.arange(rows) % 2
        parts.append((rng.normal(size=(rows, d)) + 1.2 * y[:, None] + 0.3 * k, y))
    return parts


def _call(task, seed, *, rounds=2, epochs=2, per_round=3, parts=None, **extra):
    return dict(task_factory=task, partitions=parts if parts is not None else _partitions(seed=seed),
                num_rounds=rounds, local_epochs=epochs, seed=seed, keep_updates=True,
                strategy_factory=sampling_strategy(per_round, seed), **extra)


def _simplenet(eps=float("inf")):
    dp = LaplaceGradientDP(1.0, eps) if np.isfinite(eps) else None
    return TorchTask("simplenet", (4,), batch_size=8, dp=dp)


def _assert_same(a, b, loose=(), loose_atol=ATOL):
    """Equal final weights, sampled clients, per-round updates and diagnostics; weights at the indices in `loose`
    (and the updates' arrays there) to `loose_atol` only."""
    assert len(a.weights) == len(b.weights)
    for i, (u, v) in enumerate(zip(a.weights, b.weights)):
        np.testing.assert_allclose(u, v, rtol=0, atol=loose_atol if i in loose else ATOL)
    assert [h["clients"] for h in a.history] == [h["clients"] for h in b.history]  # the same sampled clients
    assert sorted(a.updates) == sorted(b.updates)
    for r in a.updates:
        assert sorted(a.updates[r]) == sorted(b.updates[r])
        for c in a.updates[r]:
            for i, (u, v) in enumerate(zip(a.updates[r][c], b.updates[r][c])):
                np.testing.assert_allclose(u, v, rtol=0, atol=loose_atol if i in loose else ATOL)
    for r in (a.diagnostics or {}):
        for c, metrics in a.diagnostics[r].items():
            for k, v in metrics.items():
                np.testing.assert_allclose(v, b.diagnostics[r][c][k], rtol=1e-5, atol=ATOL)


def test_equals_one_federation_at_a_time_with_and_without_dp_and_unequal_rounds():
    calls = [_call(_simplenet(), 3), _call(_simplenet(5.0), 4), _call(_simplenet(), 5, rounds=3),
             _call(_simplenet(5.0), 6, rounds=1), _call(_simplenet(1.0), 7, per_round=5)]
    alone = [run_fedavg(**c, batch_clients=True) for c in calls]
    together = run_fedavg_many(calls)
    for a, b, c in zip(together, alone, [run_fedavg(**c, batch_clients=False) for c in calls]):
        _assert_same(a, b)
        _assert_same(a, c)  # and the per-client loop's
    # The batch a federation trains in does not change its numbers: reversed, the same results.
    for a, b in zip(run_fedavg_many(calls[::-1])[::-1], alone):
        _assert_same(a, b)


def test_eegnet_with_local_batchnorm_state():
    """EEGNet (FedBN) alike, but for one parameter: the temporal BatchNorm's bias has a training gradient that is
    zero in exact arithmetic (the depthwise spatial convolution turns its per-channel shift into a constant that
    the next BatchNorm's batch mean removes), so Adam's normalised step turns the rounding noise of its ~1e-10
    gradient into steps of up to the learning rate, and any reordered sum (a batch of another size, the loop vs
    ``train_many``) moves it by ~1e-4. It cannot move the outputs in train mode; the local BatchNorm statistics
    and the eval-mode logits that carry it agree to 1e-5."""
    task = TorchTask("eegnet", (2, 64), batch_size=8, batchnorm_stats="local")
    parts = [(X.repeat(32, axis=1)[:, :128], y) for X, y in _partitions(n_clients=3, d=4, seed=1)]
    calls = [_call(task, s, rounds=2, epochs=1, per_round=2, parts=parts) for s in (0, 1)]
    alone = [run_fedavg(**c, batch_clients=True) for c in calls]
    together = run_fedavg_many(calls)
    free = [task.weight_names.index("net.bnorm_temporal.bias")]
    for a, b in zip(together, alone):
        _assert_same(a, b, loose=free, loose_atol=1e-3)
        for c in range(3):
            for u, v in zip(a.local_state(c), b.local_state(c)):
                np.testing.assert_allclose(u, v, rtol=0, atol=1e-5)
            X = parts[c][0]
            np.testing.assert_allclose(task.logits(a.weights, X, a.local_state(c)),
                                       task.logits(b.weights, X, b.local_state(c)), rtol=0, atol=1e-5)
    # One federation alone in the lock-step run: its batches are its own run's, and so are its numbers, exactly.
    for call, b in zip(calls, alone):
        assert all(np.array_equal(u, v) for u, v in zip(run_fedavg_many([call])[0].weights, b.weights))


def test_groups_by_training_config_and_batches_each_group_once_per_round():
    calls = [_call(_simplenet(), 0), _call(_simplenet(5.0), 1), _call(_simplenet(), 2), _call(_simplenet(5.0), 3)]
    seen = []

    def batcher(task, jobs):
        seen.append((task.dp, len(jobs)))
        return task.train_many(jobs)

    run_fedavg_many(calls, train_batcher=batcher)
    # Two rounds, two groups (ε = ∞, ε = 5) of two federations x 3 sampled clients, in federation order.
    assert seen == [(None, 6), (LaplaceGradientDP(1.0, 5.0), 6)] * 2
    assert compatibility_key(_simplenet(5.0)) == compatibility_key(_simplenet(5.0))
    assert compatibility_key(_simplenet(5.0)) != compatibility_key(_simplenet(1.0))


def test_leaves_the_callers_random_stream_and_flower_identity_alone():
    random.seed(123)
    before = random.getstate()
    identity = tuple(vars(TaskIdentity).get(k) for k in ("_task_id", "_run_id", "_node_id"))
    run_fedavg_many([_call(_simplenet(), 0, rounds=1), _call(_simplenet(), 1, rounds=1)])
    assert random.getstate() == before
    assert tuple(vars(TaskIdentity).get(k) for k in ("_task_id", "_run_id", "_node_id")) == identity


def test_a_failing_federation_stops_the_run_and_its_error_reaches_the_caller():
    bad = _partitions(seed=2)
    bad[1] = (np.full_like(bad[1][0], np.nan), bad[1][1])  # refused by run_fedavg before its first round
    with pytest.raises(ValueError, match="NaN"):
        run_fedavg_many([_call(_simplenet(), 0, rounds=3), _call(_simplenet(), 1, parts=bad)])

    calls = [_call(_simplenet(), 0, rounds=3), _call(_simplenet(), 1, rounds=3), _call(_simplenet(), 2, rounds=3)]
    # A training failure in round 2 of the second federation only (its first sampled client's job there).
    diverging = derive_seed(1, run_fedavg(**calls[1]).history[1]["clients"][0], 2)

    def diverges(task, jobs):
        if any(job.seed == diverging for job in jobs):
            raise FloatingPointError("diverged")
        return task.train_many(jobs)

    with pytest.raises(Exception, match="diverged"):
        run_fedavg_many(calls, train_batcher=diverges)
    # Nothing is left waiting: a fresh lock-step run works.
    assert len(run_fedavg_many(calls[:1])) == 1
