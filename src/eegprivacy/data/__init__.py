"""Data layer: every dataset, real or synthetic, behind one interface (:class:`EEGDataset`).

Look datasets up by name with :func:`get_dataset`; ``eegprivacy datasets`` lists them all.
"""

from __future__ import annotations

from importlib import import_module

from eegprivacy.data.base import METADATA_COLUMNS, DataQualityWarning, EEGDataset, Recording
from eegprivacy.data.manifest import ChecksumMismatchError, DataMissingError

# name -> "module:Class"; imported lazily so listing datasets does not import MOABB or h5py.
REGISTRY: dict[str, str] = {
    "eegmat": "eegprivacy.data.eegmat:EEGMAT",
    "eegmmidb": "eegprivacy.data.eegmmidb:EEGMMIDB",
    "bnci2014_001": "eegprivacy.data.bnci:BNCI2014001",
    "bonn": "eegprivacy.data.bonn:Bonn",
    "new_delhi": "eegprivacy.data.new_delhi:NewDelhi",
    "msu_schizophrenia": "eegprivacy.data.msu_schizophrenia:MSUSchizophrenia",
    "synthetic_clinical": "eegprivacy.data.synthetic:SyntheticClinical",
    "synthetic_mi": "eegprivacy.data.synthetic:SyntheticMotorImagery",
    "synthetic_rest_task": "eegprivacy.data.synthetic:SyntheticRestTask",
    "clinical_folder": "eegprivacy.data.clinical_folder:ClinicalFolder",
    "bids": "eegprivacy.data.bids:BIDSDataset",
}


def dataset_class(name: str) -> type[EEGDataset]:
    if name not in REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module, cls = REGISTRY[name].split(":")
    return getattr(import_module(module), cls)


def get_dataset(name: str, **kwargs) -> EEGDataset:
    """Instantiate a dataset by its registry name, e.g. ``get_dataset("eegmat")``."""
    return dataset_class(name)(**kwargs)


__all__ = [
    "METADATA_COLUMNS",
    "REGISTRY",
    "ChecksumMismatchError",
    "DataMissingError",
    "DataQualityWarning",
    "EEGDataset",
    "Recording",
    "dataset_class",
    "get_dataset",
]
