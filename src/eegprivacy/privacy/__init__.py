"""privacy layer: derived sensitivities, declarative noise mechanisms, and the patient-level release pipeline."""

from eegprivacy.privacy.mechanisms import (
    DEFAULT_DELTA,
    MECHANISMS,
    Calibration,
    GaussianAnalytic,
    GaussianClassic,
    LaplaceFormal,
    LaplaceImplemented,
    Mechanism,
    make_mechanism,
)
from eegprivacy.privacy.release import (
    IQR_FLOOR,
    NO_NOISE,
    SCALING_NOTE,
    DPFeatureReleaser,
    RobustFeatureScaler,
    clip_rows_l2,
    patient_vectors,
    release_table,
)
from eegprivacy.privacy.sensitivity import l1_sensitivity_replace_one, l2_sensitivity_replace_one

__all__ = [
    "DEFAULT_DELTA", "IQR_FLOOR", "NO_NOISE", "MECHANISMS", "SCALING_NOTE",
    "Calibration", "DPFeatureReleaser", "GaussianAnalytic", "GaussianClassic", "LaplaceFormal",
    "LaplaceImplemented", "Mechanism", "RobustFeatureScaler",
    "clip_rows_l2", "l1_sensitivity_replace_one", "l2_sensitivity_replace_one", "make_mechanism",
    "patient_vectors", "release_table",
]
