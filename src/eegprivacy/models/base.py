"""What every study-B network shares: seeded construction and the ``embed`` hook the feature-level attack reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch

__all__ = ["seeded", "EmbeddingModel"]


@contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Run the block on torch's global RNG seeded with `seed`, then put the caller's RNG state back.

    Layer constructors draw their initial weights from the global RNG (there is no generator argument), so
    this is how one seed gives one network without moving anyone else's random stream. ``None``: no seeding.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        # the CPU generator only, the one fork_rng(devices=[]) restores: torch.manual_seed would also queue a seed
        # for CUDA's generators (never put back; ~1 ms a call to record its stack while CUDA is not initialised)
        torch.default_generator.manual_seed(int(seed))
        yield


@runtime_checkable
class EmbeddingModel(Protocol):
    """A classifier (logits from ``forward``) that also exposes one internal layer, flattened per trial."""

    def forward(self, x: torch.Tensor) -> torch.Tensor: ...

    def embed(self, x: torch.Tensor) -> torch.Tensor: ...
