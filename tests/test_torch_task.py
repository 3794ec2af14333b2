"""TorchTask: a torch model behind the federated Task contract, seeded, with a DP hook at every local step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from eegprivacy.federated import Task, TorchTask, run_fedavg


# One torch thread: the 2-core CI box runs these faster without intra-op threading.
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _data(n=40, d=4, shift=1.5, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, d)) + shift * y[:, None]
    return X, y


def _partitions(sizes=(12, 20, 9), d=4):
    return [_data(n, d, seed=k) for k, n in enumerate(sizes)]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))


class CountingDP:
    """Stand-in for the DP step: records each call, sees the gradients, and can wipe them."""

    def __init__(self, zero: bool = False):
        self.calls, self.norms, self.zero = 0, [], zero

    def privatise_(self, parameters, generator):
        assert isinstance(generator, torch.Generator)
        grads = [p.grad for p in parameters]
        assert grads and all(g is not None for g in grads)  # called after backward
        norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
        if self.zero:
            for g in grads:
                g.zero_()
        self.calls += 1
        self.norms.append(norm)
        return norm


def test_is_a_task_with_seeded_float32_weights_in_state_dict_order():
    task = TorchTask("simplenet", (4,), model_kwargs={"n_hidden": 8})
    assert isinstance(task, Task) and task() is task
    w = task.initial_weights(0)
    assert task.weight_names == ["hidden.weight", "hidden.bias", "classifier.weight", "classifier.bias"]
    assert [a.shape for a in w] == [(8, 4), (8,), (2, 8), (2,)] and all(a.dtype == np.float32 for a in w)
    assert _same(w, task.initial_weights(0)) and not _same(w, task.initial_weights(1))
    assert all(task.parameter_mask)


def test_eegnet_weights_leave_integer_counters_behind_and_mark_buffers():
    task = TorchTask("eegnet", (2, 64), model_kwargs={"kernel_length": 16})
    names = task.weight_names
    assert not any(n.endswith("num_batches_tracked") for n in names)
    buffers = [n for n, p in zip(names, task.parameter_mask) if not p]
    assert buffers and all(n.endswith(("running_mean", "running_var")) for n in buffers)


def test_training_is_seeded_learns_and_leaves_the_callers_rng_alone():
    task = TorchTask("simplenet", (4,), batch_size=8)
    X, y = _data(60)
    w0 = task.initial_weights(0)
    torch.manual_seed(7)
    expected = torch.rand(2)
    torch.manual_seed(7)
    w1, metrics = task.train(w0, X, y, epochs=30, seed=3)
    assert torch.equal(torch.rand(2), expected)
    w1b, _ = task.train(w0, X, y, epochs=30, seed=3)
    w2, _ = task.train(w0, X, y, epochs=30, seed=4)
    assert _same(w1, w1b) and not _same(w1, w2)
    before, after = task.evaluate(w0, X, y), task.evaluate(w1, X, y)
    assert after["loss"] < before["loss"] and after["accuracy"] > 0.8
    assert metrics["local_steps"] == 30 * math.ceil(60 / 8) and metrics["train_loss"] < 0.6
    unchanged, m0 = task.train(w0, X, y, epochs=0, seed=0)
    assert _same(unchanged, w0) and math.isnan(m0["train_loss"])


def test_dp_hook_runs_at_every_step_between_backward_and_step():
    X, y = _data(20)
    counting = CountingDP()
    task = TorchTask("simplenet", (4,), batch_size=8, dp=counting)
    w0 = task.initial_weights(0)
    _, metrics = task.train(w0, X, y, epochs=3, seed=0)
    assert counting.calls == 3 * math.ceil(20 / 8)
    assert metrics["grad_norm_mean"] == pytest.approx(np.mean(counting.norms))
    assert metrics["grad_norm_max"] == pytest.approx(max(counting.norms))
    # Gradients wiped by the hook leave Adam nothing to apply: the step comes after the hook.
    frozen, _ = TorchTask("simplenet", (4,), batch_size=8, dp=CountingDP(zero=True)).train(w0, X, y, epochs=3, seed=0)
    assert _same(frozen, w0)
    with pytest.raises(TypeError, match="privatise_"):
        TorchTask("simplenet", (4,), dp=object())


def test_outputs_losses_and_embeddings_agree():
    task = TorchTask("simplenet", (2, 3), model_kwargs={"n_hidden": 5})
    X, y = _data(12, d=6)
    w = task.initial_weights(2)
    proba = task.predict_proba(w, X)
    assert proba.shape == (12, 2) and np.allclose(proba.sum(axis=1), 1)
    assert np.array_equal(proba, task.predict_proba(w, X.reshape(12, 2, 3)))  # flattened or shaped rows
    losses = task.losses(w, X, y)
    assert np.allclose(losses, -np.log(proba[np.arange(12), y]), atol=1e-6)
    ev = task.evaluate(w, X, y)
    assert ev["loss"] == pytest.approx(losses.mean(), rel=1e-6)
    assert ev["accuracy"] == pytest.approx(np.mean(proba.argmax(axis=1) == y))
    emb = task.embed(w, X)
    assert emb.shape == (12, 5) and (emb >= 0).all()
    with pytest.raises(ValueError, match="not among"):
        task.evaluate(w, X, np.full(12, 2))
    with pytest.raises(ValueError, match="rows of"):
        task.predict_proba(w, np.zeros((3, 7)))
    with pytest.raises(ValueError, match="weight arrays"):
        task.predict_proba(w[:-1], X)


def test_fedavg_inprocess_with_simplenet_and_eegnet():
    parts = _partitions()
    task = TorchTask("simplenet", (4,), batch_size=8)
    a = run_fedavg(task, parts, num_rounds=2, local_epochs=1, seed=0, backend="inprocess", keep_updates=True)
    b = run_fedavg(task, parts, num_rounds=2, local_epochs=1, seed=0, backend="inprocess")
    assert _same(a.weights, b.weights) and len(a.history) == 2
    assert [h["n_examples"] for h in a.history] == [[12, 20, 9]] * 2
    # FedAvg: the new global model is the example-weighted mean of what the clients returned
    returned = [a.updates[2][c] for c in range(3)]
    mean = [sum(n * w[i] for n, w in zip((12, 20, 9), returned)) / 41 for i in range(len(a.weights))]
    assert all(np.allclose(m, w, atol=1e-6) for m, w in zip(mean, a.weights))

    rng = np.random.default_rng(1)
    eeg_parts = [(rng.normal(size=(n, 2 * 64)), np.arange(n) % 2) for n in (8, 10)]
    eeg = TorchTask("eegnet", (2, 64), model_kwargs={"kernel_length": 16}, batch_size=4)
    res = run_fedavg(eeg, eeg_parts, num_rounds=2, local_epochs=1, seed=0, backend="inprocess")
    assert [w.shape for w in res.weights] == [w.shape for w in eeg.initial_weights(0)]
    assert not _same(res.weights, eeg.initial_weights(0))


@pytest.mark.slow
def test_flower_simulation_matches_inprocess(monkeypatch, tmp_path):
    """Two rounds of a tiny SimpleNet through Flower's Ray simulation give the in-process weights (up to the
    order Ray returns replies in, which reorders FedAvg's float32 sums)."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr"))
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    parts = _partitions()
    task = TorchTask("simplenet", (4,), model_kwargs={"n_hidden": 8}, batch_size=8, dp=CountingDP())
    kwargs = dict(num_rounds=2, local_epochs=1, seed=0)
    fast = run_fedavg(task, parts, backend="inprocess", **kwargs)
    ray = run_fedavg(task, parts, backend="flower", **kwargs)
    assert all(np.allclose(u, v, rtol=1e-5, atol=1e-6) for u, v in zip(fast.weights, ray.weights))
    assert [h["n_examples"] for h in ray.history] == [[12, 20, 9]] * 2
    assert np.allclose([h["train_loss"] for h in fast.history], [h["train_loss"] for h in ray.history], rtol=1e-5)
    assert not _same(fast.weights, task.initial_weights(0))
