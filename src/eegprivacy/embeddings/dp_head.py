"""DP-SGD fine-tuning of the downstream head (Study C defense), as a scikit-learn estimator.

The protocol (shared/spec/study-c-protocol.md, "Defenses and adaptive attacker") lists DP-SGD fine-tuning of
the downstream head -- Opacus, per-sample clipping, RDP accountant, epsilon in {1, 4, 8} and infinity,
delta = 1e-5 -- and asks for the head's balanced accuracy next to attribute leakage.

**(ours)** Operational reading: the head is a small MLP ``d -> hidden (ReLU) -> 2 logits`` trained on the
provider's standardised embeddings for the downstream task (rest vs mental arithmetic). What the provider
releases instead of the raw embedding is the head's hidden representation (:meth:`DPSGDHead.transform`), so
the audit measures attribute leakage from the DP-trained representation (``endpoints.attribute_leakage`` on
``transform(Z)``) and reports the head's balanced accuracy (``predict``) next to it. The DP guarantee covers
the rows the head was trained on (a loss-threshold membership attack on :meth:`DPSGDHead.sample_losses`
tests it; ``endpoints.membership_auc``); it says nothing about windows that never entered training, whose
attributes may still be decodable from the representation -- that is exactly what the leakage endpoint
measures. ``epsilon = inf`` is the same head trained by plain mini-batch SGD (shuffled batches, no
clipping, no noise), the non-private reference point.

With finite epsilon, ``opacus.PrivacyEngine(accountant="rdp", secure_mode=False)`` and
``make_private_with_epsilon`` calibrate the noise multiplier for ``epochs`` passes with Poisson sampling at
rate ``1 / ceil(n / batch_size)``. Everything is seeded from ``random_state`` (weight initialisation inside
``torch.random.fork_rng``, and local ``torch.Generator`` objects for Poisson sampling and for the noise), so a
given ``random_state`` reproduces the fit exactly and the global torch RNG state is untouched. Pseudo-random
noise (``secure_mode=False``) is fine for an audit; it is not a production-grade DP release.

Global torch thread settings are left alone. The matrices are tiny, so on a loaded machine a caller running a
sweep should use ``torch.set_num_threads(1)`` around it (600 x 256 at epsilon = 8 fits in about 1 s on one
thread, but took 3-20 s with two contending intra-op threads on a busy 2-core box).
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from eegprivacy.validation import EPSILON_OR_INF, check

__all__ = ["EPSILONS", "DELTA", "DPSGDHead"]

EPSILONS = (1.0, 4.0, 8.0, math.inf)  # protocol grid
DELTA = 1e-5

# Opacus warnings that would repeat on every fit of a sweep; ignored only inside ``fit``.
_QUIET = (
    r"Secure RNG turned off",
    r"Optimal order is the (largest|smallest) alpha",
    r"Full backward hook is firing",
)


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_positive(name: str, value, allow_inf: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0, got {value!r}") from None
    if math.isnan(v) or v <= 0 or (math.isinf(v) and not allow_inf):
        kind = "a number > 0 (inf allowed)" if allow_inf else "a finite number > 0"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return v


def _mlp(d: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, 2))


class DPSGDHead(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Binary MLP head ``d -> hidden (ReLU) -> 2`` trained by DP-SGD (Opacus) on standardised embeddings.

    Parameters
    ----------
    epsilon : target epsilon of the (epsilon, delta) guarantee after ``epochs`` passes; ``np.inf`` trains by
        plain SGD without clipping or noise.
    delta : target delta, in (0, 1).
    max_grad_norm : per-sample gradient clipping bound C (ignored when ``epsilon`` is inf).
    hidden : width of the hidden ReLU layer (= dimension of the released representation).
    epochs : passes over the data (in expectation, under Poisson sampling).
    batch_size : expected batch size; the Poisson sampling rate is ``1 / ceil(n / batch_size)``.
    learning_rate : SGD step size (no momentum).
    random_state : None, int or ``np.random.RandomState``; seeds initialisation, sampling and noise.

    Learned attributes: ``classes_``, ``mean_``, ``scale_``, ``model_`` (a plain ``nn.Sequential`` in eval
    mode, free of Opacus hooks), ``epsilon_`` (epsilon spent, from the RDP accountant at ``delta``; inf
    without DP), ``noise_multiplier_`` (0 without DP), ``sample_rate_``, ``n_steps_``, ``n_features_in_``.
    """

    def __init__(self, epsilon: float = np.inf, delta: float = 1e-5, max_grad_norm: float = 1.0,
                 hidden: int = 32, epochs: int = 20, batch_size: int = 64, learning_rate: float = 0.1,
                 random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.max_grad_norm = max_grad_norm
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.random_state = random_state

    # ------------------------------------------------------------------ validation helpers
    def _check_params(self) -> dict:
        eps = float(check(float(self.epsilon), EPSILON_OR_INF, "epsilon"))
        try:
            delta = float(self.delta)
        except (TypeError, ValueError):
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}") from None
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")
        return dict(epsilon=eps, delta=delta,
                    max_grad_norm=_check_positive("max_grad_norm", self.max_grad_norm),
                    learning_rate=_check_positive("learning_rate", self.learning_rate),
                    hidden=_check_int("hidden", self.hidden), epochs=_check_int("epochs", self.epochs),
                    batch_size=_check_int("batch_size", self.batch_size))

    @staticmethod
    def _check_Z(Z, n_features: int | None = None) -> np.ndarray:
        Z = np.asarray(Z, dtype=float)
        if Z.ndim != 2:
            raise ValueError(f"Z must be a 2-d array (n_samples, n_features), got shape {Z.shape}")
        if Z.shape[0] < 1 or Z.shape[1] < 1:
            raise ValueError(f"Z must have at least one row and one column, got shape {Z.shape}")
        if not np.isfinite(Z).all():
            raise ValueError("Z contains non-finite values (NaN or inf)")
        if n_features is not None and Z.shape[1] != n_features:
            raise ValueError(f"Z has {Z.shape[1]} features but the head was fitted on {n_features}")
        return Z

    def _encode(self, y, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim != 1:
            y = y.ravel() if y.ndim == 2 and y.shape[1] == 1 else y
        if y.ndim != 1:
            raise ValueError(f"y must be 1-d, got shape {y.shape}")
        if y.shape[0] != n:
            raise ValueError(f"row counts differ: Z has {n} rows, y has {y.shape[0]}")
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[idx], y):
            unknown = np.setdiff1d(np.unique(y), self.classes_)
            raise ValueError(f"y contains labels not seen in fit: {unknown[:5].tolist()}")
        return idx.astype(np.int64)

    def _tensor(self, Z) -> torch.Tensor:
        check_is_fitted(self, "model_")
        Z = self._check_Z(Z, self.n_features_in_)
        return torch.from_numpy(((Z - self.mean_) / self.scale_).astype(np.float32))

    # ------------------------------------------------------------------ fit
    def fit(self, Z, y):
        p = self._check_params()
        Z = self._check_Z(Z)
        y_arr = np.asarray(y)
        if y_arr.ndim == 2 and y_arr.shape[1] == 1:
            y_arr = y_arr.ravel()
        if y_arr.ndim != 1:
            raise ValueError(f"y must be 1-d, got shape {y_arr.shape}")
        if y_arr.shape[0] != Z.shape[0]:
            raise ValueError(f"row counts differ: Z has {Z.shape[0]} rows, y has {y_arr.shape[0]}")
        classes = np.unique(y_arr)
        if classes.size != 2:
            raise ValueError(f"y must contain exactly 2 classes (binary head), got {classes.size}: "
                             f"{classes[:5].tolist()}")
        self.classes_ = classes
        target = self._encode(y_arr, Z.shape[0])

        self.mean_ = Z.mean(axis=0)
        scale = Z.std(axis=0)
        self.scale_ = np.where(scale > 0, scale, 1.0)
        X = torch.from_numpy(((Z - self.mean_) / self.scale_).astype(np.float32))
        t = torch.from_numpy(target)
        n, d = X.shape

        rng = check_random_state(self.random_state)
        seed_init, seed_loader, seed_noise = (int(s) for s in rng.randint(0, 2**31 - 1, size=3))
        loader_gen = torch.Generator().manual_seed(seed_loader)
        dataset = TensorDataset(X, t)
        batch = min(p["batch_size"], n)

        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            for pattern in _QUIET:
                warnings.filterwarnings("ignore", message=pattern)
            torch.manual_seed(seed_init)
            model = _mlp(d, p["hidden"])
            optimizer = torch.optim.SGD(model.parameters(), lr=p["learning_rate"])
            criterion = nn.CrossEntropyLoss()
            if math.isinf(p["epsilon"]):
                loader = DataLoader(dataset, batch_size=batch, shuffle=True, generator=loader_gen)
                self.n_steps_ = self._train(model, optimizer, criterion, loader, p["epochs"])
                self.epsilon_ = math.inf
                self.noise_multiplier_ = 0.0
                self.sample_rate_ = 1.0 / len(loader)
            else:
                from opacus import PrivacyEngine

                loader = DataLoader(dataset, batch_size=batch, generator=loader_gen)
                engine = PrivacyEngine(accountant="rdp", secure_mode=False)
                dp_model, dp_optimizer, dp_loader = engine.make_private_with_epsilon(
                    module=model, optimizer=optimizer, data_loader=loader, target_epsilon=p["epsilon"],
                    target_delta=p["delta"], epochs=p["epochs"], max_grad_norm=p["max_grad_norm"],
                    noise_generator=torch.Generator().manual_seed(seed_noise))
                self.n_steps_ = self._train(dp_model, dp_optimizer, criterion, dp_loader, p["epochs"])
                self.epsilon_ = float(engine.get_epsilon(p["delta"]))
                self.noise_multiplier_ = float(dp_optimizer.noise_multiplier)
                self.sample_rate_ = 1.0 / len(loader)
                dp_model.remove_hooks()
            # A fresh plain module with the trained weights: no Opacus hooks or per-sample grad attributes.
            # (Built inside fork_rng: nn.Linear's default initialisation draws from the global generator.)
            clean = _mlp(d, p["hidden"])
        clean.load_state_dict(copy.deepcopy({k: v.detach() for k, v in model.state_dict().items()}))
        for param in clean.parameters():
            param.requires_grad_(False)
        self.model_ = clean.eval()
        self.n_features_in_ = d
        return self

    @staticmethod
    def _train(model, optimizer, criterion, loader, epochs: int) -> int:
        model.train()
        steps = 0
        for _ in range(epochs):
            for xb, yb in loader:
                optimizer.zero_grad(set_to_none=True)
                logits = model(xb)
                # an empty Poisson batch still counts as a (noise-only) step for the accountant
                loss = criterion(logits, yb) if xb.shape[0] > 0 else logits.sum() * 0.0
                loss.backward()
                optimizer.step()
                steps += 1
        return steps

    # ------------------------------------------------------------------ inference
    def _logits(self, Z) -> np.ndarray:
        X = self._tensor(Z)
        with torch.no_grad():
            return self.model_(X).double().numpy()

    def decision_function(self, Z) -> np.ndarray:
        """logit(classes_[1]) - logit(classes_[0]); positive means ``classes_[1]``."""
        logits = self._logits(Z)
        return logits[:, 1] - logits[:, 0]

    def predict_proba(self, Z) -> np.ndarray:
        logits = self._logits(Z)
        logits = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, Z) -> np.ndarray:
        logits = self._logits(Z)
        return self.classes_[np.argmax(logits, axis=1)]

    def transform(self, Z) -> np.ndarray:
        """The released representation: hidden ReLU activations, shape (n, hidden), float64."""
        X = self._tensor(Z)
        with torch.no_grad():
            return self.model_[1](self.model_[0](X)).double().numpy()

    def sample_losses(self, Z, y) -> np.ndarray:
        """Per-sample cross-entropy (natural log) of the true label, shape (n,): the loss-threshold attack's score.

        Members are the rows the head was fitted on; lower loss suggests membership.
        """
        logits = self._logits(Z)
        target = self._encode(y, logits.shape[0])
        m = logits.max(axis=1)
        lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
        return lse - logits[np.arange(logits.shape[0]), target]
