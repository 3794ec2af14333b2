"""Our own checkpoints: a state dict of our module on local disk, loaded with a strict key and shape check
(:func:`load_checkpoint`) and written atomically beside its sha256 (:func:`save_checkpoint`), and the errors a
weights file can raise. Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from eegprivacy.embeddings.encoders.bandpower import BandPowerEncoder
from eegprivacy.embeddings.encoders.base import FrozenEncoder, _skipped_key

log = logging.getLogger(__name__)

__all__ = ["CheckpointMismatchError", "CheckpointRequiredError", "ChecksumError", "UnsafeCheckpointError",
           "file_sha256", "load_checkpoint", "save_checkpoint"]

class CheckpointRequiredError(RuntimeError):
    """Weights were requested but no local checkpoint was given (and this code never downloads from a hub)."""


class CheckpointMismatchError(ValueError):
    """A checkpoint's keys or tensor shapes do not match the encoder (wrong model, config or window length)."""


class ChecksumError(ValueError):
    """A checkpoint file's sha256 is not the one the caller expected."""


class UnsafeCheckpointError(ValueError):
    """A published file holds pickled objects beyond tensors and ``argparse.Namespace``; loading it would run
    arbitrary code, which is only done for a file whose sha256 the caller pinned."""


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

