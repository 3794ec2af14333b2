"""EEGPT (Wang et al. 2024) as a frozen encoder, fed its linear-probe channels without a projection layer."""

from __future__ import annotations

from eegprivacy.embeddings.encoders.base import FrozenEncoder

__all__ = ["EEGPTEncoder"]

class EEGPTEncoder(FrozenEncoder):
    """EEGPT (Wang et al. 2024): 64-sample patches at 256 Hz, per-channel embeddings of its 62 10-20 names,
    ``embed_num`` learned summary tokens per patch.

    We feed the mapped channels straight to the encoder (``chan_proj_type="none"``, each with its own pretrained
    channel embedding) rather than through braindecode's default learned 1x1 projection to 19 channels: that
    projection is a fine-tuning layer no pretrained checkpoint contains, so it would stay random. The 19 EEGPT
    linear-probe channels are the expected montage; missing ones are dropped with a flag. Input in mV.
    Default config = the published "large" encoder (embed 512, depth 8, 8 heads, 4 summary tokens) but with
    braindecode's overlapping patches (stride 32); :data:`PUBLISHED_CONFIGS` has the pretraining's stride 64.
    """

    name = "eegpt"
    expected_sfreq = 256.0
    default_missing = "drop"

    def __init__(self, ch_names, sfreq, window_s=4.0, **kwargs):
        from braindecode.models.eegpt import EEGPT_19_CHANNELS

        self.expected_channels = list(EEGPT_19_CHANNELS)
        super().__init__(ch_names, sfreq, window_s, **kwargs)

    def _config(self, overrides):
        return {"patch_size": 64, "patch_stride": 32, "embed_num": 4, "embed_dim": 512, "depth": 8, "num_heads": 8,
                **overrides}

    def _build(self):
        from braindecode.models import EEGPT

        chs_info = [{"ch_name": c} for c in self.mapping.output]
        return EEGPT(n_chans=len(self.mapping.output), chs_info=chs_info, n_times=self.n_times,
                     sfreq=self.expected_sfreq, n_outputs=2, chan_proj_type="none", **self.config)

    def _scale(self, x):
        return x * 1e3  # volts -> mV

    def _embed(self, x):
        z = self.model(x, return_features=True)["features"]  # (n, patches, embed_num * embed_dim)
        return z.mean(dim=1)

