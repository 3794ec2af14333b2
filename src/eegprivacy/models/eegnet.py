"""EEGNet (Lawhern et al. 2018) as braindecode implements it, with the ``embed`` hook of study B.

braindecode's ``EEGNet`` (1.8: the former ``EEGNetv4``) runs on CSP-projected input with few "channels" (the
spatial depthwise convolution simply spans the components): a temporal convolution, a depthwise spatial
convolution with max-norm, separable convolutions, pooling, and the classifier. It is wrapped, not
re-implemented, so its initialisation and constraints are braindecode's. The classifier defaults to the
original's (flatten → dense layer with max-norm 0.25, ``final_layer_with_constraint=True``) rather than
braindecode's convolutional one, which braindecode itself now marks deprecated.

BatchNorm: its running statistics are buffers, updated by the forward pass from the client's data and shipped
with the weights; gradient DP does not touch them. ``batch_norm=False`` swaps every BatchNorm for an identity,
so every array the client sends has passed through the DP step (the option a sound DP comparison needs).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from eegprivacy.models.base import seeded

__all__ = ["EEGNet"]


class EEGNet(nn.Module):
    """braindecode's EEGNet for (n, n_chans, n_times) trials; ``embed`` is its last conv block's output.

    `kwargs` go to ``braindecode.models.EEGNet`` (F1, D, kernel_length, drop_prob, ...). The defaults
    (kernel 64, pools 4 and 8) are tuned for 128 Hz; `n_times` must be at least 32 samples.
    """

    def __init__(self, n_chans: int, n_times: int, n_classes: int = 2, seed: int | None = None,
                 batch_norm: bool = True, **kwargs):
        super().__init__()
        with warnings.catch_warnings():  # braindecode's import chatter (wfdb, montage names) is not ours
            warnings.simplefilter("ignore")
            from braindecode.models import EEGNet as BraindecodeEEGNet

        self.n_chans, self.n_times, self.n_classes = int(n_chans), int(n_times), int(n_classes)
        kwargs.setdefault("final_layer_with_constraint", True)
        with seeded(seed):
            self.net = BraindecodeEEGNet(n_chans=self.n_chans, n_outputs=self.n_classes, n_times=self.n_times,
                                         **kwargs)
        if not batch_norm:
            for name, module in list(self.net.named_children()):
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    setattr(self.net, name, nn.Identity())
        self.batch_norm = bool(batch_norm)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        for name, module in self.net.named_children():
            if name == "final_layer":
                break
            x = module(x)
        return x

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Output of the last conv block (separable conv → BN → ELU → pool → dropout), flattened per trial."""
        return self._features(x).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.final_layer(self._features(x))
