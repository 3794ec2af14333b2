"""What every frozen encoder shares: the explicit map from a dataset's channels to the encoder's montage
(:class:`ChannelMapping`, :func:`map_channels`), polyphase resampling to the encoder's rate (:func:`resample`), and
:class:`FrozenEncoder`, the sklearn-style interface (map, resample, scale, embed in eval mode without gradients)
each family fills in with its montage, rate, scaling and pooled forward pass.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["ChannelMapping", "FrozenEncoder", "map_channels", "resample"]

# Old (T3..T6) and new (T7, T8, P7, P8) names of the same 10-20 electrodes.
_ALIASES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8", "T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}


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

