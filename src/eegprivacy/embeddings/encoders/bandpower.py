"""The non-neural reference row: log Welch band powers per channel and band, the features the spectral attribute
averages (:class:`BandPowerEncoder`). It has no weights to load, pretrain or save.
"""

from __future__ import annotations

import numpy as np

from eegprivacy.embeddings.encoders.base import FrozenEncoder, map_channels

__all__ = ["BANDS", "BandPowerEncoder"]

# Bands of the protocol's centered-PSD attribute (Hz); the band-power reference uses the same ones.
BANDS: dict[str, tuple[float, float]] = {"delta": (1.0, 4.0), "theta": (4.0, 8.0), "alpha": (8.0, 13.0),
                                         "beta": (13.0, 30.0), "gamma": (30.0, 45.0)}


class BandPowerEncoder(FrozenEncoder):
    """Non-neural reference row: log10 Welch band power per channel and band (δ θ α β γ), ``d = channels x 5``.

    It reads the dataset's channels as they are (no montage, no resampling, nothing to load): the spectral
    attribute is an average of exactly these features, so it bounds what a linear decoder can recover from an
    encoder that kept the spectrum. Welch: Hann, 1 s segments (or the window if shorter), 50 % overlap -- the
    protocol's attribute estimator.
    """

    name = "bandpower"

    def __init__(self, ch_names, sfreq, window_s=4.0, *, batch_size=256, seed=0, bands=None, missing=None,
                 config=None):
        self.ch_names = [str(c) for c in ch_names]
        self.sfreq = self.expected_sfreq = float(sfreq)
        self.window_s = float(window_s)
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.bands = dict(bands or BANDS)
        self.missing = "drop"
        self.mapping = map_channels(self.ch_names, self.ch_names, "raise")
        self.config = {"bands": {k: list(v) for k, v in self.bands.items()}, "welch_segment_s": 1.0,
                       "overlap": 0.5}
        self.weights_source, self.checkpoint_sha256, self.model = "none", None, None

    @property
    def n_params(self) -> int:
        return 0

    @property
    def embedding_dim(self) -> int:
        return len(self.ch_names) * len(self.bands)

    def transform(self, X: np.ndarray) -> np.ndarray:
        from scipy.signal import welch

        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[1] != len(self.ch_names):
            raise ValueError(f"windows must be (n, {len(self.ch_names)}, samples), got {X.shape}")
        nper = min(X.shape[2], int(round(self.sfreq)))
        freqs, psd = welch(X, fs=self.sfreq, window="hann", nperseg=nper, noverlap=nper // 2, axis=-1)
        df = freqs[1] - freqs[0]
        feats = []
        for lo, hi in self.bands.values():
            sel = (freqs >= lo) & (freqs < hi)
            if not sel.any():
                raise ValueError(f"band {lo}-{hi} Hz has no Welch bin at {self.sfreq} Hz / {nper} samples")
            feats.append(np.log10(psd[..., sel].sum(-1) * df + 1e-30))
        return np.stack(feats, axis=-1).reshape(len(X), -1).astype(np.float32)  # (n, ch*bands), channel-major

    def feature_names(self) -> list[str]:
        return [f"{c}_{b}" for c in self.ch_names for b in self.bands]

    def reinit(self):
        return self

    def encoder_state_dict(self):
        raise TypeError("the band-power encoder has no weights")

