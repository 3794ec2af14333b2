"""``FedAvgClassifier``: a scikit-learn classifier whose ``fit`` is a federation, one client per site.

Study A's decentralised scenario: each hospital trains the same MLP on its own rows and only model weights
leave it; the server averages them with FedAvg (weighted by each hospital's row count). Because it is a
plain estimator (clonable, ``random_state``, ``fit(X, y, clients=...)``), it drops into
``LOSOEvaluation(..., fit_params={"clients": hospital_of_row})`` like the central MLP.

What the clients share, besides weights each round (documented because it is part of the threat model):

- their label set (the union fixes the output layer: a hospital with only negative patients still trains
  the shared two-class model);
- with ``standardize=True``, one query round of per-feature moments (row count, mean, sum of squared
  deviations), from which the server builds the pooled StandardScaler the central pipeline would fit — the
  same numbers without pooling any row. ``standardize=False`` shares nothing beyond weights and trains on
  the features as given.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.federated.simulation import run_fedavg
from eegprivacy.federated.task import MLPTask

__all__ = ["FedAvgClassifier"]


class FedAvgClassifier(ClassifierMixin, BaseEstimator):
    """MLP (scikit-learn ``MLPClassifier``, Adam) trained by FedAvg across the sites in ``clients``.

    Each of `num_rounds` rounds: every site runs `local_epochs` ``partial_fit`` passes over its rows from
    the current global weights, then the server averages the returned weights by row count. All sites
    start from the same weights, drawn by the server from `random_state`.

    Learned attributes: ``classes_``, ``coefs_``, ``intercepts_``, ``model_`` (an ``MLPClassifier`` holding
    the global weights), ``mean_``/``scale_`` (the federated scaler, None without standardisation),
    ``history_`` (per round: aggregated and per-site train loss, rows per site; sites are indices in sorted
    order of the ``clients`` values), ``n_clients_``, ``n_features_in_``.
    """

    def __init__(self, hidden_layer_sizes=(100,), num_rounds=20, local_epochs=5, learning_rate_init=1e-3,
                 alpha=1e-4, batch_size=32, backend="inprocess", random_state=None, standardize=True):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.num_rounds = num_rounds
        self.local_epochs = local_epochs
        self.learning_rate_init = learning_rate_init
        self.alpha = alpha
        self.batch_size = batch_size
        self.backend = backend
        self.random_state = random_state
        self.standardize = standardize

    def _task(self) -> MLPTask:
        return MLPTask(n_features=self.n_features_in_, classes=self.classes_,
                       hidden_layer_sizes=self.hidden_layer_sizes, learning_rate_init=self.learning_rate_init,
                       alpha=self.alpha, batch_size=self.batch_size)

    def fit(self, X, y, clients=None):
        """Run the federation; `clients` gives each row's site (None: one site holds every row)."""
        X, y = validate_data(self, X, y, dtype=float)
        clients = np.zeros(y.size, dtype=int) if clients is None else np.asarray(clients).ravel()
        if clients.size != y.size:
            raise ValueError(f"clients has {clients.size} entries for {y.size} rows")
        self.classes_ = np.unique(y)
        sites = np.unique(clients)  # a site without rows in this fit simply is not a client
        self.n_clients_ = int(sites.size)
        self.mean_ = self.scale_ = None
        if self.classes_.size < 2:  # nothing to learn: predict the one class seen (as LOSO expects)
            self.coefs_ = self.intercepts_ = None
            self.model_ = None
            self.history_ = []
            return self
        seed = self.random_state
        if not isinstance(seed, (int, np.integer)):  # None or a RandomState: draw this fit's seed from it
            seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
        partitions = [(X[clients == s], y[clients == s]) for s in sites]
        task = self._task()
        result = run_fedavg(lambda: task, partitions, num_rounds=self.num_rounds, local_epochs=self.local_epochs,
                            seed=int(seed), backend=self.backend, standardize=self.standardize)
        n_layers = len(result.weights) // 2
        self.coefs_ = result.weights[:n_layers]
        self.intercepts_ = result.weights[n_layers:]
        self.model_ = task.model(result.weights)
        self.mean_, self.scale_ = result.feature_mean, result.feature_scale
        self.history_ = result.history
        return self

    def _transform(self, X) -> np.ndarray:
        X = validate_data(self, X, dtype=float, reset=False)
        if self.mean_ is not None:
            X = (X - self.mean_) / self.scale_
        return X

    def predict_proba(self, X) -> np.ndarray:
        check_is_fitted(self, "classes_")
        X = self._transform(X)
        if self.model_ is None:
            return np.ones((X.shape[0], 1))
        return self.model_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
