"""SimpleNet: the paper's lightweight fully connected classifier, Linear → ReLU → Dropout → Linear."""

from __future__ import annotations

import torch
from torch import nn

from eegprivacy.models.base import seeded

__all__ = ["SimpleNet"]


class SimpleNet(nn.Module):
    """Input projection to `n_hidden` units, ReLU, dropout, then the classification layer.

    Inputs of any trailing shape are flattened per trial (log-variance features (n, k) or projected signals
    (n, k, t)). `seed` fixes the initial weights without touching the caller's RNG. The paper gives neither the
    width nor the dropout rate; 64 units and p = 0.5 are the defaults here.
    """

    def __init__(self, n_features: int, n_classes: int = 2, n_hidden: int = 64, dropout: float = 0.5,
                 seed: int | None = None):
        super().__init__()
        if n_features < 1 or n_hidden < 1 or n_classes < 2:
            raise ValueError("SimpleNet needs n_features >= 1, n_hidden >= 1 and n_classes >= 2")
        self.n_features, self.n_classes, self.n_hidden = int(n_features), int(n_classes), int(n_hidden)
        with seeded(seed):
            self.hidden = nn.Linear(self.n_features, self.n_hidden)
            self.dropout = nn.Dropout(float(dropout))
            self.classifier = nn.Linear(self.n_hidden, self.n_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden layer's activations (after ReLU, before dropout): the feature-level attack's input."""
        return torch.relu(self.hidden(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.embed(x)))
