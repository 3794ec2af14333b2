"""Record-level DP-SGD for study B's clients: Poisson-sample the client's records, clip each one's gradient to
L2 ≤ C, sum, add Gaussian noise N(0, (σC)²) per coordinate, divide by the expected batch size, step.

This is Abadi et al. (2016) as Opacus runs it, and unlike :mod:`eegprivacy.federated.dp` (the paper's per-step
Laplace on the *batch* gradient) its ε is a formal, total guarantee for one record: per-example clipping bounds
what one record adds to a step's sum by C in L2 (add/remove one record), the Gaussian noise makes that step an
(α, ε(α))-RDP mechanism, and Poisson sampling with rate q amplifies it; :meth:`GaussianExampleDP.dp_event`
composes the steps for dp_accounting's RDP and PLD accountants. :func:`calibrate_noise_multiplier` turns a
target total ε (over every step of every round a record can be sampled in) into σ before any training runs.

``GaussianExampleDP`` is only its parameters (C, σ, q), as ``LaplaceGradientDP`` is; the torch task's per-client
loop (:meth:`eegprivacy.federated.torch_task.TorchTask.train_local`) sees ``per_example = True`` and runs::

    mask = dp.sample(n, shuffle)                                   # Poisson: each record with probability q
    grads, losses = per_example_grads(model, params, x[mask], y[mask])   # torch.func: vmap(grad(loss))
    norms = dp.privatise_examples_(params, grads, noise, expected_batch_size=q * n)
    optimizer.step()

The denominator is the fixed q·n, not the realised batch size (which depends on who was sampled and would leak
it); an empty batch still takes a step of pure noise, as it must for the sampling analysis to hold.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

__all__ = ["GaussianExampleDP", "per_example_grads", "require_per_example_model", "total_epsilon",
           "calibrate_noise_multiplier", "TOTAL_NOTE", "PLD_INTERVAL"]

TOTAL_NOTE = ("epsilon is the total guarantee for one record over every step and round it can be sampled in "
              "(compose dp_event(steps) with the RDP or PLD accountant), not a per-step figure")
# PLD grid for this module's accounting: within 1e-4 of the 1e-4 grid's ε for study B's schedules, and fast enough
# (≈ 0.05–0.2 s per query on 2 cores) for the bisection in calibrate_noise_multiplier.
PLD_INTERVAL = 1e-3


@dataclass(frozen=True)
class GaussianExampleDP:
    """DP-SGD's parameters: per-example L2 clip C, noise multiplier σ (noise std σC), Poisson sample rate q.

    ``noise_multiplier=0`` clips per example without noise: no DP, the control that separates what clipping alone
    does. An "epoch" is ``steps_per_epoch`` = round(1/q) Poisson steps, one pass over the records in expectation.
    """

    clip_norm: float = 1.0
    noise_multiplier: float = 0.0
    sample_rate: float = 0.25

    name: ClassVar[str] = "gaussian_example"
    per_example: ClassVar[bool] = True

    def __post_init__(self) -> None:
        clip_norm, sigma, q = float(self.clip_norm), float(self.noise_multiplier), float(self.sample_rate)
        if not (math.isfinite(clip_norm) and clip_norm > 0):
            raise ValueError(f"clip_norm must be a positive finite number, got {self.clip_norm!r}")
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"noise_multiplier must be a finite number >= 0 (0: no noise), got "
                             f"{self.noise_multiplier!r}")
        if not 0.0 < q <= 1.0:
            raise ValueError(f"sample_rate must lie in (0, 1] (the Poisson probability of each record), got "
                             f"{self.sample_rate!r}")
        object.__setattr__(self, "clip_norm", clip_norm)
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "sample_rate", q)

    @property
    def private(self) -> bool:
        """True when the steps are noised (σ > 0): a client running it is a DP client (see ``client_app``)."""
        return self.noise_multiplier > 0

    @property
    def noise_std(self) -> float:
        """σC, the standard deviation of the noise added to each coordinate of the clipped sum."""
        return self.noise_multiplier * self.clip_norm

    @property
    def steps_per_epoch(self) -> int:
        """round(1/q): the Poisson steps that visit each record once in expectation."""
        return max(1, round(1.0 / self.sample_rate))

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Poisson sampling: a boolean mask over `n` records, each in the batch independently with probability q.

        The batch size is random (Binomial(n, q)), which is what the amplification analysis assumes; a fixed-size
        shuffled batch would need a different (sampling without replacement) analysis.
        """
        return torch.rand(int(n), generator=generator) < self.sample_rate

    def privatise_examples_(self, parameters: Sequence[torch.nn.Parameter], per_example_grads: Sequence[torch.Tensor],
                            generator: torch.Generator | None, expected_batch_size: float) -> torch.Tensor:
        """Clip each example's gradient, sum, add noise, divide by `expected_batch_size`, write into ``p.grad``.

        `per_example_grads` is aligned with `parameters`, each of shape (b, *p.shape); b may be 0 (an empty
        Poisson batch: the step is pure noise). The clip is on each example's joint L2 norm over all parameters
        (in float64, as ``privatise_``), so one record moves the sum by at most C. Noise is drawn parameter by
        parameter in the given order from `generator`, so the same seed gives the same noise. Returns the
        per-example norms before clipping (float64, length b); a non-finite gradient is an error.
        """
        params, grads = list(parameters), list(per_example_grads)
        if len(params) != len(grads) or not params:
            raise ValueError(f"expected one per-example gradient per parameter ({len(params)}), got {len(grads)}")
        b = int(grads[0].shape[0])
        for p, g in zip(params, grads):
            if tuple(g.shape) != (b, *p.shape):
                raise ValueError(f"per-example gradient of shape {tuple(g.shape)} does not match (b={b}, "
                                 f"*{tuple(p.shape)})")
        expected_batch_size = float(expected_batch_size)
        if not (math.isfinite(expected_batch_size) and expected_batch_size > 0):
            raise ValueError(f"expected_batch_size must be positive (q * n), got {expected_batch_size}")
        if self.noise_multiplier > 0 and generator is None:
            raise ValueError("a torch.Generator is needed to draw the Gaussian noise reproducibly")
        with torch.no_grad():
            squares = torch.zeros(b, dtype=torch.float64, device=grads[0].device)
            for p, g in zip(params, grads):
                squares += torch.linalg.vector_norm(g.detach().reshape(b, p.numel()), dim=1, dtype=torch.float64) ** 2
            norms = squares.sqrt()
            if not bool(torch.isfinite(norms).all()):
                raise ValueError("a per-example gradient norm is not finite: the loss or the model diverged; DP "
                                 "cannot clip it")
            factor = (self.clip_norm / norms).clamp(max=1.0)  # a zero gradient: C/0 = inf, clamped to 1
            for p, g in zip(params, grads):
                total = (g.detach().double() * factor.view(-1, *[1] * p.dim())).sum(dim=0)
                if self.noise_multiplier > 0:
                    total += self.noise_std * torch.randn(p.shape, generator=generator, dtype=torch.float64,
                                                          device=generator.device).to(total.device)
                p.grad = (total / expected_batch_size).to(p.dtype)
        return norms

    def calibration(self) -> dict:
        """Clip norm, σ, q, the noise std and what they guarantee; ε comes from :func:`total_epsilon`."""
        out = {"mechanism": self.name, "clip_norm": self.clip_norm, "noise_multiplier": self.noise_multiplier,
               "sample_rate": self.sample_rate, "noise_std": self.noise_std, "unit": "example"}
        if not self.private:
            out["sensitivity_note"] = ("no DP: each example's gradient is clipped to L2 <= C but no noise is added "
                                       "(clip-only control), no privacy claim")
            return out
        out["sensitivity_note"] = (
            f"{TOTAL_NOTE}. Per-example clipping (each sampled example's gradient to L2 <= C before summing) bounds "
            "each record's contribution to one step's sum by C in L2 (add or remove one record); Gaussian noise "
            "N(0, (sigma*C)^2) per coordinate makes the step a Gaussian mechanism with noise multiplier sigma, and "
            "Poisson sampling of each record with probability q gives the amplification the RDP/PLD accountants use "
            "(PoissonSampledDpEvent). Dividing by the fixed q*n and Adam on the noisy mean are post-processing. "
            "It covers the training only: preprocessing fitted on private data (scalers, CSP filters) is not "
            "covered and must be accounted for separately.")
        return out

    def dp_event(self, steps: int = 1):
        """The dp_accounting event for `steps` Poisson-sampled Gaussian steps; σ = 0: ``NonPrivateDpEvent``.

        `steps` counts every step a record can be sampled in: steps per round × rounds the client takes part in.
        """
        import dp_accounting

        if int(steps) != steps or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps}")
        if not self.private:
            return dp_accounting.NonPrivateDpEvent()
        gaussian = dp_accounting.GaussianDpEvent(self.noise_multiplier)
        step = dp_accounting.PoissonSampledDpEvent(self.sample_rate, gaussian)
        return dp_accounting.SelfComposedDpEvent(step, int(steps))

    def to_dict(self) -> dict:
        """Flat MLflow params (``dp_`` prefix)."""
        return {"dp_mechanism": self.name, "dp_clip_norm": self.clip_norm,
                "dp_noise_multiplier": self.noise_multiplier, "dp_sample_rate": self.sample_rate,
                "dp_epsilon_scope": "total_per_record"}

    @classmethod
    def from_dict(cls, params: Mapping) -> GaussianExampleDP:
        """Inverse of ``to_dict`` (also reads a flat params/ConfigRecord mapping with those keys)."""
        return cls(clip_norm=float(params.get("dp_clip_norm", 1.0)),
                   noise_multiplier=float(params.get("dp_noise_multiplier", 0.0)),
                   sample_rate=float(params.get("dp_sample_rate", 0.25)))


# ---------------------------------------------------------------------------------------------------------------
# Per-example gradients
# ---------------------------------------------------------------------------------------------------------------

def require_per_example_model(model: torch.nn.Module) -> None:
    """Raise unless `model`'s per-example gradients are well defined: BatchNorm mixes the rows of a batch (each
    example's output depends on its batch-mates), so neither vmap nor the clipping bound applies to it."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            raise ValueError("DP-SGD needs a model without BatchNorm (SimpleNet); "
                             f"{type(model).__name__} has {type(module).__name__}, whose batch statistics mix the "
                             "examples of a batch, so no per-example gradient or clipping bound exists")


def per_example_grads(model: torch.nn.Module, params: Mapping[str, torch.Tensor], inputs: torch.Tensor,
                      targets: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """∇ cross-entropy of each row alone, for the trainable `params` (name → tensor of `model`), and the losses.

    One vectorised pass (``torch.func``: ``vmap(grad(...))`` over ``functional_call``) instead of a backward pass
    per row, with the same numbers. ``randomness="different"`` gives each row its own dropout mask, drawn from
    torch's global RNG (the caller seeds it). Returns the gradients in `params`' order, each (b, *p.shape), and
    the b per-row losses; b = 0 gives empty tensors without running the model.
    """
    from torch.func import functional_call, grad, vmap

    require_per_example_model(model)
    b = int(inputs.shape[0])
    if b == 0:
        return [p.new_zeros((0, *p.shape)) for p in params.values()], inputs.new_zeros(0)
    trainable = {k: p.detach() for k, p in params.items()}
    others = {k: p.detach() for k, p in model.named_parameters() if k not in trainable}
    others.update({k: v.detach() for k, v in model.named_buffers()})

    def row_loss(p, x, y):
        loss = F.cross_entropy(functional_call(model, (p, others), (x.unsqueeze(0),)), y.unsqueeze(0))
        return loss, loss.detach()

    grads, losses = vmap(grad(row_loss, has_aux=True), in_dims=(None, 0, 0), randomness="different")(
        trainable, inputs, targets)
    return [grads[k] for k in params], losses


# ---------------------------------------------------------------------------------------------------------------
# Accounting and calibration
# ---------------------------------------------------------------------------------------------------------------

class _DropUnconvergedOrders(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


@contextlib.contextmanager
def _quiet_rdp_orders() -> Iterator[None]:
    """dp_accounting logs a warning per fractional RDP order (1.1 … 1.7 at q = 0.25) whose series does not converge
    and drops that order; dropping orders only raises ε, so the bound stays valid. A bisection would log dozens."""
    logger, quiet = logging.getLogger("absl"), _DropUnconvergedOrders()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _accountant(accountant: str):
    from eegprivacy.privacy.accounting import make_accountant

    if accountant == "pld":
        return make_accountant("pld", value_discretization_interval=PLD_INTERVAL)
    if accountant == "rdp":
        return make_accountant("rdp")
    raise ValueError(f"DP-SGD is accounted with 'rdp' or 'pld', got {accountant!r}")


def total_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "rdp") -> float:
    """Total ε at δ of `steps` Poisson-sampled Gaussian steps (σ = `noise_multiplier`, q = `sample_rate`).

    ``"rdp"``: dp_accounting's RDP accountant on its default order grid; ``"pld"``: its pessimistic PLD on a
    grid of :data:`PLD_INTERVAL`. Both are upper bounds; PLD is the tighter. σ = 0 is ∞.
    """
    event = GaussianExampleDP(noise_multiplier=noise_multiplier, sample_rate=sample_rate).dp_event(steps)
    with _quiet_rdp_orders():
        return float(_accountant(accountant).epsilon(event, delta).epsilon)


def calibrate_noise_multiplier(target_epsilon: float, delta: float, sample_rate: float, steps: int,
                               accountant: str = "rdp", tolerance: float = 1e-3) -> float:
    """The smallest σ (to `tolerance` relative) whose total ε at δ is ≤ `target_epsilon` under `accountant`.

    ε falls as σ grows, so σ is bracketed by doubling/halving from 1 and then bisected; the returned σ is the
    bracket's upper end, whose ε is ≤ the target (never above it). `steps` is every step a record can be sampled
    in (steps per round × rounds). An infinite target is no DP (the caller passes no dp object); ≤ 0 is not a
    budget.
    """
    target = float(target_epsilon)
    if not target > 0 or math.isnan(target):
        raise ValueError(f"target_epsilon must be > 0, got {target_epsilon!r}")
    if math.isinf(target):
        raise ValueError("target_epsilon = inf is no DP: train without a dp object instead of calibrating noise")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must lie in (0, 1), got {tolerance}")
    _accountant(accountant)  # an unknown name fails before any composition

    def fits(sigma: float) -> bool:
        return total_epsilon(sigma, sample_rate, steps, delta, accountant) <= target

    lo, hi = 0.5, 1.0
    while not fits(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            raise ValueError(f"target_epsilon {target} needs noise_multiplier > 1e6: not a usable budget")
    while fits(lo):
        lo, hi = 0.5 * lo, lo
        if lo < 1e-4:
            raise ValueError(f"target_epsilon {target} is met with noise_multiplier < 1e-4: effectively no DP")
    while (hi - lo) > tolerance * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi
