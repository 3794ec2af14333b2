"""The encoders by name (:data:`ENCODERS`, :func:`make_encoder`, with the small configs of tests and smoke runs),
put in the weights state a cell asks for (:func:`resolve_weights`), and timed (:func:`time_embedding`): what a study
calls, without knowing which family or file format is behind a name.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from eegprivacy.embeddings.encoders.bandpower import BandPowerEncoder
from eegprivacy.embeddings.encoders.base import FrozenEncoder
from eegprivacy.embeddings.encoders.biot import BIOTEncoder
from eegprivacy.embeddings.encoders.checkpoints import CheckpointRequiredError, load_checkpoint
from eegprivacy.embeddings.encoders.eegpt import EEGPTEncoder
from eegprivacy.embeddings.encoders.labram import LaBraMEncoder
from eegprivacy.embeddings.encoders.published import load_published

__all__ = ["ENCODERS", "TINY_CONFIGS", "WEIGHTS_SOURCES", "make_encoder", "resolve_weights", "time_embedding"]

WEIGHTS_SOURCES = ("checkpoint", "self_pretrained", "random_init", "published")


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

