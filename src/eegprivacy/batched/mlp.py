"""scikit-learn's ``StandardScaler + MLPClassifier`` (Adam, full batch) for many training sets at once.

Study A's patient classifier is the paper's ``StandardScaler + MLPClassifier(hidden_layer_sizes=(100,),
activation="relu", solver="adam", alpha=1e-4, max_iter=200)`` (:func:`eegprivacy.evaluation.default_mlp`), fitted
once per LOSO fold: on MSU with the inner LOSO that is 84 + 84·83/2 = 3,570 fits per cell, each on at most 83
rows. scikit-learn's ``batch_size="auto"`` is ``min(200, n_samples)``, so on such tables every epoch is one
full-batch Adam step and a fit is a deterministic function of (training rows, labels, seed): the per-epoch shuffle
only reorders rows inside the one batch. That is what makes batching exact. :class:`AdamMLP` trains all tasks
of an evaluation together: every task sees all rows of ``X`` and a 0/1 weight per row selects its training rows,
so one epoch of every task is one batched product per layer (``torch.baddbmm``), and the held-out rows' forward
pass comes for free.

What it buys, measured side by side on one core (``benchmarks/loso_mlp.py``): about 2x scikit-learn's time per
fit, not more. A fit on MSU's 83 × 176 table is compute- and memory-bound (two 83·176·100 products and an Adam
update of 17,600 weights per epoch), not Python-bound: scikit-learn already spends ~4x the pure GEMM time, and
batching can only remove that overhead. Batches are kept small (``tasks_per_batch``) so their inputs stay in cache.

The maths, step for step as scikit-learn 1.7's ``MLPClassifier._fit_stochastic`` with one batch:

- scaling: each task's ``StandardScaler`` on its training rows (population variance; a column whose variance is
  within rounding of zero, by scikit-learn's own rule, keeps scale 1);
- initial weights: Glorot-uniform, bound ``sqrt(6 / (fan_in + fan_out))``, drawn from
  ``RandomState(random_state)`` as coef then intercept per layer — the same start for every task, as a seeded
  ``MLPClassifier`` cloned per fold has;
- epoch: forward (ReLU hidden layer, logistic output), loss = binary log loss (probabilities clipped to
  ``[eps, 1 - eps]``) + ``alpha/2 · ||W||² / n``, gradients ``(Aᵀδ + alpha·W) / n``, then Adam with the
  bias-corrected step ``lr · sqrt(1 - β₂ᵗ) / (1 - β₁ᵗ)``;
- stopping: a task whose training loss has not improved by ``tol`` for more than ``n_iter_no_change`` epochs
  stops (after that epoch's update), else it stops at ``max_iter``; a stopped task is frozen and its held-out
  probabilities taken then.

A task whose training rows hold one class only is not trained: its model is certain of that class, as
:func:`eegprivacy.evaluation.loso._positive_proba` answers for a one-class ``MLPClassifier``.

``tasks_per_batch=1`` runs the same code one task at a time: the one-model-at-a-time reference of the same maths
that ``tests/test_batched_mlp.py`` compares the batched path with (and both with scikit-learn itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["AdamMLP", "MAX_FULL_BATCH_ROWS"]

MAX_FULL_BATCH_ROWS = 200  # scikit-learn's batch_size="auto" = min(200, n): above it Adam steps on minibatches
_SCRATCH_BYTES = 2 * 2**20  # a batch's scaled inputs stay within a core's L2 cache (measured: 16-32 MSU tasks best)


def _is_constant(var: np.ndarray, mean: np.ndarray, n: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_is_constant_feature``: a variance within float rounding of zero."""
    eps = np.finfo(np.float64).eps
    return var <= n * eps * var + (n * mean * eps) ** 2


def standard_scaled_head(estimator, head_type):
    """The head of ``Pipeline([StandardScaler(), head])`` when ``estimator`` is exactly that (a ``Pipeline`` of two
    steps, a default scaler, a head of class ``head_type`` itself, not a subclass), else None: the shape the
    batched solvers reproduce."""
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if type(estimator) is not Pipeline or len(estimator.steps) != 2:
        return None
    scaler, head = estimator.steps[0][1], estimator.steps[1][1]
    if type(scaler) is not StandardScaler or not (scaler.with_mean and scaler.with_std):
        return None
    return head if type(head) is head_type else None


class AdamMLP:
    """The paper's ``StandardScaler + MLPClassifier`` (one hidden ReLU layer, Adam, full batch), many fits at once.

    Parameters
    ----------
    hidden : int, default=100
        Units of the hidden layer (``hidden_layer_sizes=(hidden,)``).
    alpha : float, default=1e-4
        L2 penalty, as scikit-learn's ``alpha``.
    learning_rate_init, beta_1, beta_2, epsilon : float
        Adam's step size and moment parameters (scikit-learn's defaults).
    max_iter : int, default=200
        Epochs; one epoch is one full-batch step.
    tol : float, default=1e-4
        Improvement of the training loss that resets the stopping counter.
    n_iter_no_change : int, default=10
        A task stops after more than this many epochs without an improvement of ``tol``.
    random_state : int, default=0
        Seed of the initial weights, shared by every task (as one seeded estimator cloned per fold).
    tasks_per_batch : int or None, default=None
        Tasks trained together; None fits as many as keep their scaled inputs within ~2 MB, a core's L2 cache
        (17 tasks on MSU: batches of 16-32 measured fastest; 128 were slower than one at a time, the inputs
        no longer cached). 1 is the one-at-a-time reference.

    Attributes
    ----------
    n_iter_ : ndarray of int
        Epochs each task of the last :meth:`fit_predict_tasks` ran (0: one class, not trained).
    loss_ : ndarray of float
        Each task's training loss at its last epoch (nan: not trained).
    """

    def __init__(self, hidden: int = 100, alpha: float = 1e-4, learning_rate_init: float = 1e-3,
                 max_iter: int = 200, tol: float = 1e-4, n_iter_no_change: int = 10, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-8, random_state: int = 0,
                 tasks_per_batch: int | None = None):
        self.hidden = hidden
        self.alpha = alpha
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.random_state = random_state
        self.tasks_per_batch = tasks_per_batch

    # ---- which scikit-learn estimators this reproduces ----------------------------------------------------
    @classmethod
    def from_estimator(cls, estimator, tasks_per_batch: int | None = None) -> AdamMLP | None:
        """The :class:`AdamMLP` equal to ``Pipeline([StandardScaler(), MLPClassifier(...)])``, or None when the
        estimator is anything this module does not reproduce exactly (another solver or activation, more than
        one hidden layer, minibatches, early stopping, an unseeded or ``RandomState`` seed, a scaler with
        non-default options)."""
        from sklearn.neural_network import MLPClassifier

        mlp = standard_scaled_head(estimator, MLPClassifier)
        if mlp is None:
            return None
        p = mlp.get_params()
        sizes = p["hidden_layer_sizes"]
        sizes = (sizes,) if np.isscalar(sizes) else tuple(sizes)
        seed = p["random_state"]
        if (len(sizes) != 1 or p["activation"] != "relu" or p["solver"] != "adam" or p["batch_size"] != "auto"
                or p["early_stopping"] or p["warm_start"] or isinstance(seed, bool)
                or not isinstance(seed, (int, np.integer))):
            return None
        return cls(hidden=int(sizes[0]), alpha=float(p["alpha"]), learning_rate_init=float(p["learning_rate_init"]),
                   max_iter=int(p["max_iter"]), tol=float(p["tol"]), n_iter_no_change=int(p["n_iter_no_change"]),
                   beta_1=float(p["beta_1"]), beta_2=float(p["beta_2"]), epsilon=float(p["epsilon"]),
                   random_state=int(seed), tasks_per_batch=tasks_per_batch)

    # ---- the fits ---------------------------------------------------------------------------------------
    def fit_predict_tasks(self, X, y, tasks: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """Fit one model per ``(train_rows, test_rows)`` task; P(y = 1) of each task's test rows, in task order.

        ``X``: (n_rows, n_features); ``y``: 0/1 per row. A training set may repeat a row (it then weighs as often
        as it appears, as in a full batch that holds it twice); it may hold at most 200 rows (more would be
        minibatches in scikit-learn)."""
        X, y = self._validate(X, y, tasks)
        self.n_iter_ = np.zeros(len(tasks), dtype=int)
        self.loss_ = np.full(len(tasks), np.nan)
        out: list[np.ndarray | None] = [None] * len(tasks)
        trainable = []
        for k, (train, test) in enumerate(tasks):
            labels = y[np.asarray(train)]
            if labels.min() == labels.max():  # one class seen: certain of it
                out[k] = np.full(len(test), float(labels[0] == 1))
            else:
                trainable.append(k)
        if trainable:
            init = self._initial_weights(X.shape[1])
            per_batch = self.tasks_per_batch or self.batch_size(X.shape)
            for start in range(0, len(trainable), per_batch):
                chunk = trainable[start:start + per_batch]
                probas, n_iter, loss = self._train([tasks[k] for k in chunk], X, y, init)
                for k, p, it, lo in zip(chunk, probas, n_iter, loss):
                    out[k], self.n_iter_[k], self.loss_[k] = p, it, lo
        return out

    @staticmethod
    def batch_size(shape: tuple[int, int]) -> int:
        """Tasks per batch when ``tasks_per_batch`` is None: as many as keep their scaled (rows × features)
        inputs within ~2 MB, a core's L2 cache. A function of the table's shape alone, so a caller that splits
        its tasks into batches of this size gets the same batches however it then spreads them."""
        return max(1, _SCRATCH_BYTES // (8 * int(shape[0]) * int(shape[1])))

    def _validate(self, X, y, tasks):
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y).ravel()
        if X.ndim != 2 or X.shape[0] != y.size:
            raise ValueError(f"X must be 2-D with one row per label; got {X.shape} and {y.size} labels")
        if not np.isin(y, (0, 1)).all():
            raise ValueError("y must hold only 0 and 1 (1 = positive class)")
        if not np.isfinite(X).all():
            raise ValueError("X holds NaN or infinite values")
        for k, (train, test) in enumerate(tasks):
            train, test = np.asarray(train), np.asarray(test)
            if train.size == 0 or train.size > MAX_FULL_BATCH_ROWS:
                raise ValueError(f"task {k}: {train.size} training rows; AdamMLP reproduces full-batch fits of "
                                 f"1-{MAX_FULL_BATCH_ROWS} rows (scikit-learn uses minibatches above that)")
            for rows in (train, test):
                if rows.size and (rows.min() < 0 or rows.max() >= X.shape[0]):
                    raise ValueError(f"task {k}: row index out of range for {X.shape[0]} rows")
        return X, y.astype(np.float64)

    def _initial_weights(self, n_features: int) -> list[np.ndarray]:
        """coef then intercept per layer from one ``RandomState``, as ``MLPClassifier._init_coef``."""
        rng = np.random.RandomState(self.random_state)
        weights = []
        for fan_in, fan_out in ((n_features, self.hidden), (self.hidden, 1)):
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            weights.append(rng.uniform(-bound, bound, (fan_in, fan_out)))
            weights.append(rng.uniform(-bound, bound, fan_out))
        return weights  # [W1, b1, W2, b2]

    def _train(self, tasks, X, y, init):
        """One batch of tasks: scaled inputs (T, N, d), weights (T, N, 1); returns test probas, epochs, losses."""
        T, (N, _) = len(tasks), X.shape
        weight = np.zeros((T, N))
        for t, (train, _) in enumerate(tasks):
            np.add.at(weight[t], np.asarray(train), 1.0)
        n = weight.sum(axis=1)
        mean = weight @ X / n[:, None]
        centered = X[None] - mean[:, None, :]
        var = np.einsum("tn,tnd->td", weight, centered ** 2) / n[:, None]
        scale = np.sqrt(var)
        scale[_is_constant(var, mean, n[:, None])] = 1.0

        Xs = torch.from_numpy(centered / scale[:, None, :])
        w = torch.from_numpy(weight)[:, :, None]
        Y = torch.from_numpy(y)[None, :, None]
        n_t = torch.from_numpy(n)[:, None, None]
        params = [torch.from_numpy(p).reshape(1, *(p.shape if p.ndim == 2 else (1, p.size))).repeat(T, 1, 1)
                  for p in init]  # W1 (T,d,h), b1 (T,1,h), W2 (T,h,1), b2 (T,1,1)
        m = [torch.zeros_like(p) for p in params]
        v = [torch.zeros_like(p) for p in params]

        index = np.arange(T)  # original task of each batch slot
        n_iter = np.full(T, self.max_iter)
        last_loss = np.full(T, np.nan)
        best = np.full(T, np.inf)
        stalled = np.zeros(T, dtype=int)
        probas: list[np.ndarray | None] = [None] * T
        eps = float(np.finfo(np.float64).eps)

        def finish(slots):
            p_all = self._forward(Xs[slots], [q[slots] for q in params])[1][:, :, 0].numpy()
            for s, p in zip(slots.tolist(), p_all):
                probas[index[s]] = p[np.asarray(tasks[index[s]][1])].copy()

        for epoch in range(1, self.max_iter + 1):
            W1, _b1, W2, _b2 = params
            A1, p = self._forward(Xs, params)
            pc = p.clamp(eps, 1 - eps)
            log_loss = -(w * (Y * torch.log(pc) + (1 - Y) * torch.log(1 - pc))).sum(dim=(1, 2)) / n_t[:, 0, 0]
            penalty = sum(torch.linalg.vecdot(q.flatten(1), q.flatten(1)) for q in (W1, W2))  # ||W||² per task
            loss = log_loss + (0.5 * self.alpha) * penalty / n_t[:, 0, 0]
            loss = (loss * n_t[:, 0, 0] / n_t[:, 0, 0]).numpy()  # scikit-learn's accumulated_loss / n_samples

            d2 = (p - Y) * w
            d1 = (d2 * W2.transpose(1, 2)).mul_(A1 > 0)  # δ₂W₂ᵀ: an outer product, cheaper broadcast than bmm
            grads = [torch.baddbmm(W1, Xs.transpose(1, 2), d1, beta=self.alpha).div_(n_t),
                     d1.sum(dim=1, keepdim=True).div_(n_t),
                     torch.baddbmm(W2, A1.transpose(1, 2), d2, beta=self.alpha).div_(n_t),
                     d2.sum(dim=1, keepdim=True).div_(n_t)]
            step = self.learning_rate_init * math.sqrt(1 - self.beta_2 ** epoch) / (1 - self.beta_1 ** epoch)
            for q, g, mq, vq in zip(params, grads, m, v):  # Adam, in place: few passes over the (T, d, h) weights
                mq.mul_(self.beta_1).add_(g, alpha=1 - self.beta_1)
                vq.mul_(self.beta_2).addcmul_(g, g, value=1 - self.beta_2)
                q.addcdiv_(mq, vq.sqrt().add_(self.epsilon), value=-step)

            # scikit-learn's _update_no_improvement_count, per task (slot s holds task index[s])
            last_loss[index] = loss
            no_gain = loss > best[index] - self.tol
            stalled[index] = np.where(no_gain, stalled[index] + 1, 0)
            best[index] = np.minimum(best[index], loss)
            stop = stalled[index] > self.n_iter_no_change
            if epoch == self.max_iter:
                stop[:] = True
            if stop.any():
                n_iter[index[stop]] = epoch
                finish(torch.from_numpy(np.flatnonzero(stop)))
                keep = torch.from_numpy(np.flatnonzero(~stop))
                if keep.numel() == 0:
                    break
                Xs, w, n_t = Xs[keep], w[keep], n_t[keep]
                params, m, v = ([q[keep] for q in group] for group in (params, m, v))
                index = index[keep.numpy()]
        return probas, n_iter, last_loss

    @staticmethod
    def _forward(Xs, params):
        """Hidden activations (T, N, h) and P(y = 1) (T, N, 1) of every row under every task's weights."""
        W1, b1, W2, b2 = params
        A1 = torch.baddbmm(b1, Xs, W1).clamp_min_(0.0)  # ReLU in place
        return A1, torch.sigmoid(torch.baddbmm(b2, A1, W2))
