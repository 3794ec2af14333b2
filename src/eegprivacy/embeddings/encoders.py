"""Frozen EEG encoders for study C: BIOT, LaBraM and EEGPT (braindecode 1.8.1) plus a log band-power reference.

Study C audits what a provider leaks when it releases ``z = f(x)`` instead of ``x``. Every encoder here is an
sklearn-style transformer: ``fit`` does nothing (the encoder is frozen; weights come from :func:`load_checkpoint`,
from :mod:`eegprivacy.embeddings.pretrain`, or stay at a seeded random initialisation), and ``transform`` maps windows
``(n, channels, samples)`` given *at the dataset's own sampling rate and montage* to embeddings ``(n, d)``.

What ``transform`` does, and why it is explicit (protocol, "Encoders"):

1. **Channel mapping** (:class:`ChannelMapping`): the dataset's channel names are matched to the encoder's expected
   montage by name (case-insensitive, with the old/new 10-20 aliases T3/T7, T4/T8, T5/P7, T6/P8). A target
   channel the dataset lacks is never silently zero-filled: it is either dropped (LaBraM and EEGPT take any subset
   of their canonical channels, each with its own learned channel embedding) or zero-filled *with a flag*
   (BIOT's channel tokens are positional, so a channel cannot be dropped without shifting every later one), or the
   construction raises (``missing="raise"``). The mapping record (used, aliased, missing, flags) is an attribute
   and is logged.
2. **Resampling** to the encoder's expected rate (polyphase, :func:`scipy.signal.resample_poly`).
3. **Input scaling** from volts to the unit each model was pretrained on (ours, from the models' papers/code:
   BIOT per-channel 95th-percentile normalisation, LaBraM 0.1 mV, EEGPT mV).
4. The model in eval mode, without gradients, in batches; the embedding is the pooled representation before the
   classification head (BIOT: the encoder's mean over tokens; LaBraM: ``fc_norm`` of the mean patch token,
   LaBraM's fine-tuning pooling; EEGPT: the summary tokens averaged over temporal patches, concatenated over the
   ``embed_num`` summary tokens -- **ours**: EEGPT's own probe flattens over patches, which would tie ``d`` to the
   window length).

Weights: ``weights_source`` is one of ``"checkpoint"`` (an official checkpoint from a local path),
``"self_pretrained"`` (:mod:`eegprivacy.embeddings.pretrain`) or ``"random_init"`` (explicit baseline); the band-power
reference has no weights (``"none"``). Nothing is ever downloaded: no hub access is possible or attempted.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

WEIGHTS_SOURCES = ("checkpoint", "self_pretrained", "random_init")
# Bands of the protocol's centered-PSD attribute (Hz); the band-power reference uses the same ones.
BANDS: dict[str, tuple[float, float]] = {"delta": (1.0, 4.0), "theta": (4.0, 8.0), "alpha": (8.0, 13.0),
                                         "beta": (13.0, 30.0), "gamma": (30.0, 45.0)}

# Old (T3..T6) and new (T7, T8, P7, P8) names of the same 10-20 electrodes.
_ALIASES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8", "T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}

# BIOT's 18-channel pretrained model reads the TUH "double banana" bipolar montage (16 derivations) plus Fz-Cz and
# Cz-Pz, in this order; every derivation is computable from a 10-20 referential recording.
BIOT_18_BIPOLAR = ["FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP2-F8", "F8-T8", "T8-P8", "P8-O2",
                   "FP1-F3", "F3-C3", "C3-P3", "P3-O1", "FP2-F4", "F4-C4", "C4-P4", "P4-O2", "FZ-CZ", "CZ-PZ"]


class CheckpointRequiredError(RuntimeError):
    """Weights were requested but no local checkpoint was given (and this code never downloads from a hub)."""


class CheckpointMismatchError(ValueError):
    """A checkpoint's keys or tensor shapes do not match the encoder (wrong model, config or window length)."""


class ChecksumError(ValueError):
    """A checkpoint file's sha256 is not the one the caller expected."""


# ---- channel mapping ------------------------------------------------------------------------------------------

@dataclass
class ChannelMapping:
    """Explicit map from a dataset's channels to an encoder's expected montage.

    ``matrix`` (n_out, n_in) turns dataset channels into encoder channels: one 1 per referential target, +1/-1 for
    a bipolar target ``"A-B"``, an all-zero row for a zero-filled missing target (flagged). ``output`` are the
    encoder channel names actually fed to the model (dropped targets are absent).
    """

    source: list[str]
    target: list[str]
    output: list[str]
    matrix: np.ndarray = field(repr=False)
    aliased: dict[str, str] = field(default_factory=dict)   # target -> dataset channel used under another name
    missing: list[str] = field(default_factory=list)        # targets the dataset cannot provide
    missing_policy: str = "drop"
    unused: list[str] = field(default_factory=list)         # dataset channels the encoder ignores
    flags: list[str] = field(default_factory=list)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(n, n_in, t) -> (n, n_out, t)."""
        if x.shape[1] != len(self.source):
            raise ValueError(f"windows have {x.shape[1]} channels, the mapping expects {len(self.source)} "
                             f"({', '.join(self.source)})")
        return np.einsum("oc,nct->not", self.matrix, x, optimize=True)

    def record(self) -> dict[str, Any]:
        """JSON-able summary for logs and run params (channel names are montage labels, not identifiers)."""
        return {"source": list(self.source), "target": list(self.target), "output": list(self.output),
                "aliased": dict(self.aliased), "missing": list(self.missing), "missing_policy": self.missing_policy,
                "unused": list(self.unused), "flags": list(self.flags), "n_in": len(self.source),
                "n_out": len(self.output)}


def _resolve(name: str, index: dict[str, int]) -> tuple[int | None, str | None]:
    key = name.upper()
    if key in index:
        return index[key], None
    alias = _ALIASES.get(key)
    if alias is not None and alias in index:
        return index[alias], alias
    return None, None


def map_channels(source: Sequence[str], target: Sequence[str], missing: str = "drop") -> ChannelMapping:
    """Build the :class:`ChannelMapping` of ``source`` (dataset) channels onto ``target`` (encoder) channels.

    ``missing``: ``"drop"`` (leave the target out; flag ``missing_dropped:<n>``), ``"zero"`` (all-zero row; flag
    ``missing_zero_filled:<n>``) or ``"raise"``. A target ``"A-B"`` that is not itself a dataset channel is a
    bipolar derivation and needs both A and B. Targets are matched case-insensitively and through the T3/T7-style
    aliases; each alias use is recorded and flagged (``aliased:<n>``).
    """
    if missing not in ("drop", "zero", "raise"):
        raise ValueError(f"missing must be 'drop', 'zero' or 'raise', got {missing!r}")
    source = [str(s) for s in source]
    index: dict[str, int] = {}
    for i, name in enumerate(source):
        if name.upper() in index:
            raise ValueError(f"duplicate channel name {name!r} in the dataset's channels")
        index[name.upper()] = i
    rows, output, missing_names, aliased, used = [], [], [], {}, set()
    for tgt in target:
        row = np.zeros(len(source))
        i, alias = _resolve(tgt, index)
        if i is not None:
            row[i] = 1.0
            used.add(i)
            if alias is not None:
                aliased[tgt] = source[i]
        elif "-" in tgt:
            a_name, b_name = tgt.split("-", 1)
            (a, a_alias), (b, b_alias) = _resolve(a_name, index), _resolve(b_name, index)
            if a is None or b is None:
                i = None
            else:
                row[a], row[b] = 1.0, -1.0
                used.update((a, b))
                if a_alias or b_alias:
                    aliased[tgt] = f"{source[a]}-{source[b]}"
                i = a
        if i is None:
            missing_names.append(tgt)
            if missing == "drop":
                continue
        rows.append(row)
        output.append(tgt)
    flags = []
    if missing_names:
        if missing == "raise":
            raise ValueError(f"the dataset lacks {len(missing_names)} channel(s) the encoder expects: "
                             f"{', '.join(missing_names)} (pass missing='drop' or 'zero' to continue with a flag)")
        flags.append(f"missing_{'dropped' if missing == 'drop' else 'zero_filled'}:{len(missing_names)}")
    if aliased:
        flags.append(f"aliased:{len(aliased)}")
    if not output or all(not np.any(r) for r in rows):
        raise ValueError(f"none of the encoder's channels ({', '.join(target)}) is in the dataset "
                         f"({', '.join(source)})")
    unused = [source[i] for i in range(len(source)) if i not in used]
    mapping = ChannelMapping(source, list(target), output, np.asarray(rows, dtype=np.float64), aliased,
                             missing_names, missing, unused, flags)
    if missing_names:
        log.warning("channel mapping: %d expected channel(s) missing (%s), policy %r: %s", len(missing_names),
                    ", ".join(missing_names), missing, ", ".join(flags))
    log.info("channel mapping: %s", mapping.record())
    return mapping


# ---- resampling and scaling -----------------------------------------------------------------------------------

def resample(x: np.ndarray, sfreq_in: float, sfreq_out: float) -> np.ndarray:
    """Polyphase resampling along the last axis (anti-aliasing included); identity when the rates match."""
    if sfreq_in <= 0 or sfreq_out <= 0:
        raise ValueError(f"sampling rates must be positive, got {sfreq_in} -> {sfreq_out}")
    if math.isclose(sfreq_in, sfreq_out):
        return x
    from scipy.signal import resample_poly

    ratio = Fraction(sfreq_out / sfreq_in).limit_denominator(1000)
    return resample_poly(x, ratio.numerator, ratio.denominator, axis=-1)


def n_samples(window_s: float, sfreq: float) -> int:
    return int(round(window_s * sfreq))


# ---- the interface -------------------------------------------------------------------------------------------

class FrozenEncoder:
    """sklearn-style frozen encoder; subclasses set the montage, rate, scaling and pooled forward pass.

    Parameters common to all: ``ch_names`` and ``sfreq`` of the *dataset* windows, ``window_s`` (window length in
    seconds, the same at every rate), ``missing`` (channel policy, see :func:`map_channels`), ``batch_size`` and
    ``seed`` (the random initialisation; the forward pass in eval mode is deterministic).
    """

    name: str = ""
    expected_sfreq: float = 0.0
    expected_channels: list[str] = []
    default_missing: str = "drop"

    def __init__(self, ch_names: Sequence[str], sfreq: float, window_s: float = 4.0, *, missing: str | None = None,
                 batch_size: int = 32, seed: int = 0, config: dict | None = None):
        self.ch_names = [str(c) for c in ch_names]
        self.sfreq = float(sfreq)
        self.window_s = float(window_s)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.missing = missing or self.default_missing
        self.mapping = map_channels(self.ch_names, self.expected_channels, self.missing)
        self.config = self._config(dict(config or {}))
        self.weights_source = "random_init"
        self.checkpoint_sha256: str | None = None
        self.model = self._build_seeded()

    # -- to implement --------------------------------------------------------------------------------------------
    def _config(self, overrides: dict) -> dict:
        return overrides

    def _build(self):
        raise NotImplementedError

    def _scale(self, x):
        """Volts -> the model's input unit (torch tensor in, tensor out)."""
        return x

    def _embed(self, x):
        """Pooled representation before the classification head, (n, d)."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------------------------
    @property
    def n_times(self) -> int:
        return n_samples(self.window_s, self.expected_sfreq)

    @property
    def n_in_times(self) -> int:
        return n_samples(self.window_s, self.sfreq)

    def _build_seeded(self):
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = self._build()
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        return model

    def reinit(self) -> "FrozenEncoder":
        """Back to the seeded random initialisation (``weights_source = "random_init"``)."""
        self.model = self._build_seeded()
        self.weights_source, self.checkpoint_sha256 = "random_init", None
        return self

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def embedding_dim(self) -> int:
        return int(self.transform(np.zeros((1, len(self.ch_names), self.n_in_times), dtype=np.float32)).shape[1])

    def prepare(self, X: np.ndarray):
        """Dataset windows (n, ch, samples at ``sfreq``, volts) -> model input tensor (mapped, resampled, scaled)."""
        import torch

        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3:
            raise ValueError(f"windows must be (n, channels, samples), got shape {X.shape}")
        if X.shape[2] != self.n_in_times:
            raise ValueError(f"windows have {X.shape[2]} samples; {self.name} was built for {self.window_s} s at "
                             f"{self.sfreq} Hz = {self.n_in_times} samples")
        x = resample(self.mapping.apply(X), self.sfreq, self.expected_sfreq)
        if x.shape[2] != self.n_times:  # rounding of non-integer resampling ratios
            x = x[:, :, :self.n_times] if x.shape[2] > self.n_times else np.pad(
                x, ((0, 0), (0, 0), (0, self.n_times - x.shape[2])))
        return self._scale(torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32))

    def fit(self, X=None, y=None) -> "FrozenEncoder":
        """No-op: the encoder is frozen (load weights with :func:`load_checkpoint` or pretrain beforehand)."""
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """(n, channels, samples) at the dataset's rate -> (n, d) float32 embeddings; eval mode, no grad."""
        import torch

        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(X), self.batch_size):
                out.append(self._embed(self.prepare(X[start:start + self.batch_size])).cpu().numpy())
        if not out:
            return np.zeros((0, self.embedding_dim), dtype=np.float32)
        return np.concatenate(out).astype(np.float32)

    def fit_transform(self, X, y=None) -> np.ndarray:
        return self.fit(X, y).transform(X)

    def trainable_forward(self, x):
        """Pooled embedding *with* gradients, for :mod:`eegprivacy.embeddings.pretrain` (x from :meth:`prepare`)."""
        return self._embed(x)

    def encoder_state_dict(self) -> dict:
        """The weights a checkpoint holds: everything but the classification head (``final_layer.*``, which the
        embedding never uses) and montage-derived buffers (recomputed from the channel mapping)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items() if not _skipped_key(k)}

    def describe(self) -> dict[str, Any]:
        """Everything a result row must name about its encoder."""
        return {"encoder": self.name, "weights_source": self.weights_source,
                "checkpoint_sha256": self.checkpoint_sha256, "expected_sfreq": self.expected_sfreq,
                "input_sfreq": self.sfreq, "window_s": self.window_s, "n_times": self.n_times,
                "channels": list(self.mapping.output), "channel_mapping": self.mapping.record(),
                "config": dict(self.config), "n_params": self.n_params, "seed": self.seed}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights_source={self.weights_source!r}, channels={len(self.mapping.output)})"


_SKIP_PREFIXES = ("final_layer.",)
_SKIP_KEYS = ("chans_id",)


def _skipped_key(key: str) -> bool:
    return key.startswith(_SKIP_PREFIXES) or key in _SKIP_KEYS


# ---- BIOT -----------------------------------------------------------------------------------------------------

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

    def _config(self, overrides):
        return {"embed_dim": 256, "num_heads": 8, "num_layers": 4, "hop_length": 100, **overrides}

    def _build(self):
        import warnings

        from braindecode.models import BIOT

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(200 Hz|less than 1 second).*")
            return BIOT(n_chans=len(self.mapping.output), n_times=self.n_times, sfreq=self.expected_sfreq,
                        n_outputs=2, **self.config)

    def _scale(self, x):
        import torch

        q = torch.quantile(x.abs(), 0.95, dim=-1, keepdim=True)
        return x / torch.where(q > 0, q, torch.ones_like(q))

    def _embed(self, x):
        return self.model(x, return_features=True)["features"]


# ---- LaBraM ---------------------------------------------------------------------------------------------------

class LaBraMEncoder(FrozenEncoder):
    """LaBraM (Jiang et al. 2024): 1 s patches (200 samples at 200 Hz) per channel, each with a learned
    embedding of its canonical 10-20 position; missing canonical channels are dropped with a flag.

    Input in units of 0.1 mV (LaBraM divides µV by 100). Default config = LaBraM-Base (embed 200, 12 layers, 10
    heads); the embedding is ``fc_norm`` of the mean patch token (``use_mean_pooling=True``, LaBraM's fine-tuning
    default).
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


# ---- EEGPT ----------------------------------------------------------------------------------------------------

class EEGPTEncoder(FrozenEncoder):
    """EEGPT (Wang et al. 2024): 64-sample patches at 256 Hz, per-channel embeddings of its 62 10-20 names,
    ``embed_num`` learned summary tokens per patch.

    We feed the mapped channels straight to the encoder (``chan_proj_type="none"``, each with its own pretrained
    channel embedding) rather than through braindecode's default learned 1x1 projection to 19 channels: that
    projection is a fine-tuning layer no pretrained checkpoint contains, so it would stay random. The 19 EEGPT
    linear-probe channels are the expected montage; missing ones are dropped with a flag. Input in mV.
    Default config = the published "large" encoder (embed 512, depth 8, 8 heads, 4 summary tokens).
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


# ---- log band powers --------------------------------------------------------------------------------------------

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


ENCODERS: dict[str, type[FrozenEncoder]] = {"biot": BIOTEncoder, "labram": LaBraMEncoder, "eegpt": EEGPTEncoder,
                                            "bandpower": BandPowerEncoder}
# Small configs for tests and CPU smoke runs (logged in ``describe()["config"]`` whenever used).
TINY_CONFIGS: dict[str, dict] = {
    "biot": {"embed_dim": 32, "num_heads": 2, "num_layers": 1},
    "labram": {"num_layers": 1, "num_heads": 2},  # embed_dim is tied to patch_size (200) in braindecode
    "eegpt": {"embed_dim": 32, "depth": 1, "num_heads": 2, "embed_num": 1},
    "bandpower": {},
}


def make_encoder(name: str, ch_names: Sequence[str], sfreq: float, window_s: float = 4.0, *, tiny: bool = False,
                 **kwargs) -> FrozenEncoder:
    """Build an encoder by name (``biot``, ``labram``, ``eegpt``, ``bandpower``) with random-init weights."""
    if name not in ENCODERS:
        raise KeyError(f"unknown encoder {name!r}; known: {', '.join(ENCODERS)}")
    if tiny and name != "bandpower":
        kwargs["config"] = {**TINY_CONFIGS[name], **(kwargs.get("config") or {})}
    return ENCODERS[name](ch_names, sfreq, window_s, **kwargs)


# ---- checkpoints ----------------------------------------------------------------------------------------------

def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _unwrap(obj: Any) -> dict:
    """Official checkpoints are either a flat state dict or wrap one under ``state_dict`` / ``model``."""
    if isinstance(obj, dict) and obj and all(hasattr(v, "shape") for v in obj.values()):
        return obj
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return _unwrap(obj[key])
    raise CheckpointMismatchError("the checkpoint holds no state dict (expected a mapping of tensors, or one under "
                                  "'state_dict' / 'model')")


def load_checkpoint(encoder: FrozenEncoder, path: str | Path | None, sha256: str | None = None, *,
                    source: str = "checkpoint") -> FrozenEncoder:
    """Load weights from a *local* file into ``encoder`` (strict key and shape check), then freeze it.

    This is the same code a user with an official checkpoint runs: ``torch.load`` of a state dict on CPU
    (``weights_only=True``: no pickled code is executed). ``path=None`` raises :class:`CheckpointRequiredError`:
    nothing is ever fetched from a model hub, the caller downloads the file and passes its path. ``sha256``, when
    given, must equal the file's. A classification head (``final_layer.*``) or montage buffer in the file is
    ignored; every other key must match exactly (:class:`CheckpointMismatchError` lists what differs).
    """
    import torch

    if isinstance(encoder, BandPowerEncoder):
        raise TypeError("the band-power encoder has no weights to load")
    if path is None:
        raise CheckpointRequiredError(
            f"{encoder.name}: weights_source='checkpoint' needs a local checkpoint file; this code never downloads "
            f"from a model hub. Download the official {encoder.name} weights on a machine with internet access and "
            f"pass their local path (load_checkpoint(encoder, path='/path/to/{encoder.name}.pt', sha256=...)), or "
            f"use weights_source='self_pretrained' (eegprivacy.embeddings.pretrain) or 'random_init'.")
    path = Path(path)
    if not path.is_file():
        raise CheckpointRequiredError(f"{encoder.name}: checkpoint file {path} does not exist; pass the local path of "
                                      f"the downloaded weights")
    digest = file_sha256(path)
    if sha256 is not None and digest != sha256.lower():
        raise ChecksumError(f"{path}: sha256 {digest} != expected {sha256}")
    state = {k: v for k, v in _unwrap(torch.load(path, map_location="cpu", weights_only=True)).items()
             if not _skipped_key(k)}
    own = encoder.encoder_state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    shapes = sorted(f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                    for k in set(own) & set(state) if tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shapes:
        def _few(items):
            return ", ".join(items[:8]) + (f" (+{len(items) - 8} more)" if len(items) > 8 else "")
        raise CheckpointMismatchError(
            f"{path} does not fit {encoder.name} with config {encoder.config} and window {encoder.window_s} s: "
            + "; ".join(part for part in (f"missing keys [{_few(missing)}]" if missing else "",
                                          f"unexpected keys [{_few(unexpected)}]" if unexpected else "",
                                          f"shape mismatches [{_few(shapes)}]" if shapes else "") if part))
    encoder.model.load_state_dict(state, strict=False)  # strictness checked above, head/buffers excluded
    encoder.model.eval()
    for p in encoder.model.parameters():
        p.requires_grad_(False)
    encoder.weights_source, encoder.checkpoint_sha256 = source, digest
    log.info("%s: loaded %s weights from a local checkpoint (sha256 %s)", encoder.name, source, digest)
    return encoder


def save_checkpoint(encoder: FrozenEncoder, path: str | Path) -> str:
    """Write the encoder's state dict (no head) atomically, plus ``<path>.sha256``; return the file's sha256."""
    import torch

    from eegprivacy.atomic import atomic_path, write_text_atomic

    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(encoder.encoder_state_dict(), tmp)
    digest = file_sha256(path)
    write_text_atomic(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n")
    return digest


def resolve_weights(encoder: FrozenEncoder, weights_source: str, path: str | Path | None = None,
                    sha256: str | None = None) -> FrozenEncoder:
    """Put ``encoder`` in the requested weights state; errors rather than falling back to another source."""
    if weights_source not in WEIGHTS_SOURCES:
        raise ValueError(f"weights_source must be one of {WEIGHTS_SOURCES}, got {weights_source!r}")
    if weights_source == "random_init":
        if path is not None:
            raise ValueError("weights_source='random_init' takes no checkpoint path")
        return encoder.reinit()
    if weights_source == "self_pretrained" and path is None:
        raise CheckpointRequiredError(f"{encoder.name}: weights_source='self_pretrained' needs the checkpoint written "
                                      f"by eegprivacy.embeddings.pretrain.pretrain (its record names path and sha256)")
    return load_checkpoint(encoder, path, sha256, source=weights_source)


def time_embedding(encoder: FrozenEncoder, X: np.ndarray) -> dict[str, float]:
    """Wall time of ``transform(X)`` (for the encoder table in the study's report)."""
    t0 = time.perf_counter()
    Z = encoder.transform(X)
    return {"seconds": time.perf_counter() - t0, "n_windows": len(X), "embedding_dim": int(Z.shape[1])}


__all__ = ["BANDS", "BIOT_18_BIPOLAR", "ENCODERS", "TINY_CONFIGS", "WEIGHTS_SOURCES", "BIOTEncoder",
           "BandPowerEncoder", "ChannelMapping", "CheckpointMismatchError", "CheckpointRequiredError",
           "ChecksumError", "EEGPTEncoder", "FrozenEncoder", "LaBraMEncoder", "file_sha256", "load_checkpoint",
           "make_encoder", "map_channels", "resample", "resolve_weights", "save_checkpoint", "time_embedding"]
