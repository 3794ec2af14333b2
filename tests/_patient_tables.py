"""A tiny SYNTHETIC study-A patient table, for tests that hand the study-A sweeps a table (no features run)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.studies.release.table import PatientTable


def synthetic_patient_table(n_negative: int, n_positive: int, n_features: int, seed: int) -> PatientTable:
    """Gaussian features shifted by the label (so a model can learn it), one row per patient, groups 0..n-1."""
    rng = np.random.default_rng(seed)
    y = np.array([0] * n_negative + [1] * n_positive)
    X = pd.DataFrame(rng.normal(size=(y.size, n_features)) + y[:, None],
                     columns=[f"c{i}:rms" for i in range(n_features)])
    return PatientTable(dataset="synthetic_clinical", dataset_version="synthetic-test", features_hash="cfg",
                        synthetic=True, X=X, y=y, groups=np.arange(y.size))
