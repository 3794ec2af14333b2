"""A PyTorch model as a federated task (study B): the :class:`~eegprivacy.federated.task.Task` contract with
Adam, cross-entropy, mini-batches and, optionally, a DP step at every local optimiser step.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from eegprivacy.federated.task import Weights, derive_seed

__all__ = ["TorchTask"]

# Sub-streams of a train call's seed.
_SHUFFLE, _NOISE, _DROPOUT = 0, 1, 2
BATCHNORM_STATS = ("shared", "local")


class TorchTask:
    """A torch classifier as a federated task.

    `model`: a name for :func:`eegprivacy.models.build_model` (``"simplenet"``, ``"eegnet"``; `model_kwargs`
    go to it) or a callable ``model(seed) -> nn.Module``. `classes`: the federation's label set (labels are
    mapped to output indices in sorted order). `dp`: an object with ``privatise_(parameters, generator) ->
    float`` (e.g. :class:`eegprivacy.federated.dp.LaplaceGradientDP`), called after ``loss.backward()`` and
    before ``optimizer.step()`` at every local step on the trainable parameters; what it returns (the gradient
    norm before clipping) is summarised in the train metrics. It does not cover the BatchNorm running
    statistics: with ``batchnorm_stats="shared"`` they travel with the weights un-noised (see
    :attr:`parameter_mask`, :attr:`unnoised_channels`); with ``"local"`` they stay with the client (FedBN).

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
        if dp is not None and not callable(getattr(dp, "privatise_", None)):
            raise TypeError("dp must have a privatise_(parameters, generator) method")
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
        that depends on its data (see :mod:`eegprivacy.federated.client_app`)."""
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
        metrics = {"train_loss": losses[-1] if losses else float("nan"), "local_steps": float(steps)}
        if norms:
            metrics.update(grad_norm_mean=float(np.mean(norms)), grad_norm_max=float(np.max(norms)))
        if not all(np.isfinite(w).all() for w in new_weights):
            raise FloatingPointError("local training produced non-finite weights (diverged)")
        return new_weights, new_local, metrics

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
