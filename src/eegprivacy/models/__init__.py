"""models layer: study B's networks (SimpleNet, EEGNet), seeded, each with an ``embed`` hook; nothing
study-specific.

:func:`build_model` makes one from a name and the input shape of one trial, so a federated task can describe
its model with picklable values (Flower ships tasks to other processes).
"""

from __future__ import annotations

from collections.abc import Sequence

from eegprivacy.models.base import EmbeddingModel, seeded

__all__ = ["MODELS", "build_model", "seeded", "EmbeddingModel", "SimpleNet", "EEGNet"]

MODELS = ("simplenet", "eegnet")


def build_model(name: str, input_shape: Sequence[int], n_classes: int = 2, seed: int | None = None, **kwargs):
    """``"simplenet"`` for any input shape (flattened), ``"eegnet"`` for (n_chans, n_times)."""
    shape = tuple(int(s) for s in input_shape)
    if name == "simplenet":
        from eegprivacy.models.simplenet import SimpleNet

        n_features = 1
        for s in shape:
            n_features *= s
        return SimpleNet(n_features, n_classes=n_classes, seed=seed, **kwargs)
    if name == "eegnet":
        if len(shape) != 2:
            raise ValueError(f"EEGNet takes trials shaped (n_chans, n_times), got input_shape {shape}")
        from eegprivacy.models.eegnet import EEGNet

        return EEGNet(shape[0], shape[1], n_classes=n_classes, seed=seed, **kwargs)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def __getattr__(name: str):
    # SimpleNet/EEGNet on first use: EEGNet imports braindecode, which takes seconds.
    if name == "SimpleNet":
        from eegprivacy.models.simplenet import SimpleNet

        return SimpleNet
    if name == "EEGNet":
        from eegprivacy.models.eegnet import EEGNet

        return EEGNet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
