"""The authors' published checkpoints (the published-weights README): where each file comes from and its
sha256, each file layout mapped onto braindecode's modules (:func:`read_published`), the published architectures
(:func:`published_config`) and loading them with the strict check of our own checkpoints (:func:`load_published`).
"""

from __future__ import annotations

import argparse
import logging
import pickle
import re
from pathlib import Path

from eegprivacy.embeddings.encoders.bandpower import BandPowerEncoder
from eegprivacy.embeddings.encoders.base import FrozenEncoder
from eegprivacy.embeddings.encoders.checkpoints import (
    CheckpointMismatchError,
    CheckpointRequiredError,
    ChecksumError,
    UnsafeCheckpointError,
    _load_state,
    file_sha256,
)

log = logging.getLogger(__name__)

__all__ = ["PUBLISHED_CONFIGS", "PUBLISHED_FILES", "PUBLISHED_PRETRAINING_OVERLAP", "load_published",
           "published_config", "published_sha256", "read_published"]

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

