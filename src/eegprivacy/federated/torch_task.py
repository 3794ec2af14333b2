"""A PyTorch model as a federated task (study B): the :class:`~eegprivacy.federated.task.Task` contract with
Adam, cross-entropy, mini-batches and, optionally, a DP step at every local optimiser step — the paper's Laplace
step on the batch gradient, or record-level DP-SGD (:mod:`eegprivacy.federated.dp_sgd`: Poisson-sampled steps on
clipped per-example gradients, a DP object with ``per_example = True``).

Stateless like every task: each call builds the model afresh from the weights it is given, so Flower may run a
client in any process and the in-process driver gets the same numbers. Integer counters (BatchNorm's
``num_batches_tracked``) never travel, since a fixed momentum never reads them and FedAvg would average them into
floats. What travels depends on `batchnorm_stats`:

- ``"shared"``: the weights are every floating-point entry of the ``state_dict``, in its order (trainable
  parameters and BatchNorm running statistics). The running statistics are computed from the client's data in the
  forward pass and are NOT covered by the gradient DP step: with DP, that is an un-noised channel.
- ``"local"`` (FedBN, Li et al. 2021): the weights are the trainable parameters only — exactly what the DP step
  noises. The running statistics are the client's *local state* (``local`` arguments below): kept by the client
  across rounds, never sent, and used whenever that client's data is evaluated. Without a client's local state,
  evaluation calibrates statistics from the rows it scores (:meth:`calibrate`), as a new subject would from its
  calibration trials.

Seeding: the federated layer hands ``train`` one seed per (client, round). Three independent streams derive
from it: the order of the mini-batches, the DP noise (each a ``torch.Generator`` of its own) and dropout, which
only reads torch's global RNG, so that runs seeded inside ``torch.random.fork_rng`` and leaves the caller's
stream where it was. Every call sets torch to `num_threads` intra-op threads (1 by default: small models on a
shared machine, and bit-identical results between runs) and restores the previous count afterwards.

The federated layer checks that partitions are 2-D, so trials may arrive flattened: rows are reshaped to
`input_shape` here ((n_components,) for SimpleNet on log-variances, (n_components, n_times) for EEGNet).

One idea over about 700 lines: one implementation of the task contract for a PyTorch model. Training, evaluation,
the DP step and the BatchNorm state depend on one another (the weights' order, what travels and what stays local),
so they change together.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from eegprivacy.federated.task import Weights, derive_seed

__all__ = ["TorchTask", "TrainJob"]

# Sub-streams of a train call's seed.
_SHUFFLE, _NOISE, _DROPOUT = 0, 1, 2
BATCHNORM_STATS = ("shared", "local")
# braindecode's max-norm layers call renorm, which vmap runs client by client (correct; the weights are tiny).
warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented the "
                        "batching rule for aten::renorm", category=UserWarning)
# Adam's defaults, as torch.optim.Adam(params, lr=...) uses them in train_local.
_BETA1, _BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


@dataclass(frozen=True)
class TrainJob:
    """One client's local training in a round: the arguments of :meth:`TorchTask.train_local`.

    A value, so a driver can collect the jobs of every client of a round (or of several federations) and hand
    them to :meth:`TorchTask.train_many` in one call.
    """

    weights: Weights
    local: Weights | None
    X: Any
    y: Any
    epochs: int
    seed: int


class _SuppliedMask(torch.nn.Module):
    """Stands in for an ``nn.Dropout`` in the batched path: multiplies by a mask drawn outside the forward pass.

    torch's CPU dropout computes ``input * (empty_like(input).bernoulli_(1 - p) / (1 - p))`` from the global
    RNG; the batched path draws that same mask from each client's own generator and sets it here before the
    (vmapped) forward pass. ``mask`` None: the identity (p = 0, or a dry run recording shapes).
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)
        self.mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.mask is None else x * self.mask


def _train_metrics(losses: list, steps: int, norms: list, new_weights) -> dict[str, float]:
    """A train call's diagnostics (last-epoch loss, steps, pre-clip gradient norms), after checking that the
    weights it produced are finite: the one summary of both training paths."""
    metrics = {"train_loss": losses[-1] if losses else float("nan"), "local_steps": float(steps)}
    if norms:
        metrics.update(grad_norm_mean=float(np.mean(norms)), grad_norm_max=float(np.max(norms)))
    if not all(np.isfinite(w).all() for w in new_weights):
        raise FloatingPointError("local training produced non-finite weights (diverged)")
    return metrics


class TorchTask:
    """A torch classifier as a federated task.

    `model`: a name for :func:`eegprivacy.models.build_model` (``"simplenet"``, ``"eegnet"``; `model_kwargs`
    go to it) or a callable ``model(seed) -> nn.Module``. `classes`: the federation's label set (labels are
    mapped to output indices in sorted order). `dp`: an object with ``privatise_(parameters, generator) ->
    float`` (e.g. :class:`eegprivacy.federated.dp.LaplaceGradientDP`), called after ``loss.backward()`` and
    before ``optimizer.step()`` at every local step on the trainable parameters; what it returns (the gradient
    norm before clipping) is summarised in the train metrics. A DP object with ``per_example = True``
    (:class:`eegprivacy.federated.dp_sgd.GaussianExampleDP`) replaces the mini-batch loop by DP-SGD's
    Poisson-sampled steps on per-example gradients (models without BatchNorm only); `batch_size` is then unused.
    The Laplace step does not cover the BatchNorm running statistics: with ``batchnorm_stats="shared"`` they
    travel with the weights un-noised (see :attr:`parameter_mask`, :attr:`unnoised_channels`); with ``"local"``
    they stay with the client (FedBN).

    The task holds no training state, so it is also its own factory: ``run_fedavg(TorchTask(...), ...)``.
    """

    def __init__(self, model: str | Callable[..., torch.nn.Module], input_shape: Sequence[int],
                 classes: Sequence = (0, 1), *, model_kwargs: Mapping | None = None, learning_rate: float = 1e-3,
                 batch_size: int = 32, dp=None, num_threads: int | None = 1, eval_batch_size: int = 1024,
                 batchnorm_stats: str = "shared"):
        self.model_spec = model
        self.input_shape = tuple(int(s) for s in np.atleast_1d(input_shape))
        if not self.input_shape or min(self.input_shape) < 1:
            raise ValueError(f"input_shape must be positive sizes, got {input_shape!r}")
        self.classes = np.unique(np.asarray(classes))
        if self.classes.size < 2:
            raise ValueError("a federated classifier needs at least two classes")
        self.model_kwargs = dict(model_kwargs or {})
        self.learning_rate = float(learning_rate)
        self.batch_size = int(batch_size)
        if self.batch_size < 1 or not self.learning_rate > 0:
            raise ValueError("batch_size must be >= 1 and learning_rate > 0")
        if dp is not None and not callable(getattr(dp, "privatise_examples_" if getattr(dp, "per_example", False)
                                                    else "privatise_", None)):
            raise TypeError("dp must have a privatise_(parameters, generator) method, or per_example = True and "
                            "privatise_examples_(parameters, per_example_grads, generator, expected_batch_size)")
        self.dp = dp
        if batchnorm_stats not in BATCHNORM_STATS:
            raise ValueError(f"batchnorm_stats must be one of {BATCHNORM_STATS}, got {batchnorm_stats!r}")
        self.batchnorm_stats = batchnorm_stats
        self.num_threads = num_threads
        self.eval_batch_size = int(eval_batch_size)
        self._names: list[str] | None = None
        self._param_names: set[str] | None = None
        self._buffer_names: list[str] | None = None

    def __call__(self) -> TorchTask:
        return self

    # -- model and weights ----------------------------------------------------------------------------------
    def build(self, seed: int | None = None) -> torch.nn.Module:
        """A fresh model; with `seed`, its initial weights are that seed's (the caller's RNG is left alone)."""
        from eegprivacy.models import build_model, seeded

        with seeded(0 if seed is None else seed):  # unseeded builds still must not move the caller's RNG
            if isinstance(self.model_spec, str):
                return build_model(self.model_spec, self.input_shape, n_classes=self.classes.size, seed=seed,
                                   **self.model_kwargs)
            return self.model_spec(seed=seed, **self.model_kwargs)

    def _spec(self, model: torch.nn.Module | None = None) -> list[str]:
        if self._names is None:
            model = model if model is not None else self.build(0)
            state = model.state_dict()
            floating = [k for k, v in state.items() if torch.is_floating_point(v)]
            params = {k for k, p in model.named_parameters() if p.requires_grad}
            self._param_names = params
            local = self.batchnorm_stats == "local"
            self._names = [k for k in floating if k in params] if local else floating
            self._buffer_names = [k for k in floating if k not in params] if local else []
        return self._names

    def _local_spec(self) -> list[str]:
        self._spec()
        return self._buffer_names

    @property
    def private(self) -> bool:
        """True when local training runs a DP step with finite ε: the client then sends nothing else un-noised
        that depends on its data (see :mod:`eegprivacy.federated.client_app`). A DP object may say so itself
        (``private``: DP-SGD with σ > 0); otherwise its ``epsilon`` must be finite."""
        if self.dp is not None and hasattr(self.dp, "private"):
            return bool(self.dp.private)
        return self.dp is not None and math.isfinite(float(getattr(self.dp, "epsilon", math.inf)))

    @property
    def local_names(self) -> list[str]:
        """``state_dict`` keys of a client's local state (BatchNorm running statistics with ``"local"``)."""
        return list(self._local_spec())

    @property
    def unnoised_channels(self) -> list[str]:
        """What the shared weights carry that the DP step does not noise: the BatchNorm running statistics when
        they are shared (``"batchnorm_running_stats"``), else nothing."""
        return ["batchnorm_running_stats"] if not all(self.parameter_mask) else []

    @property
    def weight_names(self) -> list[str]:
        """``state_dict`` keys of the arrays in a weights list, in order."""
        return list(self._spec())

    @property
    def parameter_mask(self) -> list[bool]:
        """Per weights array: True for a trainable parameter (the DP step privatises its gradient), False for
        a buffer such as a BatchNorm running statistic (updated from the data in the forward pass, not noised)."""
        names = self._spec()
        return [n in self._param_names for n in names]

    def weights_of(self, model: torch.nn.Module) -> Weights:
        state = model.state_dict()
        return [state[k].detach().cpu().numpy().copy() for k in self._spec(model)]

    def local_of(self, model: torch.nn.Module) -> Weights:
        """The client-local arrays of `model` (empty unless ``batchnorm_stats="local"`` and it has BatchNorm)."""
        self._spec(model)
        state = model.state_dict()
        return [state[k].detach().cpu().numpy().copy() for k in self._buffer_names]

    @staticmethod
    def _copy_in(state: dict, names: list[str], arrays: Weights, what: str) -> None:
        if len(arrays) != len(names):
            raise ValueError(f"expected {len(names)} {what} arrays ({', '.join(names[:4])}, ...), got {len(arrays)}")
        for name, w in zip(names, arrays):
            w = np.asarray(w)
            if tuple(w.shape) != tuple(state[name].shape):
                raise ValueError(f"{what} {name}: expected shape {tuple(state[name].shape)}, got {w.shape}")
            state[name].copy_(torch.from_numpy(np.array(w, copy=True)))

    def load(self, model: torch.nn.Module, weights: Weights, local: Weights | None = None) -> torch.nn.Module:
        """`weights` (and, with ``"local"``, the client's `local` state; None keeps the model's initial
        statistics) into `model`."""
        names = self._spec(model)
        state = model.state_dict()
        with torch.no_grad():
            self._copy_in(state, names, weights, "weight")
            if local is not None:
                self._copy_in(state, self._buffer_names, local, "local state")
            for name, v in state.items():  # counters are not shipped: every load starts them afresh
                if not torch.is_floating_point(v):
                    v.zero_()
        return model

    def calibrate(self, weights: Weights, X) -> Weights:
        """Local state computed from the rows `X` alone: BatchNorm statistics as cumulative averages over one
        pass (momentum None) of `weights`' model. What a client without stored statistics (a held-out subject
        on its calibration trials) uses; empty when there is nothing local."""
        if not self._local_spec():
            return []
        inputs = self._inputs(X)
        with self._threads(), torch.no_grad(), torch.random.fork_rng(devices=[]):
            model = self.load(self.build(), weights)
            for module in model.modules():
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                    module.reset_running_stats()
                    module.momentum = None
            model.train()
            for module in model.modules():  # dropout off: only the statistics should see the rows
                if isinstance(module, torch.nn.Dropout):
                    module.eval()
            model(inputs)
            return self.local_of(model)

    def model(self, weights: Weights, local: Weights | None = None) -> torch.nn.Module:
        """A new model holding `weights`, in eval mode (for attacks: outputs, embeddings, per-sample gradients).
        With ``"local"`` BatchNorm statistics, `local` is the owning client's state (None: initial statistics;
        the evaluation methods below calibrate on their rows instead)."""
        return self.load(self.build(), weights, local).eval()

    def initial_weights(self, seed: int) -> Weights:
        return self.weights_of(self.build(int(seed)))

    def initial_local(self, seed: int = 0) -> Weights:
        """A client's local state before it has trained (BatchNorm's initial statistics: data-independent)."""
        return self.local_of(self.build(int(seed)))

    # -- data -----------------------------------------------------------------------------------------------
    def _inputs(self, X) -> torch.Tensor:
        X = np.asarray(X, dtype=np.float32)
        n_in = int(np.prod(self.input_shape))
        if X.ndim < 1 or X.shape[0] == 0 or int(np.prod(X.shape[1:])) != n_in:
            raise ValueError(f"expected rows of {self.input_shape} (or {n_in} values flattened), got {X.shape}")
        return torch.from_numpy(np.ascontiguousarray(X).reshape(-1, *self.input_shape))

    def _targets(self, y) -> torch.Tensor:
        y = np.asarray(y).ravel()
        idx = np.searchsorted(self.classes, y)
        if np.any(idx >= self.classes.size) or np.any(self.classes[np.minimum(idx, self.classes.size - 1)] != y):
            raise ValueError(f"labels {sorted(set(y.tolist()) - set(self.classes.tolist()))} are not among the "
                             f"task's classes {self.classes.tolist()}")
        return torch.from_numpy(idx.astype(np.int64))

    @contextmanager
    def _threads(self):
        if self.num_threads is None:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(int(self.num_threads))
        try:
            yield
        finally:
            torch.set_num_threads(before)

    # -- the Task contract ----------------------------------------------------------------------------------
    def train(self, weights: Weights, X, y, *, epochs: int, seed: int, local: Weights | None = None
              ) -> tuple[Weights, dict[str, float]]:
        """`epochs` passes of Adam (fresh each call, as every FedAvg client) over shuffled mini-batches.
        In train mode BatchNorm normalises by batch statistics, so `local` only seeds the running statistics
        that :meth:`train_local` returns; the trained weights do not depend on it."""
        new_weights, _, metrics = self.train_local(weights, local, X, y, epochs=epochs, seed=seed)
        return new_weights, metrics

    def train_local(self, weights: Weights, local: Weights | None, X, y, *, epochs: int, seed: int
                    ) -> tuple[Weights, Weights, dict[str, float]]:
        """:meth:`train` that also returns the client's new local state (the running statistics it keeps).
        The metrics (last-epoch loss, pre-clip gradient norms) are experimenter-side diagnostics: a DP client
        must not send them (see :mod:`eegprivacy.federated.client_app`)."""
        inputs, targets = self._inputs(X), self._targets(y)
        if inputs.shape[0] != targets.shape[0]:
            raise ValueError(f"X has {inputs.shape[0]} rows but y has {targets.shape[0]}")
        n = inputs.shape[0]
        shuffle = torch.Generator().manual_seed(derive_seed(seed, _SHUFFLE))
        noise = torch.Generator().manual_seed(derive_seed(seed, _NOISE))
        losses, norms, steps = [], [], 0
        with self._threads(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, _DROPOUT))
            model = self.load(self.build(), weights, local).train()
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = torch.optim.Adam(params, lr=self.learning_rate)
            if getattr(self.dp, "per_example", False):
                steps = self._dp_sgd(model, optimizer, inputs, targets, int(epochs), shuffle, noise, losses, norms)
            else:
                for _ in range(int(epochs)):
                    order = torch.randperm(n, generator=shuffle)
                    total = 0.0
                    for start in range(0, n, self.batch_size):
                        batch = order[start:start + self.batch_size]
                        optimizer.zero_grad(set_to_none=True)
                        loss = F.cross_entropy(model(inputs[batch]), targets[batch])
                        loss.backward()
                        if self.dp is not None:
                            norms.append(float(self.dp.privatise_(params, noise)))
                        optimizer.step()
                        total += float(loss.detach()) * len(batch)
                        steps += 1
                    losses.append(total / n)
            new_weights, new_local = self.weights_of(model), self.local_of(model)
        return new_weights, new_local, _train_metrics(losses, steps, norms, new_weights)

    def _dp_sgd(self, model, optimizer, inputs, targets, epochs: int, shuffle, noise, losses: list, norms: list
                ) -> int:
        """DP-SGD's local loop (:mod:`eegprivacy.federated.dp_sgd`): per epoch ``dp.steps_per_epoch`` steps, each
        on a Poisson sample drawn from `shuffle`, per-example gradients clipped, summed, noised from `noise` and
        divided by q·n. Appends each epoch's mean loss over its sampled rows (NaN if none) to `losses` and every
        pre-clip per-example norm to `norms`; returns the number of steps."""
        from eegprivacy.federated.dp_sgd import per_example_grads, require_per_example_model

        require_per_example_model(model)
        dp, n = self.dp, inputs.shape[0]
        named = {k: p for k, p in model.named_parameters() if p.requires_grad}
        params, steps = list(named.values()), 0
        for _ in range(epochs):
            total, count = 0.0, 0
            for _ in range(dp.steps_per_epoch):
                rows = dp.sample(n, shuffle).nonzero().flatten()
                grads, row_losses = per_example_grads(model, named, inputs[rows], targets[rows])
                optimizer.zero_grad(set_to_none=True)
                norms.extend(dp.privatise_examples_(params, grads, noise, expected_batch_size=dp.sample_rate * n
                                                    ).tolist())
                optimizer.step()
                total, count, steps = total + float(row_losses.double().sum()), count + len(rows), steps + 1
            losses.append(total / count if count else math.nan)
        return steps

    # -- all clients of a round at once -----------------------------------------------------------------------
    def batch_fallback_reason(self, model: torch.nn.Module | None = None) -> str | None:
        """Why :meth:`train_many` runs the per-client loop instead of one batched program; None when it batches.

        The batched path reproduces :meth:`train_local` only where it knows every source of randomness and every
        state update: the named models (SimpleNet, EEGNet: their only RNG consumers are ``nn.Dropout`` modules,
        each called once per forward pass; their BatchNorms use a fixed momentum), and no DP or
        :class:`~eegprivacy.federated.dp.LaplaceGradientDP`. A model given as a callable may draw from the global
        RNG where no mask can be supplied, another DP object's ``privatise_`` is opaque, and a BatchNorm with
        ``momentum=None`` reads its step counter: those run the loop. With `model` (a built instance), its
        modules are checked too.
        """
        from eegprivacy.federated.dp import LaplaceGradientDP
        from eegprivacy.models import MODELS

        if not (isinstance(self.model_spec, str) and self.model_spec in MODELS):
            return "the model is given as a callable: only the named models are known to batch exactly"
        if self.dp is not None and type(self.dp) is not LaplaceGradientDP:
            return f"a {type(self.dp).__name__} DP step: only LaplaceGradientDP is batched"
        for module in (model.modules() if model is not None else ()):
            if isinstance(module, torch.nn.modules.dropout._DropoutNd) and type(module) is not torch.nn.Dropout:
                return f"{type(module).__name__}: only nn.Dropout masks are reproduced"
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.momentum is None \
                    and module.track_running_stats:
                return "a BatchNorm with momentum=None (cumulative averages read the per-client step counter)"
        return None

    def _train_job(self, job: TrainJob) -> tuple[Weights, Weights, dict[str, float]]:
        return self.train_local(job.weights, job.local, job.X, job.y, epochs=job.epochs, seed=job.seed)

    def train_many(self, jobs: Iterable[TrainJob]) -> list[tuple[Weights, Weights, dict[str, float]]]:
        """``[train_local(job) for job in jobs]`` computed as one tensor program over all clients.

        Why: a round's clients each run the same small network on a few dozen rows, so one at a time every step
        pays the per-op overhead (SimpleNet) or runs convolutions too small to use the core well (EEGNet). Here
        each trainable parameter, Adam moment and BatchNorm statistic carries a leading client axis, the forward
        pass is ``torch.func.vmap`` over ``functional_call`` of one model (a convolution of every client is then
        one grouped convolution), and the backward pass of the summed per-client losses gives each client its
        own gradient (client c's loss depends only on its own slice).

        The numbers equal the loop's (to float32 rounding of reordered sums; ``tests/test_batched_federated.py``
        holds them to 1e-6) because every per-client stream is reproduced, not merely re-seeded:

        - mini-batch order: ``torch.randperm(n, generator=shuffle)`` per epoch from each job's own generator;
        - steps: client c's t-th step joins the program's t-th step. Clients whose t-th batch has the same size
          run together; a client with another size (its last batch of an epoch, or a smaller partition) runs in
          its own group, and a client that has finished takes no step at all: no Adam update, no noise draw, no
          dropout draw. Grouping by size instead of padding keeps BatchNorm statistics and the mean loss over
          exactly the client's rows;
        - dropout: the loop's ``nn.Dropout`` draws ``empty_like(x).bernoulli_(1 - p) / (1 - p)`` from torch's
          global RNG seeded per client; here each Dropout is replaced by a module applying a mask drawn, in the
          loop's call order and shape, from a per-client ``torch.Generator`` seeded the same way
          (``vmap(randomness="error")`` guarantees nothing else in the forward pass draws);
        - BatchNorm in train mode: vmap keeps batch statistics and running-statistic updates per client;
        - EEGNet's max-norm layers are braindecode's own parametrisations (``renorm`` in the forward pass), run
          per client under vmap;
        - DP: per-client global L2 norm (float64, as ``privatise_``), clip, and Laplace noise from each client's
          own generator: one draw of all parameters' values in ``privatise_``'s order, which is the same stream
          as its parameter-by-parameter draws (uniforms are drawn serially);
        - Adam: torch.optim.Adam's single-tensor update (betas 0.9/0.999, eps 1e-8) with each client's own
          bias correction from its own step count.

        Metrics are the loop's (last-epoch loss, local steps, pre-clip gradient norms). Configurations the path
        cannot reproduce exactly (:meth:`batch_fallback_reason`) and single jobs run :meth:`train_local`.
        """
        jobs = list(jobs)
        if len(jobs) < 2 or self.batch_fallback_reason() is not None:
            return [self._train_job(job) for job in jobs]
        with self._threads(), torch.random.fork_rng(devices=[]):
            model = self.build().train()
            if self.batch_fallback_reason(model) is None:
                result = _BatchedTraining(self, model, jobs).run()
                if result is not None:
                    return result
        return [self._train_job(job) for job in jobs]

    def _forward(self, weights: Weights, X, fn, local: Weights | None = None) -> torch.Tensor:
        if local is None and self._local_spec():
            local = self.calibrate(weights, X)
        inputs = self._inputs(X)
        with self._threads(), torch.no_grad():
            model = self.model(weights, local)
            return torch.cat([fn(model, inputs[i:i + self.eval_batch_size])
                              for i in range(0, inputs.shape[0], self.eval_batch_size)])

    # Every evaluation takes the owning client's `local` state; None with "local" BatchNorm statistics: the
    # statistics of the rows scored (:meth:`calibrate`).
    def logits(self, weights: Weights, X, local: Weights | None = None) -> np.ndarray:
        return self._forward(weights, X, lambda m, x: m(x), local).double().numpy()

    def predict_proba(self, weights: Weights, X, local: Weights | None = None) -> np.ndarray:
        """Softmax outputs in eval mode (dropout off, BatchNorm on running statistics), columns = classes."""
        return torch.softmax(torch.from_numpy(self.logits(weights, X, local)), dim=1).numpy()

    def losses(self, weights: Weights, X, y, local: Weights | None = None) -> np.ndarray:
        """Per-trial cross-entropy in eval mode (the record-level attack's loss feature)."""
        logits = torch.from_numpy(self.logits(weights, X, local))
        return F.cross_entropy(logits, self._targets(y), reduction="none").numpy()

    def embed(self, weights: Weights, X, local: Weights | None = None) -> np.ndarray:
        """The model's ``embed`` layer per trial, flattened (the feature-level attack's input)."""
        return self._forward(weights, X, lambda m, x: m.embed(x), local).double().numpy()

    def evaluate(self, weights: Weights, X, y, local: Weights | None = None) -> dict[str, float]:
        """Mean cross-entropy and accuracy of `weights` on (X, y), in eval mode."""
        logits = torch.from_numpy(self.logits(weights, X, local))
        targets = self._targets(y)
        loss = float(F.cross_entropy(logits, targets)) if targets.numel() else math.nan
        acc = float((logits.argmax(dim=1) == targets).double().mean()) if targets.numel() else math.nan
        return {"loss": loss, "accuracy": acc}

    def to_dict(self) -> dict:
        """Flat description for MLflow params."""
        out = {"model": self.model_spec if isinstance(self.model_spec, str) else getattr(
                   self.model_spec, "__name__", type(self.model_spec).__name__),
               "input_shape": "x".join(map(str, self.input_shape)), "learning_rate": self.learning_rate,
               "batch_size": self.batch_size, "optimizer": "adam", "loss": "cross_entropy",
               "batchnorm_stats": self.batchnorm_stats,
               **{f"model_{k}": v for k, v in self.model_kwargs.items()}}
        if self.dp is not None and hasattr(self.dp, "to_dict"):
            out.update(self.dp.to_dict())
        return out


class _BatchedTraining:
    """One :meth:`TorchTask.train_many` call: the stacked state of every client and the step loop over them.

    `model` is a fresh model in train mode, used only as the function that ``functional_call`` runs with each
    client's tensors; its Dropout modules are swapped for :class:`_SuppliedMask`. :meth:`run` returns None when
    the model turns out not to fit the path (a Dropout called other than once per forward pass), and the caller
    runs the loop instead.
    """

    def __init__(self, task: TorchTask, model: torch.nn.Module, jobs: list[TrainJob]):
        self.task, self.model, self.jobs = task, model, jobs
        self.names = task._spec(model)
        state = model.state_dict()
        self.trainable = [k for k, p in model.named_parameters() if p.requires_grad]
        trainable = set(self.trainable)
        floating = [k for k, v in state.items() if torch.is_floating_point(v)]
        self.others = [k for k in floating if k not in trainable]  # BatchNorm statistics, frozen parameters
        self.inputs, self.targets, states = [], [], []
        for job in jobs:  # the loop's checks and loading, per job
            x, t = task._inputs(job.X), task._targets(job.y)
            if x.shape[0] != t.shape[0]:
                raise ValueError(f"X has {x.shape[0]} rows but y has {t.shape[0]}")
            client = {k: state[k].detach().clone() for k in floating}
            with torch.no_grad():
                task._copy_in(client, self.names, job.weights, "weight")
                if job.local is not None:
                    task._copy_in(client, task._buffer_names, job.local, "local state")
            self.inputs.append(x)
            self.targets.append(t)
            states.append(client)
        self.params = {k: torch.stack([s[k] for s in states]) for k in self.trainable}
        self.buffers = {k: torch.stack([s[k] for s in states]) for k in self.others}

    # -- dropout ---------------------------------------------------------------------------------------------
    def _swap_dropout(self) -> list[_SuppliedMask] | None:
        """Replace every nn.Dropout by a :class:`_SuppliedMask`; return those that draw, in forward-call order."""
        swapped = []
        for parent in list(self.model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Dropout:
                    mask = _SuppliedMask(child.p)
                    setattr(parent, name, mask)
                    swapped.append(mask)
        calls: list[tuple[_SuppliedMask, tuple[int, ...]]] = []
        hooks = [m.register_forward_hook(lambda mod, args, out: calls.append((mod, tuple(args[0].shape[1:]))))
                 for m in swapped]
        try:  # a dry run on one row records the order and the per-row shape of each dropout call
            with torch.no_grad():
                self.model.eval()
                self.model(self.inputs[0][:1])
        finally:
            self.model.train()
            for hook in hooks:
                hook.remove()
        if sorted(id(m) for m, _ in calls) != sorted(id(m) for m in swapped):
            return None
        self.mask_shapes = {id(m): shape for m, shape in calls}
        for m in swapped:  # torch's dropout: p = 0 is the identity and p = 1 zeros; neither draws
            m.mask = torch.zeros(()) if m.p >= 1 else None
        return [m for m, _ in calls if 0 < m.p < 1]

    def _masks(self, clients: list[int], size: int) -> tuple[torch.Tensor, ...]:
        out = []
        for m in self.drawing:
            keep = 1.0 - m.p
            shape = (size, *self.mask_shapes[id(m)])
            out.append(torch.stack([torch.empty(shape).bernoulli_(keep, generator=self.dropout_rng[c]).div_(keep)
                                    for c in clients]))
        return tuple(out)

    # -- the program -----------------------------------------------------------------------------------------
    def run(self) -> list[tuple[Weights, Weights, dict[str, float]]] | None:
        from torch.func import functional_call, vmap

        from eegprivacy.federated.dp import laplace_noise

        task, jobs = self.task, self.jobs
        drawing = self._swap_dropout()
        if drawing is None:
            return None
        self.drawing = drawing
        n_clients, bs = len(jobs), task.batch_size
        sizes = [x.shape[0] for x in self.inputs]
        epochs = [int(job.epochs) for job in jobs]
        per_epoch = [math.ceil(n / bs) for n in sizes]
        total_steps = [e * k for e, k in zip(epochs, per_epoch)]
        shuffle = [torch.Generator().manual_seed(derive_seed(job.seed, _SHUFFLE)) for job in jobs]
        noise_rng = [torch.Generator().manual_seed(derive_seed(job.seed, _NOISE)) for job in jobs]
        self.dropout_rng = [torch.Generator().manual_seed(derive_seed(job.seed, _DROPOUT)) for job in jobs]
        orders = [[torch.randperm(n, generator=g) for _ in range(e)] for n, g, e in zip(sizes, shuffle, epochs)]
        n_max = max(sizes)
        X = torch.zeros((n_clients, n_max, *task.input_shape))
        Y = torch.zeros((n_clients, n_max), dtype=torch.int64)
        for c, (x, t) in enumerate(zip(self.inputs, self.targets)):
            X[c, :x.shape[0]], Y[c, :t.shape[0]] = x, t

        dp = task.dp
        clips = dp is not None and dp.clips
        noisy = dp is not None and math.isfinite(dp.epsilon)
        n_values = sum(p[0].numel() for p in self.params.values())
        moments = {k: (torch.zeros_like(p), torch.zeros_like(p)) for k, p in self.params.items()}
        counts = [0] * n_clients
        totals, losses, norms = [0.0] * n_clients, [[] for _ in jobs], [[] for _ in jobs]
        model, trainable = self.model, self.trainable

        def client_loss(params, buffers, x, y, masks):
            for m, mask in zip(drawing, masks):
                m.mask = mask
            try:
                return F.cross_entropy(functional_call(model, (params, buffers), (x,)), y)
            finally:
                for m in drawing:
                    m.mask = None

        batched_loss = vmap(client_loss, randomness="error")
        for t in range(max(total_steps, default=0)):
            groups: dict[int, list[int]] = {}
            for c in range(n_clients):
                if t < total_steps[c]:
                    start = (t % per_epoch[c]) * bs
                    groups.setdefault(min(bs, sizes[c] - start), []).append(c)
            for size, clients in sorted(groups.items()):
                whole = len(clients) == n_clients
                index = torch.tensor(clients)
                rows = torch.stack([orders[c][t // per_epoch[c]][(t % per_epoch[c]) * bs:][:size] for c in clients])
                x, y = X[index[:, None], rows], Y[index[:, None], rows]
                with torch.no_grad():
                    params = {k: (p if whole else p[index]).detach().requires_grad_() for k, p in self.params.items()}
                    buffers = {k: b if whole else b[index] for k, b in self.buffers.items()}
                loss = batched_loss(params, buffers, x, y, self._masks(clients, size))
                grads = torch.autograd.grad(loss.sum(), [params[k] for k in trainable])
                with torch.no_grad():
                    g_count = len(clients)
                    if dp is not None:
                        per = torch.stack([torch.linalg.vector_norm(g.reshape(g_count, -1), dim=1, dtype=torch.float64)
                                           for g in grads], dim=1)
                        norm = torch.linalg.vector_norm(per, dim=1)
                        for c, value in zip(clients, norm.tolist()):
                            if not math.isfinite(value):
                                raise ValueError(f"gradient norm is {value}: the loss or the model diverged; DP "
                                                 "cannot clip it")
                            norms[c].append(value)
                        if clips:
                            factor = torch.where(norm > dp.clip_norm, dp.clip_norm / norm, 1.0).float()
                            grads = [g * factor.view(-1, *[1] * (g.dim() - 1)) for g in grads]
                        if noisy:
                            noise = torch.stack([laplace_noise((n_values,), dp.noise_scale, noise_rng[c])
                                                 for c in clients])
                            offset, noised = 0, []
                            for g in grads:
                                size_g = g[0].numel()
                                noised.append(g + noise[:, offset:offset + size_g].reshape(g.shape))
                                offset += size_g
                            grads = noised
                    for c in clients:
                        counts[c] += 1
                    steps = torch.tensor([counts[c] for c in clients], dtype=torch.float64)
                    step_size = (task.learning_rate / (1 - _BETA1 ** steps)).float()
                    bc2_sqrt = ((1 - _BETA2 ** steps) ** 0.5).float()
                    for k, g in zip(trainable, grads):
                        view = (-1, *[1] * (g.dim() - 1))
                        m_all, v_all = moments[k]
                        m, v = (m_all, v_all) if whole else (m_all[index], v_all[index])
                        m.lerp_(g, 1 - _BETA1)
                        v.mul_(_BETA2).addcmul_(g, g, value=1 - _BETA2)
                        denom = (v.sqrt() / bc2_sqrt.view(view)).add_(_ADAM_EPS)
                        p = params[k]
                        p.add_(-step_size.view(view) * m / denom)
                        if not whole:  # whole: p, m, v share storage with the stacked tensors already
                            m_all[index], v_all[index] = m, v
                            self.params[k][index] = p.detach()
                    if not whole:
                        for k, b in buffers.items():
                            self.buffers[k][index] = b
                for c, value in zip(clients, loss.detach().double().tolist()):
                    totals[c] += value * size
                    if (t + 1) % per_epoch[c] == 0:
                        losses[c].append(totals[c] / sizes[c])
                        totals[c] = 0.0
        return [self._result(c, losses[c], norms[c], counts[c]) for c in range(n_clients)]

    def _result(self, c: int, losses: list[float], norms: list[float], steps: int):
        def array(k):
            tensor = self.params[k][c] if k in self.params else self.buffers[k][c]
            return tensor.detach().cpu().numpy().copy()

        new_weights = [array(k) for k in self.names]
        new_local = [array(k) for k in self.task._buffer_names]
        return new_weights, new_local, _train_metrics(losses, steps, norms, new_weights)
