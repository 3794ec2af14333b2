"""What a federated client computes, independent of Flower: weights in, local training, weights out.

A task is stateless between calls: every method takes the weights it works on. That is what lets the same
task run inside a Flower simulation (where a ClientApp may be rebuilt for every message, in another process)
and inside the in-process driver, with identical numbers. Weights travel as a list of numpy arrays, the
format an ``ArrayRecord`` round-trips exactly; a torch task (study B) implements the same four methods.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import sklearn
from sklearn.neural_network import MLPClassifier

__all__ = ["Task", "MLPTask", "derive_seed"]

Weights = list[np.ndarray]


@runtime_checkable
class Task(Protocol):
    """The contract between the federated layer and a model."""

    def initial_weights(self, seed: int) -> Weights:
        """The global model the server starts from (drawn once, sent to every client)."""

    def train(self, weights: Weights, X: np.ndarray, y: np.ndarray, *, epochs: int, seed: int
              ) -> tuple[Weights, dict[str, float]]:
        """Local training from `weights`; returns the new weights and metrics (at least ``train_loss``)."""

    def evaluate(self, weights: Weights, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Loss and accuracy of `weights` on local data."""

    def predict_proba(self, weights: Weights, X: np.ndarray) -> np.ndarray:
        """Class probabilities, columns in the task's class order."""


def derive_seed(seed: int, *keys: int) -> int:
    """A 32-bit seed for (seed, keys...), e.g. (run seed, partition, round): independent streams that do not
    depend on which process or in what order a client runs."""
    return int(np.random.SeedSequence(int(seed), spawn_key=tuple(int(k) for k in keys)).generate_state(1)[0])


class MLPTask:
    """scikit-learn ``MLPClassifier`` (Adam) as a federated task; one ``partial_fit`` pass per local epoch.

    Every local training starts a fresh Adam optimiser on the received weights (the usual FedAvg client;
    optimiser state cannot survive a round when clients are rebuilt per message). `classes` is the label set
    of the whole federation, so a client whose rows carry one class still trains the shared 2-class model.
    """

    def __init__(self, n_features: int, classes: Sequence = (0, 1), hidden_layer_sizes: Sequence[int] = (100,),
                 learning_rate_init: float = 1e-3, alpha: float = 1e-4, batch_size: int = 32,
                 activation: str = "relu"):
        self.n_features = int(n_features)
        self.classes = np.unique(np.asarray(classes))  # sorted, as MLPClassifier.classes_
        if self.classes.size < 2:
            raise ValueError("a federated classifier needs at least two classes")
        self.hidden_layer_sizes = tuple(int(h) for h in np.atleast_1d(hidden_layer_sizes))
        self.learning_rate_init = float(learning_rate_init)
        self.alpha = float(alpha)
        self.batch_size = int(batch_size)
        self.activation = activation
        self._primed: MLPClassifier | None = None

    @property
    def layer_units(self) -> list[int]:
        n_out = 1 if self.classes.size == 2 else self.classes.size
        return [self.n_features, *self.hidden_layer_sizes, n_out]

    def initial_weights(self, seed: int) -> Weights:
        """Glorot-uniform draws in scikit-learn's order (per layer: coef, then intercept, from one
        ``RandomState(seed)``), so the start equals ``MLPClassifier(random_state=seed)``'s own."""
        rng = np.random.RandomState(int(seed))
        factor = 2.0 if self.activation == "logistic" else 6.0
        coefs, intercepts = [], []
        for fan_in, fan_out in zip(self.layer_units[:-1], self.layer_units[1:]):
            bound = np.sqrt(factor / (fan_in + fan_out))
            coefs.append(rng.uniform(-bound, bound, (fan_in, fan_out)))
            intercepts.append(rng.uniform(-bound, bound, fan_out))
        return coefs + intercepts  # the order of MLPClassifier's own parameter list

    def model(self, weights: Weights) -> MLPClassifier:
        """A fitted ``MLPClassifier`` holding `weights` (coefs first, then intercepts), ready for
        ``predict_proba`` or further ``partial_fit`` with a fresh optimiser."""
        n = len(self.layer_units) - 1
        if len(weights) != 2 * n:
            raise ValueError(f"expected {2 * n} arrays (coefs then intercepts), got {len(weights)}")
        # A shallow copy is enough: training rebinds every attribute it changes except `loss_curve_`, which
        # it appends to, so that one gets its own list (a deepcopy cost more than the local epochs).
        mlp = copy.copy(self._template())
        mlp.loss_curve_ = []
        mlp.coefs_ = [np.array(w, dtype=float) for w in weights[:n]]  # own, writable: Adam updates in place
        mlp.intercepts_ = [np.array(w, dtype=float) for w in weights[n:]]
        return mlp

    def _template(self) -> MLPClassifier:
        """scikit-learn has no public way to load weights, so one ``partial_fit`` on one dummy row per class
        builds the fitted structure once; its weights are always overwritten, and its Adam state is dropped
        so that every local training starts a fresh optimiser."""
        if self._primed is None:
            mlp = MLPClassifier(hidden_layer_sizes=self.hidden_layer_sizes, activation=self.activation,
                                solver="adam", alpha=self.alpha, learning_rate_init=self.learning_rate_init,
                                batch_size=self.classes.size, shuffle=True, random_state=0)
            mlp.partial_fit(np.zeros((self.classes.size, self.n_features)), self.classes, classes=self.classes)
            del mlp._optimizer  # partial_fit builds a new one when absent
            mlp.set_params(batch_size=self.batch_size)
            self._primed = mlp
        return self._primed

    def train(self, weights: Weights, X, y, *, epochs: int, seed: int) -> tuple[Weights, dict[str, float]]:
        X = np.asarray(X, dtype=float)
        y = np.asarray(y)
        if X.shape[0] == 0:
            raise ValueError("a client with no rows cannot train")
        mlp = self.model(weights)
        # One RandomState across the epochs: each pass shuffles differently, and reproducibly.
        mlp.set_params(random_state=np.random.RandomState(seed), batch_size=min(self.batch_size, X.shape[0]))
        losses = []
        # The parameters were validated when the template was built and X, y by the caller; re-validating
        # them on every pass cost more than the pass itself (sklearn still checks the weights are finite).
        with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
            for _ in range(int(epochs)):
                mlp.partial_fit(X, y)
                losses.append(float(mlp.loss_))
        metrics = {"train_loss": losses[-1] if losses else float("nan")}
        return mlp.coefs_ + mlp.intercepts_, metrics

    def predict_proba(self, weights: Weights, X) -> np.ndarray:
        return self.model(weights).predict_proba(np.asarray(X, dtype=float))

    def evaluate(self, weights: Weights, X, y) -> dict[str, float]:
        """Mean log-loss (without the L2 term) and accuracy of `weights` on (X, y)."""
        proba = np.clip(self.predict_proba(weights, X), 1e-15, 1.0)
        y = np.asarray(y)
        idx = np.searchsorted(self.classes, y)
        loss = float(-np.mean(np.log(proba[np.arange(y.size), idx]))) if y.size else float("nan")
        acc = float(np.mean(self.classes[np.argmax(proba, axis=1)] == y)) if y.size else float("nan")
        return {"loss": loss, "accuracy": acc}
