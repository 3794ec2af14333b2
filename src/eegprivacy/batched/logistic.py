"""scikit-learn's ``StandardScaler + LogisticRegression`` (L2, intercept) for many label vectors at once.

The permuted-label null of :func:`eegprivacy.embeddings.endpoints.labels.subject_label_leakage` refits the default
head (:func:`eegprivacy.embeddings.heads.default_head`) once per fold and permutation. On MSU that is ~980 training
windows of up to 512 dimensions per fold, 7 folds, 7 encoder cells: at ~0.3 s per scikit-learn fit, 1,000
permutations would take hours per cell. Within one fold, though, every permutation shares the training matrix,
its standardisation and the test matrix; only the label vector changes. :func:`logistic_proba` fits all of them
as one tensor program.

Why the result equals scikit-learn's: the objective is the same, and it is strictly convex, so it has one
optimum, and any solver that converges finds it. Per label vector ``y`` (0/1, ``n`` training rows):

    minimise over (w, b)   0.5 ‖w‖² + C Σᵢ [log(1 + exp(mᵢ)) − yᵢ mᵢ],   m = X̃ w + b,

with ``X̃`` the training rows standardised exactly as ``StandardScaler`` does (population variance; a column
whose variance is within rounding of zero keeps scale 1) and the intercept unpenalised. scikit-learn 1.7 divides
this by ``C·n`` (same optimum) and stops L-BFGS when the largest gradient entry of that scaled objective is
below ``tol`` (1e-4); here the 2-norm of the same gradient must fall below ``tol`` = 1e-10 (a bound on the
largest entry too). So the fit here is scikit-learn's fit run to convergence: equal to ``newton-cholesky`` at tol
1e-12 to ~1e-9 in probability, and to the default head's L-BFGS with its tol tightened to 1e-10 to ≤ 1e-5
(``tests/test_batched_logistic.py``). The default head as shipped is *not* converged that far: at tol 1e-4 it
stops after ~10 L-BFGS steps, up to 1e-2 in probability from the optimum on small tables and up to 0.15 on
MSU-sized ones at 512 dimensions (0.04 on MSU's real window features projected to 512), enough to move a
held-out subject near the decision rule across it.

How (truncated Newton, all problems in lock-step, each with its own convergence):

- *rotation*: the features are rotated once per fold onto the eigenvectors of ``X̃ᵀX̃`` (orthonormal, so ‖w‖ and
  the margins are unchanged). There the Hessian ``I + C·AᵀDA`` is diagonal whenever the curvature weights
  ``D = p(1 − p)`` are equal, and its diagonal (the Jacobi preconditioner, one product per Newton step) captures
  the correlation of the features, which is what makes real embeddings ill-conditioned;
- *Newton step*: preconditioned conjugate gradients on the Hessian, two batched products per iteration (no
  ``(d+1)²`` Hessian per problem: at P = 1,000 and d = 512 a Cholesky each would cost ~50 GFLOP per step),
  stopped at a relative residual ``min(0.5, sqrt(‖g‖/‖g₀‖))`` (superlinear convergence near the optimum);
- *line search*: Armijo backtracking; the loss change is computed as ``log1p(σ(m)·expm1(t·δ))`` per row, so
  it stays accurate when it is many orders of magnitude below the loss itself (near the optimum a plain
  difference of two losses is rounding noise);
- a problem whose gradient meets the tolerance is frozen and dropped from the batch, so stragglers (nearly
  separable permutations) do not slow the rest; a problem that cannot meet it (iteration cap, or no further
  decrease possible in floating point) is reported as not converged, never silently returned as converged.

Problems are fitted in chunks whose working memory stays below ``max_bytes`` (~200 MB for 1,000 fits of
980 × 512). float64 (torch, CPU), except the CG's Hessian-vector products: float32 by default (``mixed``), which
halves the products that dominate the cost and leaves the optimum alone (the gradient that defines it is float64).

What it buys, measured on the 2 shared cores of the development machine (``subject_label_leakage`` with 1,000
permutations, 76 subjects × 15 windows, 7 subject-disjoint folds): 5-13 s per cell at 95-512 dimensions, where
scikit-learn's fits one at a time take 0.007-0.2 s each, i.e. 50 s-25 min per cell (~1-2 h at 512 dimensions on
the MSU features). The fits are GEMM-bound: ~10 Newton steps and 30-90 CG iterations per fit, all fits of a fold
sharing each product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from eegprivacy.batched.mlp import _is_constant, standard_scaled_head

__all__ = ["LogisticFits", "logistic_C", "logistic_proba"]

_ARMIJO = 1e-4  # sufficient-decrease constant of the line search
_MAX_HALVINGS = 60  # backtracking steps before a problem is declared stuck (2⁻⁶⁰: below float resolution)
_MIXED_ETA_MIN = 1e-4  # float32 products: CG never asked for a relative residual below this (reachable in float32)


@dataclass
class LogisticFits:
    """P(class 1) of the test rows under each label vector's fit, with the solver's account of each fit.

    ``proba``: (P, n_test), as ``predict_proba(X_test)[:, 1]``. ``decision``: (P, n_test), as
    ``decision_function`` (``predict`` is ``decision > 0``). ``coef`` (P, d) and ``intercept`` (P,): the fitted
    ``LogisticRegression``'s ``coef_[0]`` and ``intercept_[0]``, on the standardised features. ``n_iter``: Newton
    steps taken. ``grad_norm``: final 2-norm of the gradient of the ``C·n``-scaled objective (scikit-learn's
    scale). ``converged``: ``grad_norm <= tol``.
    """

    proba: np.ndarray
    decision: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n_iter: np.ndarray
    grad_norm: np.ndarray
    converged: np.ndarray


def logistic_C(estimator) -> float | None:
    """``C`` of ``Pipeline([StandardScaler(), LogisticRegression(...)])`` when :func:`logistic_proba` finds the
    optimum that estimator's fit approximates, else None.

    Recognised: exactly two steps, a default ``StandardScaler`` (mean and scale) and a ``LogisticRegression``
    (the class itself, not a subclass) with an L2 penalty, an unpenalised intercept, no class weights, no warm
    start and a deterministic solver that converges to the optimum (lbfgs, newton-cg, newton-cholesky). liblinear
    penalises the intercept; sag/saga are stochastic and stop early; another penalty is another objective."""
    from sklearn.linear_model import LogisticRegression

    head = standard_scaled_head(estimator, LogisticRegression)
    if head is None:
        return None
    p = head.get_params()
    if (p.get("penalty", "l2") != "l2" or p.get("l1_ratio") not in (None, 0, 0.0) or p["dual"]
            or not p["fit_intercept"] or p["class_weight"] is not None or p["warm_start"]
            or p["solver"] not in ("lbfgs", "newton-cg", "newton-cholesky")
            or p.get("multi_class", "auto") not in ("auto", "deprecated", "ovr")):
        return None
    C = float(p["C"])
    return C if np.isfinite(C) and C > 0 else None


def logistic_proba(X, Y, X_test, C: float = 1.0, tol: float = 1e-10, max_iter: int = 100,
                   max_cg: int | None = None, mixed: bool = True, max_bytes: int = 512 * 2**20) -> LogisticFits:
    """Fit ``StandardScaler + LogisticRegression(C=C)`` on the rows ``X`` once per label vector; P(class 1) of
    ``X_test`` under each fit.

    Parameters
    ----------
    X : array (n, d)
        Training rows, shared by every fit (standardised on themselves, as ``StandardScaler``).
    Y : array (P, n)
        One 0/1 label vector per fit; each must hold both classes (scikit-learn refuses one class too).
    X_test : array (n_test, d)
        Rows to predict, standardised with the training rows' mean and scale.
    C : float
        Inverse regularisation strength, as scikit-learn's ``C``.
    tol : float
        A fit has converged when the 2-norm of its gradient, divided by ``C·n``, is at most ``tol``.
    max_iter : int
        Newton steps per fit at most.
    max_cg : int, optional
        Conjugate-gradient iterations per Newton step at most; default ``d + 1`` (exact in exact arithmetic).
    mixed : bool, default True
        Hessian-vector products inside conjugate gradients in float32 (half the time of the two products that
        dominate the cost); everything else, the gradient and hence the optimum found included, stays float64.
        The Newton direction then carries a relative error ~1e-6, far inside the CG tolerance (never asked
        below 1e-4 in this mode), so the Newton steps taken are the same (measured) and the result agrees with
        ``mixed=False`` to the convergence tolerance.
    max_bytes : int
        Working memory of one chunk of fits, roughly (default 512 MiB).

    Returns
    -------
    LogisticFits
    """
    X = np.asarray(X, dtype=np.float64)
    X_test = np.asarray(X_test, dtype=np.float64)
    Y = np.atleast_2d(np.asarray(Y))
    if X.ndim != 2 or X_test.ndim != 2 or X_test.shape[1] != X.shape[1]:
        raise ValueError(f"X and X_test must be 2-D with the same columns; got {X.shape} and {X_test.shape}")
    n, d = X.shape
    if Y.ndim != 2 or Y.shape[1] != n:
        raise ValueError(f"Y must be (P, {n}): one label vector per fit over X's rows; got {Y.shape}")
    if not np.isin(Y, (0, 1)).all():
        raise ValueError("Y must hold only 0 and 1 (1 = the class whose probability is returned)")
    counts = Y.sum(axis=1)
    if ((counts == 0) | (counts == n)).any():
        raise ValueError(f"{int(np.sum((counts == 0) | (counts == n)))} label vector(s) hold one class only: "
                         "a logistic regression needs both")
    if not (np.isfinite(X).all() and np.isfinite(X_test).all()):
        raise ValueError("X or X_test holds NaN or infinite values")
    if not C > 0:
        raise ValueError(f"C must be positive, got {C}")

    # StandardScaler on the training rows, then the rotation onto the eigenvectors of the scaled Gram matrix
    mean = X.mean(axis=0)
    var = X.var(axis=0)
    scale = np.sqrt(var)
    scale[_is_constant(var, mean, n)] = 1.0
    Xs = (X - mean) / scale
    _, V = np.linalg.eigh(Xs.T @ Xs)
    A = torch.from_numpy(np.c_[Xs @ V, np.ones(n)])  # rotated features + the intercept's column
    A_test = torch.from_numpy(np.c_[((X_test - mean) / scale) @ V, np.ones(X_test.shape[0])])

    P = Y.shape[0]
    k = d + 1
    per_fit = 8 * (12 * n + 10 * k)  # bytes of the per-fit working tensors (margins, weights, CG vectors, ...)
    chunk = int(max(1, min(P, max_bytes // per_fit)))
    gtol = tol * C * n
    max_cg = k if max_cg is None else int(max_cg)
    theta = torch.empty((P, k), dtype=torch.float64)
    n_iter = np.zeros(P, dtype=int)
    grad_norm = np.zeros(P)
    for start in range(0, P, chunk):
        part = slice(start, min(P, start + chunk))
        theta[part], n_iter[part], grad_norm[part] = _newton_cg(
            A, torch.from_numpy(Y[part].astype(np.float64)), C, gtol, int(max_iter), max_cg, bool(mixed))
    decision = theta @ A_test.T
    grad_norm = grad_norm / (C * n)
    theta = theta.numpy()
    return LogisticFits(proba=torch.sigmoid(decision).numpy(), decision=decision.numpy(),
                        coef=theta[:, :d] @ V.T, intercept=theta[:, d].copy(), n_iter=n_iter, grad_norm=grad_norm,
                        converged=grad_norm <= tol)


def _softplus(m: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(m)) without overflow or the cut-off of ``torch.nn.functional.softplus``."""
    return torch.log1p(torch.exp(-m.abs())).add_(m.clamp_min(0.0))


def _loss_change(m: torch.Tensor, sig: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Row sums of softplus(m + step) − softplus(m), each term accurate to relative rounding even when tiny.

    For a small step the term is log1p(σ(m)·expm1(step)) (no cancellation); for a large one the plain
    difference (nothing to cancel, and the log1p form would lose σ(m) ≈ 1 to rounding). Late Newton steps are
    all small, so the plain form is computed only on rows that need it."""
    term = torch.log1p(torch.expm1(step.clamp(-1.0, 1.0)).mul_(sig))
    big = step.abs() > 1.0
    rows = big.any(dim=1).nonzero().squeeze(1)
    if rows.numel():
        mr = m[rows]
        plain = _softplus(mr + step[rows]).sub_(_softplus(mr))
        term[rows] = torch.where(big[rows], plain, term[rows])
    return term.sum(dim=1)


def _newton_cg(A: torch.Tensor, Y: torch.Tensor, C: float, gtol: float, max_iter: int, max_cg: int,
               mixed: bool):
    """Truncated Newton on every row of ``Y`` at once: A (n, k) rotated features with the ones column last,
    Y (P, n). Returns θ (P, k), Newton steps and final gradient 2-norms (unscaled objective).

    Written with in-place and fused operations: on a busy machine the allocation of fresh (P, n) temporaries
    cost more than the arithmetic."""
    P, k = Y.shape[0], A.shape[1]
    At = A.T.contiguous()  # margins as θ @ At: a transposed operand made MKL's product 4x slower here
    A2 = A * A
    hvp = (A.float(), At.float()) if mixed else (A, At)  # the operands of the CG's Hessian-vector products
    eta_min = _MIXED_ETA_MIN if mixed else 0.0
    pen = torch.ones(k, dtype=torch.float64)
    pen[-1] = 0.0  # the intercept is not penalised
    ybar = Y.mean(dim=1)
    theta_all = torch.zeros((P, k), dtype=torch.float64)
    theta_all[:, -1] = torch.log(ybar / (1 - ybar))  # start at the class balance: the optimum of b alone
    n_iter = np.zeros(P, dtype=int)
    gnorm_all = np.full(P, np.inf)

    idx = torch.arange(P)  # original problem of each active slot
    theta, y = theta_all.clone(), Y
    m = theta @ At
    gn0 = None
    for it in range(max_iter + 1):
        sig = torch.sigmoid(m)
        g = _penalised(torch.addmm(theta, sig - y, A, alpha=C), theta)  # θ·pen + C·Aᵀ(σ − y)
        gn = torch.linalg.vector_norm(g, dim=1)
        if gn0 is None:
            gn0 = gn.clone()
        gnorm_all[idx.numpy()] = gn.numpy()
        n_iter[idx.numpy()] = it
        done = gn <= gtol
        if it == max_iter:
            done[:] = True
        if done.any():
            theta_all[idx[done]] = theta[done]
            keep = ~done
            if not keep.any():
                break
            idx, theta, y, m, sig, g, gn, gn0 = (t[keep] for t in (idx, theta, y, m, sig, g, gn, gn0))

        # Newton direction: preconditioned CG on (diag(pen) + C·Aᵀ D A) x = −g, per problem
        D = torch.addcmul(sig, sig, sig, value=-1.0)  # σ(1 − σ)
        diag = torch.addmm(pen, D, A2, alpha=C)  # Jacobi: the Hessian's diagonal
        eta = torch.sqrt(gn / gn0).clamp_(eta_min, 0.5)  # Eisenstat-Walker: superlinear near the optimum
        x = _pcg(*hvp, D.to(hvp[0].dtype), diag, C, g.neg(), eta.mul_(gn), max_cg)

        # Armijo backtracking on the exact objective change
        dm = x @ At
        slope = torch.linalg.vecdot(g, x)  # < 0: a CG iterate from 0 is a descent direction (in exact arithmetic)
        descent = slope < 0
        tp = torch.linalg.vecdot(theta[:, :-1], x[:, :-1])
        xx = torch.linalg.vecdot(x[:, :-1], x[:, :-1])
        ydm = torch.linalg.vecdot(y, dm)
        t = torch.ones(theta.shape[0], dtype=torch.float64)
        pending = descent.clone()
        rows = descent.nonzero().squeeze(1)
        for _ in range(_MAX_HALVINGS if rows.numel() else 0):
            ts = t[rows]
            if rows.numel() == theta.shape[0]:
                step = dm if bool((ts == 1.0).all()) else dm * ts[:, None]
                change = _loss_change(m, sig, step)
            else:
                change = _loss_change(m[rows], sig[rows], dm[rows].mul_(ts[:, None]))
            change = (ts * tp[rows]).addcmul_(ts * ts, xx[rows], value=0.5).add_(
                change.sub_(ts * ydm[rows]), alpha=C)
            ok = change <= _ARMIJO * ts * slope[rows]
            pending[rows[ok]] = False
            rows = rows[~ok]
            if not rows.numel():
                break
            t[rows] *= 0.5
        stuck = pending | ~descent  # no decrease found: the problem sits at floating-point resolution
        t.masked_fill_(stuck, 0.0)
        theta.addcmul_(t[:, None], x)
        m.addcmul_(t[:, None], dm)
        if stuck.any():  # freeze it as it is; its gradient norm says whether it had converged
            theta_all[idx[stuck]] = theta[stuck]
            keep = ~stuck
            if not keep.any():
                break
            idx, theta, y, m, gn0 = (t_[keep] for t_ in (idx, theta, y, m, gn0))
    return theta_all, n_iter, gnorm_all


def _penalised(out: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``out`` holds v + C·(…) for every coordinate; remove v from the intercept's (unpenalised) coordinate."""
    out[:, -1] -= theta[:, -1]
    return out


def _pcg(A, At, D, diag, C, b, target, max_cg):
    """Jacobi-preconditioned CG for (diag(pen) + C·Aᵀ diag(D) A) x = b, one system per row; a row stops when its
    residual norm is at most ``target``, and leaves the batch then. ``A``, ``At``, ``D`` may be float32 (the
    products only); the iterates are float64."""
    x_all = torch.zeros_like(b)
    idx = torch.arange(b.shape[0])
    x = torch.zeros_like(b)
    r = b
    z = r / diag
    p = z.clone()
    rz = torch.linalg.vecdot(r, z)
    for _ in range(max_cg):
        Hp = _penalised(((p.to(At.dtype) @ At).mul_(D) @ A).to(torch.float64).mul_(C).add_(p), p)
        pHp = torch.linalg.vecdot(p, Hp)
        a = torch.where(pHp > 0, rz / pHp, torch.zeros_like(rz))[:, None]
        x.addcmul_(a, p)
        r.addcmul_(a, Hp, value=-1.0)
        done = (torch.linalg.vector_norm(r, dim=1) <= target) | (pHp <= 0)
        if done.any():
            x_all[idx[done]] = x[done]
            keep = ~done
            if not keep.any():
                return x_all
            idx, x, r, p, rz, D, diag, target = (t[keep] for t in (idx, x, r, p, rz, D, diag, target))
        if z.shape != r.shape:
            z = torch.empty_like(r)
        torch.div(r, diag, out=z)
        rz_new = torch.linalg.vecdot(r, z)
        p.mul_((rz_new / rz)[:, None]).add_(z)
        rz = rz_new
    x_all[idx] = x
    return x_all
