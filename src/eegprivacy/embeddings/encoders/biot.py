"""BIOT (Yang et al. 2023) as a frozen encoder, and the bipolar montage our BIOT cells read."""

from __future__ import annotations

from eegprivacy.embeddings.encoders.base import FrozenEncoder

__all__ = ["BIOT_18_BIPOLAR", "BIOTEncoder"]

# Our BIOT montage (self-pretrained and random-init cells): the TUH "double banana" bipolar montage (16
# derivations) plus Fz-Cz and Cz-Pz, every one computable from a 10-20 referential recording. The *published*
# 18-channel checkpoints read the same 16 plus SHHS's C3-A2 and C4-A1 instead (published-weights README; braindecode's
# BIOT_CHANNEL_ORDER), PREST-16 the 16 only: a published BIOT cell gets that montage through config ``n_chans``.
BIOT_18_BIPOLAR = ["FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP2-F8", "F8-T8", "T8-P8", "P8-O2",
                   "FP1-F3", "F3-C3", "C3-P3", "P3-O1", "FP2-F4", "F4-C4", "C4-P4", "P4-O2", "FZ-CZ", "CZ-PZ"]


class BIOTEncoder(FrozenEncoder):
    """BIOT (Yang et al. 2023): per-channel STFT tokens + linear-attention transformer, 200 Hz, 18-channel bipolar.

    Missing derivations are zero-filled *with a flag* (the channel tokens are positional). Input: each channel
    divided by its 95th percentile of |x| (BIOT's own preprocessing), so the unit of the recording does not matter.
    Default config = the published one (embed_dim 256, 8 heads, 4 layers, hop 100).
    """

    name = "biot"
    expected_sfreq = 200.0
    expected_channels = BIOT_18_BIPOLAR
    default_missing = "zero"

    def __init__(self, ch_names, sfreq, window_s=4.0, **kwargs):
        # config ``n_chans`` (16 or 18) selects the *published* checkpoints' channel tokens: the 16 TUH bipolar
        # derivations, plus SHHS's C3-A2 and C4-A1 for the 18-channel ones (braindecode's BIOT_CHANNEL_ORDER).
        # Without it the montage is ours: the 16 derivations plus Fz-Cz and Cz-Pz (BIOT_18_BIPOLAR).
        n = (kwargs.get("config") or {}).get("n_chans")
        if n is not None:
            from braindecode.models.biot import BIOT_CHANNEL_ORDER

            if int(n) not in (16, 18):
                raise ValueError(f"BIOT's published checkpoints read 16 or 18 channels, got n_chans={n!r}")
            self.expected_channels = [c.upper() for c in BIOT_CHANNEL_ORDER[:int(n)]]
        super().__init__(ch_names, sfreq, window_s, **kwargs)

    def _config(self, overrides):
        return {"embed_dim": 256, "num_heads": 8, "num_layers": 4, "hop_length": 100, **overrides}

    def _build(self):
        import warnings

        from braindecode.models import BIOT

        config = {k: v for k, v in self.config.items() if k != "n_chans"}  # the montage, not a BIOT argument
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(200 Hz|less than 1 second).*")
            return BIOT(n_chans=len(self.mapping.output), n_times=self.n_times, sfreq=self.expected_sfreq,
                        n_outputs=2, **config)

    def _scale(self, x):
        import torch

        q = torch.quantile(x.abs(), 0.95, dim=-1, keepdim=True)
        return x / torch.where(q > 0, q, torch.ones_like(q))

    def _embed(self, x):
        return self.model(x, return_features=True)["features"]

