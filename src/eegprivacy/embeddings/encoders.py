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

Weights: ``weights_source`` is one of ``"checkpoint"`` (a state dict of *our* module from a local path),
``"published"`` (the authors' released file in its own layout, :func:`load_published`),
``"self_pretrained"`` (:mod:`eegprivacy.embeddings.pretrain`) or ``"random_init"`` (explicit baseline); the band-power
reference has no weights (``"none"``). Nothing is ever downloaded: no hub access is possible or attempted.

Published checkpoints (the published-weights README): :func:`load_published` reads each authors' file format (BIOT: a
flat state dict; LaBraM: a training checkpoint with the weights under ``model``; EEGPT: a Lightning checkpoint),
maps its keys onto braindecode 1.8.1's classes as that README records, and loads them with the same strict key and
shape check as :func:`load_checkpoint`. The encoder must be built with :func:`published_config` (the published
architecture), whatever a profile says.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import pickle
import re
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

WEIGHTS_SOURCES = ("checkpoint", "self_pretrained", "random_init", "published")
# Bands of the protocol's centered-PSD attribute (Hz); the band-power reference uses the same ones.
BANDS: dict[str, tuple[float, float]] = {"delta": (1.0, 4.0), "theta": (4.0, 8.0), "alpha": (8.0, 13.0),
                                         "beta": (13.0, 30.0), "gamma": (30.0, 45.0)}

# Old (T3..T6) and new (T7, T8, P7, P8) names of the same 10-20 electrodes.
_ALIASES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8", "T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}

# Our BIOT montage (self-pretrained and random-init cells): the TUH "double banana" bipolar montage (16
# derivations) plus Fz-Cz and Cz-Pz, every one computable from a 10-20 referential recording. The *published*
# 18-channel checkpoints read the same 16 plus SHHS's C3-A2 and C4-A1 instead (published-weights README; braindecode's
# BIOT_CHANNEL_ORDER), PREST-16 the 16 only: a published BIOT cell gets that montage through config ``n_chans``.
BIOT_18_BIPOLAR = ["FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP2-F8", "F8-T8", "T8-P8", "P8-O2",
                   "FP1-F3", "F3-C3", "C3-P3", "P3-O1", "FP2-F4", "F4-C4", "C4-P4", "P4-O2", "FZ-CZ", "CZ-PZ"]


class CheckpointRequiredError(RuntimeError):
    """Weights were requested but no local checkpoint was given (and this code never downloads from a hub)."""


class CheckpointMismatchError(ValueError):
    """A checkpoint's keys or tensor shapes do not match the encoder (wrong model, config or window length)."""


class ChecksumError(ValueError):
    """A checkpoint file's sha256 is not the one the caller expected."""


class UnsafeCheckpointError(ValueError):
    """A published file holds pickled objects beyond tensors and ``argparse.Namespace``; loading it would run
    arbitrary code, which is only done for a file whose sha256 the caller pinned."""


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


# ---- LaBraM ---------------------------------------------------------------------------------------------------

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


# ---- EEGPT ----------------------------------------------------------------------------------------------------

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
    state = _unwrap(torch.load(path, map_location="cpu", weights_only=True))
    return _load_state(encoder, state, path, digest, source)


def _load_state(encoder: FrozenEncoder, state: dict, path: Path, digest: str, source: str) -> FrozenEncoder:
    """Strict key and shape check of ``state`` against ``encoder`` (head and montage buffers ignored), load,
    freeze, record ``source`` and ``digest``."""
    state = {k: v for k, v in state.items() if not _skipped_key(k)}
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


# ---- published checkpoints (the published-weights README) ---------------------------------------------------------

# The published architectures, as constructor overrides of our wrappers (braindecode's defaults fill the rest; the
# README's "Constructor" section of each model). BIOT's channel count is that of the file (16: PREST-16; 18: the
# SHHS+PREST and six-datasets ones); :func:`published_config` reads it from the file's channel tokens.
PUBLISHED_CONFIGS: dict[str, dict] = {
    "biot": {"embed_dim": 256, "num_heads": 8, "num_layers": 4, "hop_length": 100, "n_chans": 18},
    "labram": {"patch_size": 200, "embed_dim": 200, "num_layers": 12, "num_heads": 10, "use_mean_pooling": False},
    "eegpt": {"patch_size": 64, "patch_stride": 64, "embed_num": 4, "embed_dim": 512, "depth": 8, "num_heads": 8},
}

# Where each published file comes from (the published-weights README): (a suggested file name, source,
# sha256 reported by third parties or None). Nothing here is downloaded.
PUBLISHED_FILES: dict[str, list[tuple[str, str, str | None]]] = {
    "biot": [
        ("biot/EEG-PREST-16-channels.ckpt",
         "github.com/ycq091044/BIOT, pretrained-models/EEG-PREST-16-channels.ckpt (git blob dd9a5b39)",
         "40f55f5d23e83796495616c8145c8336fcff2b901c42e8ba5115223081c2ad70"),
        ("biot/EEG-SHHS+PREST-18-channels.ckpt",
         "github.com/ycq091044/BIOT, pretrained-models/EEG-SHHS+PREST-18-channels.ckpt (git blob 5e4d1ee6)",
         "391b53f77d5060e43746f3ffd5aae8107785f4fd122bf2f87221a1b5b2854a84"),
        ("biot/EEG-six-datasets-18-channels.ckpt",
         "github.com/ycq091044/BIOT, pretrained-models/EEG-six-datasets-18-channels.ckpt (git blob 04dfe806)",
         "78ff15a1782f194286a97b1abe68b2bf100a39803325e2917337d0a77a228542")],
    "labram": [
        ("labram/labram-base.pth", "github.com/935963004/LaBraM, checkpoints/labram-base.pth (git blob 221148b5)",
         "7c50583826afac76c4ab18f43d958df40496c8229accc09ed6a227c9bb57c37c")],
    "eegpt": [
        ("eegpt/eegpt_mcae_58chs_4s_large4E.ckpt",
         "Figshare figshare.com/s/e37df4f8a907a866df4b, Files/EEGPT/checkpoint/eegpt_mcae_58chs_4s_large4E.ckpt "
         "(the link the EEGPT README gives; not in git)", None)],
}
# The published pretraining data that are also in this project's shared data (README, "Note for the audit").
PUBLISHED_PRETRAINING_OVERLAP: dict[str, tuple[str, ...]] = {"biot": (), "labram": ("eegmmidb",),
                                                            "eegpt": ("eegmmidb",)}
README = "the published-weights README of the data mirror (weights/README.md: sources, sha256, key mappings)"


def _where_to_get(name: str) -> str:
    files = PUBLISHED_FILES.get(name, [])
    return "; ".join(f"{src}, saved anywhere (e.g. as weights/{dest}) and named in "
                     "embedding_audit.published_weights" + (f" (sha256 {sha})" if sha else "")
                     for dest, src, sha in files) + f" (see {README})"


def _published_file(name: str, path) -> Path:
    if path is None or not Path(path).is_file():
        what = "no path was given" if path is None else f"{path} does not exist"
        raise CheckpointRequiredError(
            f"{name}: weights 'published' need the authors' checkpoint file, and {what}. This code never downloads "
            f"it: get it on a machine with internet access from {_where_to_get(name)}, check its sha256, and point "
            f"embedding_audit.published_weights.{name}.path (and .sha256) at it.")
    return Path(path)


def published_sha256(name: str, path, sha256: str | None = None) -> str:
    """sha256 of encoder ``name``'s published file at ``path``: :class:`CheckpointRequiredError` (naming where the
    file comes from) when it is missing, :class:`ChecksumError` when ``sha256`` is given and differs; a warning when
    no hash was pinned and the file matches none the README lists."""
    path = _published_file(name, path)
    digest = file_sha256(path)
    if sha256 is not None and digest != str(sha256).lower():
        raise ChecksumError(f"{path}: sha256 {digest} != expected {sha256} (embedding_audit.published_weights."
                            f"{name}.sha256; the published values are in {README})")
    known = {sha for _, _, sha in PUBLISHED_FILES.get(name, []) if sha}
    if sha256 is None and known and digest not in known:
        log.warning("%s: %s has sha256 %s, which is none of the published %s files' (%s)", name, path, digest, name,
                    README)
    return digest


def _torch_load_published(path: Path, sha256: str | None):
    """``torch.load`` with ``weights_only=True`` (``argparse.Namespace`` allow-listed: LaBraM stores its run
    arguments); a file that needs more is unpickled fully only when the caller pinned its sha256 (already checked
    to match), since that runs whatever code the pickle names."""
    import torch

    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        reason = next((ln.split("WeightsUnpickler error:")[-1].split(". Please use")[0].strip() for ln in lines
                       if "WeightsUnpickler error" in ln), lines[0] if lines else type(err).__name__)
        if sha256 is None:
            raise UnsafeCheckpointError(
                f"{path}: torch.load(weights_only=True) refused the file even with argparse.Namespace allowed "
                f"({reason}). Loading it with weights_only=False would run the code its pickle names, which is only "
                f"done for a file whose sha256 you pin: check the file against {README} and pass its sha256 "
                f"(embedding_audit.published_weights.<encoder>.sha256).") from err
        log.warning("%s: weights_only=True refused the file (%s); its sha256 matches the pinned %s, so it is "
                    "loaded with weights_only=False", path, reason, sha256)
        return torch.load(path, map_location="cpu", weights_only=False)


def read_published(name: str, path, sha256: str | None = None) -> tuple[dict, str]:
    """The published file of encoder ``name`` at ``path``, mapped to our module's keys (README, "Key mapping"),
    and the file's sha256 (checked against ``sha256`` when given). LaBraM's ``time_embed`` is returned whole (the
    loader cuts it to the encoder's window)."""
    path = Path(path) if path is not None else None
    digest = published_sha256(name, path, sha256)
    obj = _torch_load_published(path, sha256)
    mappers = {"biot": _biot_published, "labram": _labram_published, "eegpt": _eegpt_published}
    if name not in mappers:
        raise KeyError(f"no published checkpoint layout for encoder {name!r}; known: {', '.join(mappers)}")
    return mappers[name](obj, path), digest


def _tensors(obj) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(hasattr(v, "shape") for v in obj.values())


def _biot_published(obj, path) -> dict:
    """BIOT: a flat state dict of the original ``BIOTEncoder`` -> prefix ``encoder.``, drop ``index``."""
    if not _tensors(obj):
        raise CheckpointMismatchError(f"{path} is not a published BIOT file: expected a flat state dict of tensors "
                                      f"(patch_embedding.*, transformer.*, channel_tokens.weight, index)")
    return {(k if k.startswith("encoder.") else f"encoder.{k}"): v for k, v in obj.items()
            if k not in ("index", "encoder.index")}


_LABRAM_DROP_KEYS = ("student.mask_token", "logit_scale")
_LABRAM_DROP_PREFIXES = ("student.lm_head.", "lm_head.", "projection_head.")
_LABRAM_RENAMES = ((re.compile(r"^pos_embed$"), "position_embedding"),
                   (re.compile(r"^time_embed$"), "temporal_embedding"),
                   (re.compile(r"^patch_embed\.((conv|norm)[123]\.)"), r"patch_embed.temporal_conv.\1"),
                   (re.compile(r"^(blocks\.\d+\.mlp\.)fc1\."), r"\g<1>0."),
                   (re.compile(r"^(blocks\.\d+\.mlp\.)fc2\."), r"\g<1>2."))


def _labram_published(obj, path) -> dict:
    """LaBraM: ``ckpt["model"]``; ``student.*`` renamed (README table), the heads dropped."""
    if not (isinstance(obj, dict) and _tensors(obj.get("model"))):
        raise CheckpointMismatchError(f"{path} is not a published LaBraM file: expected a training checkpoint with "
                                      f"the weights under 'model' (student.*, lm_head.*, ...)")
    out = {}
    for key, value in obj["model"].items():
        if key in _LABRAM_DROP_KEYS or key.startswith(_LABRAM_DROP_PREFIXES):
            continue
        if key.startswith("student."):
            key = key[len("student."):]
            for pattern, repl in _LABRAM_RENAMES:
                key = pattern.sub(repl, key)
        out[key] = value  # anything else stays under its own name: the strict check reports it
    return out


_EEGPT_DROP_PREFIXES = ("encoder.", "predictor.", "reconstructor.")


def _eegpt_published(obj, path) -> dict:
    """EEGPT: the Lightning ``state_dict``; ``target_encoder.*`` kept under its name (braindecode's EEGPT holds
    the encoder as ``target_encoder`` too), the online encoder, predictor and reconstructor dropped."""
    state = obj.get("state_dict") if isinstance(obj, dict) else None
    if not _tensors(state):
        raise CheckpointMismatchError(f"{path} is not a published EEGPT file: expected a Lightning checkpoint with "
                                      f"'state_dict' (target_encoder.*, encoder.*, predictor.*, reconstructor.*)")
    return {k: v for k, v in state.items() if not k.startswith(_EEGPT_DROP_PREFIXES)}


def published_config(name: str, path=None, sha256: str | None = None) -> dict:
    """Constructor overrides of the published architecture of ``name`` (:data:`PUBLISHED_CONFIGS`); for BIOT with a
    ``path``, ``n_chans`` is the file's number of channel tokens (16 or 18)."""
    if name not in PUBLISHED_CONFIGS:
        raise KeyError(f"encoder {name!r} has no published checkpoint; published: {', '.join(PUBLISHED_CONFIGS)}")
    config = dict(PUBLISHED_CONFIGS[name])
    if name == "biot" and path is not None:
        tokens = read_published(name, path, sha256)[0].get("encoder.channel_tokens.weight")
        if tokens is not None:
            config["n_chans"] = int(tokens.shape[0])
    return config


def load_published(encoder: FrozenEncoder, path, sha256: str | None = None) -> FrozenEncoder:
    """Load the authors' released checkpoint at ``path`` (its own file layout, the published-weights README) into
    ``encoder``, which must be built with :func:`published_config`: the README's key mapping, then the strict key
    and shape check of :func:`load_checkpoint` (a file for another config raises
    :class:`CheckpointMismatchError`), freeze, ``weights_source = "published"`` and the file's sha256.

    A missing file raises :class:`CheckpointRequiredError` naming where the file comes from; ``sha256``, when given,
    must match (:class:`ChecksumError`) and is what allows a full unpickle when ``weights_only=True`` refuses the
    file (:class:`UnsafeCheckpointError` otherwise)."""
    if isinstance(encoder, BandPowerEncoder):
        raise TypeError("the band-power encoder has no weights to load")
    state, digest = read_published(encoder.name, path, sha256)
    own = encoder.model.state_dict()
    if encoder.name == "labram" and "temporal_embedding" in state and "temporal_embedding" in own:
        rows = own["temporal_embedding"].shape[1]  # p + 1 for a window of p patches
        if state["temporal_embedding"].ndim == 3 and state["temporal_embedding"].shape[1] > rows:
            state["temporal_embedding"] = state["temporal_embedding"][:, :rows].clone()
    return _load_state(encoder, state, Path(path), digest, "published")


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
    if weights_source == "published":
        return load_published(encoder, path, sha256)
    return load_checkpoint(encoder, path, sha256, source=weights_source)


def time_embedding(encoder: FrozenEncoder, X: np.ndarray) -> dict[str, float]:
    """Wall time of ``transform(X)`` (for the encoder table in the study's report)."""
    t0 = time.perf_counter()
    Z = encoder.transform(X)
    return {"seconds": time.perf_counter() - t0, "n_windows": len(X), "embedding_dim": int(Z.shape[1])}


__all__ = ["BANDS", "BIOT_18_BIPOLAR", "ENCODERS", "PUBLISHED_CONFIGS", "PUBLISHED_FILES",
           "PUBLISHED_PRETRAINING_OVERLAP", "TINY_CONFIGS", "WEIGHTS_SOURCES", "BIOTEncoder", "BandPowerEncoder",
           "ChannelMapping", "CheckpointMismatchError", "CheckpointRequiredError", "ChecksumError", "EEGPTEncoder",
           "FrozenEncoder", "LaBraMEncoder", "UnsafeCheckpointError", "file_sha256", "load_checkpoint",
           "load_published", "make_encoder", "map_channels", "published_config", "published_sha256",
           "read_published", "resample", "resolve_weights", "save_checkpoint", "time_embedding"]
