"""TorchTask.train_many: every client of a round as one tensor program, with the one-at-a-time loop's numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from eegprivacy.federated import TorchTask, run_fedavg
from eegprivacy.federated.dp import LaplaceGradientDP
from eegprivacy.federated.torch_task import TrainJob

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),  # vmap runs braindecode's renorm client by client:
              pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")]

TOL = 1e-6
SIZES = (20, 13, 7)  # batch 8: unequal step counts and last-batch sizes (4, 5, 7)
EEGNET = dict(model="eegnet", input_shape=(4, 64), model_kwargs={"kernel_length": 16})
SIMPLENET = dict(model="simplenet", input_shape=(4,), model_kwargs={"n_hidden": 16})
DPS = {"none": None, "eps5": LaplaceGradientDP(1.0, 5.0), "clip_only": LaplaceGradientDP(0.05, clip_only=True)}
# EEGNet's first BatchNorm shift is removed again by the next BatchNorm (a depthwise conv lies between): its
# gradient is zero up to rounding, which Adam scales to lr-sized steps. Without noise that coordinate (and the
# running mean it feeds) follows the rounding of whichever kernel sums the gradients, loop or batched alike.
NULL_DIRECTIONS = ("net.bnorm_temporal.bias", "net.bnorm_1.running_mean")


def _jobs(task, sizes=SIZES, epochs=2, seed=0):
    rng = np.random.default_rng(seed)
    w = task.initial_weights(seed)
    d = int(np.prod(task.input_shape))
    jobs = []
    for c, n in enumerate(sizes):
        y = np.arange(n) % 2
        X = rng.normal(size=(n, d)) + 0.5 * y[:, None]
        local = task.initial_local() if task.local_names and c % 2 else None
        jobs.append(TrainJob(w, local, X, y, epochs, 1000 + c))
    return jobs


def _loop(task, jobs):
    return [task.train_local(j.weights, j.local, j.X, j.y, epochs=j.epochs, seed=j.seed) for j in jobs]


def _assert_same(task, ref, got, tol=TOL, skip=()):
    names = task.weight_names + task.local_names
    assert len(ref) == len(got)
    for (rw, rl, rm), (gw, gl, gm) in zip(ref, got):
        assert len(rw) == len(gw) and len(rl) == len(gl)
        for name, a, b in zip(names, rw + rl, gw + gl):
            assert a.shape == b.shape and a.dtype == b.dtype
            if name not in skip:
                assert np.max(np.abs(a - b), initial=0.0) <= tol, name
        assert rm.keys() == gm.keys()
        assert rm["local_steps"] == gm["local_steps"]
        assert all(abs(rm[k] - gm[k]) <= tol * max(1.0, abs(rm[k])) for k in rm)


def test_supplied_dropout_mask_reproduces_nn_dropout():
    x = torch.randn(5, 3, 7)
    for p in (0.25, 0.5):
        torch.manual_seed(123)
        expected = torch.nn.Dropout(p).train()(x)
        g = torch.Generator().manual_seed(123)
        mask = torch.empty_like(x).bernoulli_(1 - p, generator=g).div_(1 - p)
        assert torch.equal(x * mask, expected)


@pytest.mark.parametrize("dp", list(DPS))
def test_simplenet_batched_equals_loop(dp):
    task = TorchTask(**SIMPLENET, batch_size=8, dp=DPS[dp])
    assert task.batch_fallback_reason() is None
    jobs = _jobs(task, epochs=3)
    _assert_same(task, _loop(task, jobs), task.train_many(jobs))


@pytest.mark.parametrize("stats", ["local", "shared"])
@pytest.mark.parametrize("dp", list(DPS))
def test_eegnet_batched_equals_loop(stats, dp):
    task = TorchTask(**EEGNET, batch_size=8, dp=DPS[dp], batchnorm_stats=stats)
    jobs = _jobs(task)
    ref, got = _loop(task, jobs), task.train_many(jobs)
    if DPS[dp] is not None and math.isfinite(DPS[dp].epsilon):  # noise drowns the rounding: every array equal
        _assert_same(task, ref, got)
        return
    _assert_same(task, ref, got, skip=NULL_DIRECTIONS)
    names = task.weight_names + task.local_names
    steps = ref[0][2]["local_steps"]
    for (rw, rl, _), (gw, gl, _) in zip(ref, got):  # the null direction moves by at most Adam's step size
        for name, a, b in zip(names, rw + rl, gw + gl):
            if name in NULL_DIRECTIONS:
                assert np.max(np.abs(a - b)) <= 2 * task.learning_rate * steps


def test_eegnet_null_direction_has_rounding_level_gradient():
    """Why NULL_DIRECTIONS: in the loop itself, the first BatchNorm's bias gets no real gradient."""
    task = TorchTask(**EEGNET)
    model = task.model(task.initial_weights(0)).train()
    x, y = torch.randn(16, 4, 64), torch.arange(16) % 2
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = dict(model.named_parameters())
    bias = grads["net.bnorm_temporal.bias"].grad.abs().max()
    assert bias < 1e-6 * max(p.grad.abs().max() for p in grads.values())


def test_train_many_is_deterministic_and_falls_back_to_the_loop():
    task = TorchTask(**EEGNET, batch_size=8, dp=DPS["eps5"], batchnorm_stats="local")
    jobs = _jobs(task, sizes=(9, 12))
    first, second = task.train_many(jobs), task.train_many(jobs)
    for (aw, al, am), (bw, bl, bm) in zip(first, second):
        assert all(np.array_equal(a, b) for a, b in zip(aw + al, bw + bl)) and am == bm

    from eegprivacy.models import build_model

    def simplenet(seed=None):
        return build_model("simplenet", (4,), seed=seed, n_hidden=8)

    custom = TorchTask(simplenet, (4,), batch_size=8)
    assert "callable" in custom.batch_fallback_reason()
    jobs = _jobs(custom)
    for (aw, _, am), (bw, _, bm) in zip(_loop(custom, jobs), custom.train_many(jobs)):
        assert all(np.array_equal(a, b) for a, b in zip(aw, bw)) and am == bm
    assert TorchTask(**SIMPLENET).train_many([]) == []


@pytest.mark.parametrize("spec,stats", [(SIMPLENET, "shared"), (EEGNET, "local")])
def test_run_fedavg_batched_equals_loop(spec, stats):
    task = TorchTask(**spec, batch_size=8, dp=LaplaceGradientDP(1.0, 5.0), batchnorm_stats=stats)
    parts = [(j.X, j.y) for j in _jobs(task)]
    calls = []

    def batcher(t, jobs):
        calls.append(len(jobs))
        return t.train_many(jobs)

    kwargs = dict(num_rounds=2, local_epochs=2, seed=5, keep_updates=True)
    loop = run_fedavg(task, parts, batch_clients=False, **kwargs)
    batched = run_fedavg(task, parts, train_batcher=batcher, **kwargs)
    assert calls == [len(parts)] * 2
    assert all(np.max(np.abs(a - b)) <= TOL for a, b in zip(loop.weights, batched.weights))
    assert len(loop.history) == len(batched.history)
    for h, g in zip(loop.history, batched.history):
        assert h.keys() == g.keys() and h["clients"] == g["clients"] and h["n_examples"] == g["n_examples"]
    for r in loop.updates:
        for c in loop.updates[r]:
            assert all(np.max(np.abs(a - b)) <= TOL for a, b in zip(loop.updates[r][c], batched.updates[r][c]))
            assert loop.diagnostics[r][c].keys() == batched.diagnostics[r][c].keys()
            if stats == "local":
                assert all(np.max(np.abs(a - b)) <= TOL
                           for a, b in zip(loop.local_states[r][c], batched.local_states[r][c]))
