"""Gradient-level views of a model for the membership attacks: per-sample gradient norms and update vectors.

Per-sample norms come from ``torch.func`` (``functional_call`` + ``vmap(grad)``): one vectorised pass instead
of one backward pass per trial, with the same numbers. They are taken in eval mode — dropout off, BatchNorm on
its running statistics — so a trial's norm depends on the trial and the weights only, not on its batch-mates
or a random mask; that is what makes member and non-member distributions comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

__all__ = ["per_sample_grad_norms", "update_vector", "apply_update"]


def per_sample_grad_norms(model: torch.nn.Module, X, y, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                          *, chunk_size: int | None = 256) -> np.ndarray:
    """L2 norm of ∇θ loss(model(xᵢ), yᵢ) over all trainable parameters, one value per row of `X`.

    `loss_fn` is called on a batch of one (``logits[None]``, ``y[None]``), e.g. ``nn.CrossEntropyLoss()``; it
    must return a scalar. `chunk_size` bounds memory (``vmap`` holds chunk_size × n_parameters gradients at
    once). The model's train/eval flags are restored afterwards; its weights are not touched.
    """
    params = {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise ValueError("the model has no trainable parameters")
    frozen = {k: p.detach() for k, p in model.named_parameters() if not p.requires_grad}
    buffers = {k: b.detach() for k, b in model.named_buffers()}
    first = next(iter(params.values()))
    X_t = torch.as_tensor(X).to(device=first.device, dtype=first.dtype)
    y_t = torch.as_tensor(y).to(first.device)
    if y_t.is_floating_point() and torch.all(y_t == y_t.round()):
        y_t = y_t.long()  # integer class labels that arrived as floats
    if X_t.shape[0] != y_t.shape[0]:
        raise ValueError(f"X has {X_t.shape[0]} rows but y has {y_t.shape[0]}")
    if X_t.shape[0] == 0:
        return np.zeros(0)

    def sample_loss(p, x, target):
        out = functional_call(model, (p, frozen, buffers), (x.unsqueeze(0),))
        return loss_fn(out, target.unsqueeze(0))

    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0), chunk_size=chunk_size)(params, X_t, y_t)
    finally:
        for m, training in modes.items():
            m.training = training
    squares = sum(g.reshape(g.shape[0], -1).double().pow(2).sum(dim=1) for g in per_sample.values())
    return squares.sqrt().cpu().numpy()


def update_vector(new_weights: Sequence[np.ndarray], old_weights: Sequence[np.ndarray]) -> np.ndarray:
    """new − old for every array, flattened in order into one float64 vector (a client's update for GLA/CLA)."""
    if len(new_weights) != len(old_weights):
        raise ValueError(f"{len(new_weights)} new arrays but {len(old_weights)} old ones")
    parts = []
    for i, (new, old) in enumerate(zip(new_weights, old_weights)):
        new, old = np.asarray(new), np.asarray(old)
        if new.shape != old.shape:
            raise ValueError(f"array {i}: new shape {new.shape} differs from old shape {old.shape}")
        parts.append((new.astype(np.float64) - old.astype(np.float64)).ravel())
    return np.concatenate(parts) if parts else np.zeros(0)


def apply_update(old_weights: Sequence[np.ndarray], vector: np.ndarray) -> list[np.ndarray]:
    """Inverse of ``update_vector``: old + the vector's segments, reshaped and cast back to each old dtype."""
    vector = np.asarray(vector, dtype=np.float64).ravel()
    sizes = [np.asarray(w).size for w in old_weights]
    if vector.size != sum(sizes):
        raise ValueError(f"update has {vector.size} values but the weights hold {sum(sizes)}")
    out, start = [], 0
    for w, size in zip(old_weights, sizes):
        w = np.asarray(w)
        out.append((w.astype(np.float64) + vector[start:start + size].reshape(w.shape)).astype(w.dtype))
        start += size
    return out
