"""LaBraM (Jiang et al. 2024) as a frozen encoder, on the canonical 10-20 channels a dataset has."""

from __future__ import annotations

import logging
from typing import Sequence

from eegprivacy.embeddings.encoders.base import _ALIASES, FrozenEncoder

log = logging.getLogger(__name__)

__all__ = ["LaBraMEncoder"]

class LaBraMEncoder(FrozenEncoder):
    """LaBraM (Jiang et al. 2024): 1 s patches (200 samples at 200 Hz) per channel, each with a learned
    embedding of its canonical 10-20 position; missing canonical channels are dropped with a flag.

    Input in units of 0.1 mV (LaBraM divides µV by 100). Default config = LaBraM-Base (embed 200, 12 layers, 10
    heads); the embedding is ``fc_norm`` of the mean patch token (``use_mean_pooling=True``, LaBraM's fine-tuning
    default). The published config keeps the pretrained final ``norm`` instead (``use_mean_pooling=False``: the
    released file has ``norm`` and no ``fc_norm``) and the embedding is the mean of the normed patch tokens.
    """

    name = "labram"
    expected_sfreq = 200.0
    default_missing = "drop"

    def __init__(self, ch_names, sfreq, window_s=4.0, **kwargs):
        # LaBraM takes any subset of its canonical channels, so its montage is "the canonical channels this
        # dataset has"; dataset channels outside the canonical list are ignored with a flag.
        self.expected_channels = _labram_targets(ch_names)
        unknown = [c for c in ch_names if c.upper() not in self.expected_channels
                   and _ALIASES.get(c.upper()) not in self.expected_channels]
        super().__init__(ch_names, sfreq, window_s, **kwargs)
        if unknown:
            self.mapping.flags.append(f"not_in_canonical_montage:{len(unknown)}")
            log.warning("LaBraM: %d dataset channel(s) outside its canonical montage are ignored: %s", len(unknown),
                        ", ".join(unknown))

    def _config(self, overrides):
        return {"patch_size": 200, "embed_dim": 200, "num_layers": 12, "num_heads": 10, "use_mean_pooling": True,
                **overrides}

    def _build(self):
        import warnings

        from braindecode.models import Labram

        if self.n_times % self.config["patch_size"]:
            raise ValueError(f"LaBraM needs a window that is a whole number of {self.config['patch_size']}-sample "
                             f"patches at {self.expected_sfreq} Hz; {self.window_s} s gives {self.n_times}")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*chs_info.*")
            return Labram(n_chans=len(self.mapping.output), n_times=self.n_times, sfreq=self.expected_sfreq,
                          n_outputs=2, **self.config)

    def _input_chans(self, device):
        import torch
        from braindecode.models.labram import LABRAM_CHANNEL_ORDER

        order = {c.upper(): i for i, c in enumerate(LABRAM_CHANNEL_ORDER)}
        return torch.tensor([0] + [order[c.upper()] + 1 for c in self.mapping.output], device=device)

    def _scale(self, x):
        return x * 1e4  # volts -> 0.1 mV

    def _embed(self, x):
        if self.model.fc_norm is None:  # use_mean_pooling=False (published): mean of the normed patch tokens
            return self.model.forward_features(x, input_chans=self._input_chans(x.device),
                                               return_patch_tokens=True).mean(dim=1)
        return self.model.forward_features(x, input_chans=self._input_chans(x.device))


def _labram_targets(ch_names: Sequence[str]) -> list[str]:
    from braindecode.models.labram import LABRAM_CHANNEL_ORDER

    canon = {c.upper() for c in LABRAM_CHANNEL_ORDER if "-" not in c}
    out = []
    for c in ch_names:
        key = c.upper()
        if key in canon:
            out.append(key)
        elif _ALIASES.get(key) in canon:
            out.append(_ALIASES[key])
    return out

