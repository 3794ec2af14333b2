"""Study B's client-side DP step: clip the batch gradient to L2 ≤ C, add coordinate-wise Laplace(0, C/ε), step.

``LaplaceGradientDP`` is only its parameters (C, ε); ``calibration()`` states the noise scale and what it does
and does not guarantee, and ``privatise_`` applies it to a model's gradients in place. Keeping the two apart
(as Opacus and dp_accounting do) lets a sweep log the calibration before any training runs.

Where it acts. The paper applies the mechanism at every local optimiser step, after ``loss.backward()`` and
before ``optimizer.step()``. A Flower mod cannot do that: a mod wraps the ClientApp's message handler, so it sees
the weights that arrive and the weights that leave, never the optimiser steps in between. (Flower's own
``LocalDpMod`` is that other mechanism: it clips the whole round's update once and adds Gaussian noise to it.)
So the DP object is handed to the torch task, which calls ``privatise_`` inside its step, and the server keeps a
plain FedAvg strategy. The task code is then::

    loss.backward()
    grad_norm = dp.privatise_(model.parameters(), noise_generator)
    optimizer.step()

ε is per mechanism application — one local step on one batch gradient — not a cumulative guarantee over the
steps, epochs and rounds of a run; ``dp_event`` hands the per-step event to dp_accounting for that. The
record-level mechanism with a total ε per trial (DP-SGD: per-example clipping, Gaussian noise, Poisson sampling)
is :mod:`eegprivacy.federated.dp_sgd`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from eegprivacy.privacy.sensitivity import l1_sensitivity_replace_one, l2_sensitivity_replace_one
from eegprivacy.validation import EPSILON_OR_INF, check

__all__ = ["LaplaceGradientDP", "laplace_noise", "PER_STEP_NOTE"]

PER_STEP_NOTE = ("epsilon is per mechanism application (one local optimiser step on one batch gradient), "
                 "not a cumulative guarantee over steps, epochs or rounds")


def laplace_noise(shape, scale: float, generator: torch.Generator, *, dtype: torch.dtype = torch.float32
                  ) -> torch.Tensor:
    """Laplace(0, scale) draws from `generator` by the inverse CDF (``torch.distributions`` takes no generator).

    Uniforms are drawn in float64 so the one value whose inverse is infinite (u = 0) has probability 2⁻⁵³; it
    is moved to the next representable uniform, which caps |x| at about 37·scale instead of ∞.
    """
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
    v = (2.0 * u - 1.0).clamp(min=-1.0 + 2.0 ** -53)  # v ∈ (-1, 1): sign and magnitude of the draw
    return (-float(scale) * torch.sign(v) * torch.log1p(-v.abs())).to(dtype)


@dataclass(frozen=True)
class LaplaceGradientDP:
    """The paper's per-step mechanism: global L2 clip of the gradients to C, then coordinate-wise Laplace(0, C/ε).

    ``epsilon=math.inf`` is no DP at all (gradients untouched) unless ``clip_only=True``, which clips without
    noise — the control that separates what clipping alone does to utility and leakage from what noise does.
    """

    clip_norm: float = 1.0
    epsilon: float = math.inf
    clip_only: bool = False

    name: ClassVar[str] = "laplace_gradient"

    def __post_init__(self) -> None:
        clip_norm, epsilon = float(self.clip_norm), float(self.epsilon)
        if not (math.isfinite(clip_norm) and clip_norm > 0):
            raise ValueError(f"clip_norm must be a positive finite number, got {self.clip_norm!r}")
        check(epsilon, EPSILON_OR_INF, "epsilon")
        if self.clip_only and math.isfinite(epsilon):
            raise ValueError("clip_only=True means clipping without noise, which only fits epsilon=inf; "
                             f"got epsilon={epsilon}")
        object.__setattr__(self, "clip_norm", clip_norm)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "clip_only", bool(self.clip_only))

    @property
    def clips(self) -> bool:
        return math.isfinite(self.epsilon) or self.clip_only

    @property
    def noise_scale(self) -> float:
        """b = C/ε as the paper calibrates it; 0 when there is no noise."""
        return self.clip_norm / self.epsilon if math.isfinite(self.epsilon) else 0.0

    def privatise_(self, parameters: Iterable[torch.nn.Parameter], generator: torch.Generator | None = None
                   ) -> float:
        """Clip and noise the ``.grad`` of `parameters` in place; returns the global L2 norm before clipping.

        Parameters without a gradient (frozen, or unused in this forward pass) are left alone, as the optimiser
        skips them too. Noise is drawn parameter by parameter in the given order from `generator`, so the same
        seed and model give the same noise. A non-finite gradient is an error: clipping cannot bound it.
        """
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            raise ValueError("no parameter has a gradient: call privatise_ after loss.backward()")
        with torch.no_grad():
            norm = float(torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.detach(), dtype=torch.float64) for g in grads])))
            if not math.isfinite(norm):
                raise ValueError(f"gradient norm is {norm}: the loss or the model diverged; DP cannot clip it")
            if not self.clips:
                return norm
            if norm > self.clip_norm:
                factor = self.clip_norm / norm
                for g in grads:
                    g.mul_(factor)
            if math.isfinite(self.epsilon):
                if generator is None:
                    raise ValueError("a torch.Generator is needed to draw the Laplace noise reproducibly")
                for g in grads:
                    g.add_(laplace_noise(g.shape, self.noise_scale, generator, dtype=g.dtype).to(g.device))
        return norm

    def calibration(self, dim: int | None = None) -> dict:
        """Noise scale, clip norm, ε and what they mean; with the gradient dimension `dim`, also the L1
        sensitivity and the ε per step that this noise formally certifies (2·sqrt(d)·ε)."""
        out = {"mechanism": self.name, "noise_scale": self.noise_scale, "clip_norm": self.clip_norm,
               "epsilon": self.epsilon, "clip_only": self.clip_only}
        if not math.isfinite(self.epsilon):
            out["sensitivity_note"] = (
                "no DP: gradients are clipped to L2 <= C but not noised (clip_only control), no privacy claim"
                if self.clip_only else "no DP: gradients are neither clipped nor noised, no privacy claim")
            return out
        note = (f"{PER_STEP_NOTE}. Each step clips the client's batch gradient (not each example's) to L2 <= C, "
                "so for any change to the batch the clipped gradient moves by at most 2C in L2 (replace-one); the "
                "unit protected is therefore the batch, and an example's privacy loss composes over every step "
                "whose batch holds it, a client's over all its steps in all rounds it joins. b = C/eps is the "
                "paper's calibration: coordinate-wise Laplace needs the L1 sensitivity, which L2 clipping bounds "
                "only by 2*sqrt(d)*C for a d-dimensional gradient, so b = C/eps is NOT a formal eps-DP guarantee "
                "for d > 1 (it certifies 2*sqrt(d)*eps per step); noise is added after clipping, and Adam on the "
                "noisy gradients is post-processing. Model buffers updated in the forward pass (BatchNorm running "
                "statistics) are not gradients and are not covered.")
        out["sensitivity_note"] = note
        if dim is not None:
            delta1 = l1_sensitivity_replace_one(self.clip_norm, dim)
            out.update(dim=int(dim), l2_sensitivity=l2_sensitivity_replace_one(self.clip_norm),
                       l1_sensitivity=delta1, epsilon_certified_per_step=delta1 / self.noise_scale,
                       formal_guarantee=False)
        return out

    def dp_event(self, dim: int, steps: int = 1):
        """The dp_accounting event for `steps` applications to a `dim`-dimensional gradient.

        Its noise multiplier is b/Δ1 with Δ1 = 2·sqrt(d)·C, the bound the clipping actually gives, so an
        accountant composes the certified per-step ε, not the nominal one. No noise: ``NonPrivateDpEvent``.
        """
        import dp_accounting

        if int(steps) != steps or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps}")
        if not math.isfinite(self.epsilon):
            return dp_accounting.NonPrivateDpEvent()
        multiplier = self.noise_scale / l1_sensitivity_replace_one(self.clip_norm, dim)
        event = dp_accounting.LaplaceDpEvent(noise_multiplier=multiplier)
        return event if steps == 1 else dp_accounting.SelfComposedDpEvent(event, int(steps))

    def to_dict(self) -> dict:
        """Flat MLflow params (``dp_`` prefix); ε = ∞ logs as ``inf``."""
        return {"dp_mechanism": self.name, "dp_epsilon": self.epsilon, "dp_clip_norm": self.clip_norm,
                "dp_noise_scale": self.noise_scale, "dp_clip_only": self.clip_only, "dp_epsilon_scope": "per_step"}

    @classmethod
    def from_dict(cls, params: Mapping) -> LaplaceGradientDP:
        """Inverse of ``to_dict`` (also reads a flat params/ConfigRecord mapping with those keys)."""
        clip_only = params.get("dp_clip_only", False)
        if isinstance(clip_only, str):
            clip_only = clip_only.strip().lower() in ("1", "true", "yes")
        return cls(clip_norm=float(params.get("dp_clip_norm", 1.0)),
                   epsilon=float(params.get("dp_epsilon", math.inf)), clip_only=bool(clip_only))
