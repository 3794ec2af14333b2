"""DP-SGD fine-tuning of the downstream head (Study C defense), as a scikit-learn estimator.

The protocol (shared/spec/study-c-protocol.md, "Defenses and adaptive attacker") lists DP-SGD fine-tuning of
the downstream head -- per-sample clipping, RDP accountant, epsilon in {1, 4, 8} and infinity, delta = 1e-5 --
and asks for the head's balanced accuracy next to attribute leakage.

**(ours)** Operational reading: the head is a small MLP ``d -> hidden (ReLU) -> 2 logits`` trained on the
provider's embeddings for the downstream task (rest vs mental arithmetic). What the provider releases instead of
the raw embedding is the head's hidden representation (:meth:`DPSGDHead.transform`), so the audit measures
attribute leakage from the DP-trained representation and reports the head's balanced accuracy next to it. The DP
guarantee covers the units the head was trained on (a loss-threshold membership attack on
:meth:`DPSGDHead.sample_losses` tests it); it says nothing about windows that never entered training, whose
attributes may still be decodable -- that is what the leakage endpoint measures. ``epsilon = inf`` is the same
head trained by plain mini-batch SGD (shuffled batches, no clipping, no noise), the non-private reference point.

**Privacy unit.** The audit attacks subjects (a subject contributes ~25-30 windows), so the default
``privacy_unit="subject"`` runs subject-level DP-SGD: each step Poisson-samples *subjects* at rate ``q``, takes
each sampled subject's gradient of its mean window loss (per-window gradients by ``torch.func``, averaged within
the subject), clips that to ``max_grad_norm``, sums, adds N(0, (sigma C)^2) and divides by the expected number of
subjects per step, ``q * n_subjects``. Replacing, adding or removing one subject moves at most one clipped term,
so the RDP accountant of Opacus (``opacus.accountants.RDPAccountant``; noise from
``opacus.accountants.utils.get_noise_multiplier``) at the subject sampling rate gives epsilon *per subject*.
``privacy_unit="window"`` is the former behaviour (the same loop with every window its own unit: per-window
clipping, epsilon per window); its subject-level bound by group privacy is exposed beside it
(``subject_epsilon_``, ``subject_delta_``): k-fold group privacy of (eps, delta) gives (k eps, k e^{(k-1) eps}
delta) for k = the most windows any subject has, which is vacuous as soon as k e^{(k-1) eps} delta >= 1 (at
eps = 1 and k = 25 it is ~1e9).

**Standardisation (ours).** A mean/std learned from the private training embeddings would be a second, un-noised
release of them (it ships inside ``transform``/``predict``); no public embedding statistics exist, and a DP
mean/std of d = 256-512 coordinates from ~14 subjects drowns in noise (the L2 sensitivity grows like d). So each
window is standardised by its *own* statistics across coordinates (``(z - mean_j z_j) / std_j z_j``, a fixed,
data-independent map applied row by row, like a layer norm without parameters): it uses no other window, costs no
epsilon, and the epsilon reported is the whole guarantee. It removes each window's overall level and spread;
the hidden layer's bias absorbs the common offset profile. Hence at least 2 features are required.

The sampling rate is ``1 / ceil(n_windows / batch_size)`` in both units: ``batch_size`` is the expected number
of *windows* per step, and under subject sampling each subject enters a step with that probability, so the
expected window count per step and the steps per epoch are the same as under window sampling. Everything is
seeded from ``random_state`` (weight initialisation inside ``torch.random.fork_rng``, local ``torch.Generator``
objects for sampling and noise), so a given ``random_state`` reproduces the fit exactly and the global torch RNG
state is untouched. Pseudo-random noise is fine for an audit; it is not a production-grade DP release.

Global torch thread settings are left alone. The matrices are tiny, so on a loaded machine a caller running a
sweep should use ``torch.set_num_threads(1)`` around it.
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

__all__ = ["EPSILONS", "DELTA", "PRIVACY_UNITS", "DPSGDHead", "group_privacy"]

EPSILONS = (1.0, 4.0, 8.0, math.inf)  # protocol grid
DELTA = 1e-5
PRIVACY_UNITS = ("subject", "window")

# Opacus warnings that would repeat on every fit of a sweep; ignored only inside ``fit``.
_QUIET = (
    r"Optimal order is the (largest|smallest) alpha",
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


def _standardise_rows(Z: np.ndarray) -> np.ndarray:
    """Each window by its own mean and std across coordinates: data-independent, so it costs no epsilon."""
    centred = Z - Z.mean(axis=1, keepdims=True)
    spread = centred.std(axis=1, keepdims=True)
    return centred / np.where(spread > 0, spread, 1.0)


def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    """(k epsilon, k e^{(k-1) epsilon} delta): what an (epsilon, delta) guarantee for one unit says about a group
    of ``k`` units (Dwork & Roth 2014, Thm. 2.2 generalised to approximate DP). A delta >= 1 is vacuous: it
    promises nothing. Overflow gives inf."""
    k = _check_int("k", k)
    with np.errstate(over="ignore"):
        d = float(k * np.exp((k - 1) * float(epsilon)) * float(delta))
    return k * float(epsilon), d


class DPSGDHead(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Binary MLP head ``d -> hidden (ReLU) -> 2`` trained by DP-SGD on per-window standardised embeddings.

    Parameters
    ----------
    epsilon : target epsilon of the (epsilon, delta) guarantee after ``epochs`` passes, per ``privacy_unit``;
        ``np.inf`` trains by plain SGD without clipping or noise.
    delta : target delta, in (0, 1).
    max_grad_norm : clipping bound C of one unit's gradient (ignored when ``epsilon`` is inf).
    hidden : width of the hidden ReLU layer (= dimension of the released representation).
    epochs : passes over the data (in expectation, under Poisson sampling).
    batch_size : expected number of windows per step; the Poisson sampling rate of the units is
        ``1 / ceil(n_windows / batch_size)``.
    learning_rate : SGD step size (no momentum).
    privacy_unit : ``"subject"`` (default: sample and clip per subject, epsilon per subject; ``fit`` needs
        ``groups``) or ``"window"`` (per-window clipping, epsilon per window, the subject-level bound by group
        privacy beside it when ``groups`` is given).
    random_state : None, int or ``np.random.RandomState``; seeds initialisation, sampling and noise.

    Learned attributes: ``classes_``, ``model_`` (a plain ``nn.Sequential`` in eval mode), ``epsilon_`` (spent,
    RDP accountant at ``delta``, in ``eps_unit_``; inf without DP), ``eps_unit_``, ``noise_multiplier_`` (0
    without DP), ``sample_rate_``, ``n_steps_``, ``n_units_``, ``group_size_`` (most windows of one subject; None
    without ``groups``), ``subject_epsilon_``/``subject_delta_`` (the guarantee per subject: epsilon_ itself
    under subject-level DP, the group-privacy bound under window-level DP, NaN when unknown),
    ``subject_bound_vacuous_`` (subject_delta_ >= 1), ``standardisation_`` (``"per_window"``),
    ``n_features_in_``.
    """

    def __init__(self, epsilon: float = np.inf, delta: float = 1e-5, max_grad_norm: float = 1.0,
                 hidden: int = 32, epochs: int = 20, batch_size: int = 64, learning_rate: float = 0.1,
                 privacy_unit: str = "subject", random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.max_grad_norm = max_grad_norm
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.privacy_unit = privacy_unit
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
        if self.privacy_unit not in PRIVACY_UNITS:
            raise ValueError(f"privacy_unit must be one of {PRIVACY_UNITS}, got {self.privacy_unit!r}")
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
        if Z.shape[0] < 1 or Z.shape[1] < 2:
            raise ValueError(f"Z must have at least one row and two columns (each window is standardised by its "
                             f"own coordinates), got shape {Z.shape}")
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
        return torch.from_numpy(_standardise_rows(Z).astype(np.float32))

    def _units(self, groups, n: int) -> tuple[np.ndarray, int | None]:
        """(unit index of each window, most windows of one subject or None without groups)."""
        if groups is None:
            if self.privacy_unit == "subject":
                raise ValueError("privacy_unit='subject' needs groups (the subject of each window) in fit; pass "
                                 "groups=... or set privacy_unit='window'")
            return np.arange(n), None
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.shape[0] != n:
            raise ValueError(f"groups must be 1-d with one subject per row ({n}), got shape {groups.shape}")
        _, subject, counts = np.unique(groups, return_inverse=True, return_counts=True)
        k = int(counts.max())
        return (subject if self.privacy_unit == "subject" else np.arange(n)), k

    # ------------------------------------------------------------------ fit
    def fit(self, Z, y, groups=None):
        """Train the head; ``groups`` (one subject id per row) is required under ``privacy_unit='subject'``."""
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
        units, k = self._units(groups, Z.shape[0])
        self.classes_ = classes
        target = self._encode(y_arr, Z.shape[0])
        X = torch.from_numpy(_standardise_rows(Z).astype(np.float32))
        t = torch.from_numpy(target)
        n, d = X.shape

        rng = check_random_state(self.random_state)
        seed_init, seed_loader, seed_noise = (int(s) for s in rng.randint(0, 2**31 - 1, size=3))
        steps_per_epoch = math.ceil(n / min(p["batch_size"], n))
        self.sample_rate_ = 1.0 / steps_per_epoch
        self.n_units_ = int(units.max()) + 1
        self.eps_unit_ = self.privacy_unit
        self.standardisation_ = "per_window"

        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            for pattern in _QUIET:
                warnings.filterwarnings("ignore", message=pattern)
            torch.manual_seed(seed_init)
            model = _mlp(d, p["hidden"])
            if math.isinf(p["epsilon"]):
                loader = DataLoader(TensorDataset(X, t), batch_size=min(p["batch_size"], n), shuffle=True,
                                    generator=torch.Generator().manual_seed(seed_loader))
                self.n_steps_ = self._train(model, torch.optim.SGD(model.parameters(), lr=p["learning_rate"]),
                                            nn.CrossEntropyLoss(), loader, p["epochs"])
                self.epsilon_ = math.inf
                self.noise_multiplier_ = 0.0
            else:
                self._fit_private(model, X, t, torch.from_numpy(units), p, steps_per_epoch * p["epochs"],
                                  seed_loader, seed_noise)
            # A fresh plain module with the trained weights (built inside fork_rng: nn.Linear's default
            # initialisation draws from the global generator).
            clean = _mlp(d, p["hidden"])
        clean.load_state_dict(copy.deepcopy({k_: v.detach() for k_, v in model.state_dict().items()}))
        for param in clean.parameters():
            param.requires_grad_(False)
        self.model_ = clean.eval()
        self.n_features_in_ = d
        self._set_subject_guarantee(p["delta"], k)
        return self

    def _fit_private(self, model, X, t, units, p: dict, n_steps: int, seed_sample: int, seed_noise: int) -> None:
        """DP-SGD with Poisson sampling of units (subjects or windows) and per-unit clipping of the unit's mean
        window gradient; noise calibrated and epsilon read from Opacus's RDP accountant."""
        from opacus.accountants import RDPAccountant
        from opacus.accountants.utils import get_noise_multiplier
        from torch.func import functional_call, grad, vmap

        q, C, m = self.sample_rate_, p["max_grad_norm"], self.n_units_
        sigma = float(get_noise_multiplier(target_epsilon=p["epsilon"], target_delta=p["delta"], sample_rate=q,
                                           steps=n_steps, accountant="rdp"))
        names = [name for name, _ in model.named_parameters()]
        params = {name: w.detach().clone() for name, w in model.named_parameters()}

        def window_loss(prm, x, target):
            logits = functional_call(model, prm, (x.unsqueeze(0),))
            return nn.functional.cross_entropy(logits, target.unsqueeze(0))

        per_window = vmap(grad(window_loss), in_dims=(None, 0, 0))
        sampler = torch.Generator().manual_seed(seed_sample)
        noise_gen = torch.Generator().manual_seed(seed_noise)
        sizes = [params[name].numel() for name in names]
        expected_units = q * m  # the sum is divided by its expectation (public), as Opacus does
        model.train()
        for _ in range(n_steps):
            chosen = torch.rand(m, generator=sampler) < q
            rows = torch.nonzero(chosen[units]).squeeze(1)
            total = torch.zeros(sum(sizes))
            if rows.numel() > 0:
                grads = per_window(params, X[rows], t[rows])
                G = torch.cat([grads[name].reshape(rows.numel(), -1) for name in names], dim=1)
                _, local = torch.unique(units[rows], return_inverse=True)
                n_local = int(local.max()) + 1
                unit_grad = torch.zeros(n_local, G.shape[1]).index_add_(0, local, G)
                unit_grad /= torch.bincount(local, minlength=n_local).unsqueeze(1).to(G.dtype)
                norms = unit_grad.norm(dim=1, keepdim=True)
                total = (unit_grad * torch.clamp(C / (norms + 1e-12), max=1.0)).sum(dim=0)
            # an empty Poisson batch is still a (noise-only) step for the accountant
            total = total + torch.normal(0.0, sigma * C, size=total.shape, generator=noise_gen)
            step = total / expected_units
            for name, chunk in zip(names, torch.split(step, sizes)):
                params[name] -= p["learning_rate"] * chunk.reshape(params[name].shape)
        with torch.no_grad():
            for name, w in model.named_parameters():
                w.copy_(params[name])
        accountant = RDPAccountant()
        accountant.history.append((sigma, q, n_steps))
        self.epsilon_ = float(accountant.get_epsilon(p["delta"]))
        self.noise_multiplier_ = sigma
        self.n_steps_ = n_steps

    def _set_subject_guarantee(self, delta: float, k: int | None) -> None:
        """The guarantee per subject: epsilon_ itself under subject-level DP; under window-level DP the k-fold
        group-privacy bound for k = the most windows of one subject (NaN without groups)."""
        self.group_size_ = k
        if self.eps_unit_ == "subject":
            self.subject_epsilon_, self.subject_delta_ = self.epsilon_, (delta if math.isfinite(self.epsilon_)
                                                                         else 1.0)
        elif k is None:
            self.subject_epsilon_, self.subject_delta_ = math.nan, math.nan
        elif math.isinf(self.epsilon_):
            self.subject_epsilon_, self.subject_delta_ = math.inf, 1.0
        else:
            self.subject_epsilon_, self.subject_delta_ = group_privacy(self.epsilon_, delta, k)
        self.subject_bound_vacuous_ = bool(self.subject_delta_ >= 1.0)

    @staticmethod
    def _train(model, optimizer, criterion, loader, epochs: int) -> int:
        model.train()
        steps = 0
        for _ in range(epochs):
            for xb, yb in loader:
                optimizer.zero_grad(set_to_none=True)
                criterion(model(xb), yb).backward()
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
