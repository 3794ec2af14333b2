"""privacy layer: derived sensitivities, declarative noise mechanisms, the patient-level release pipeline, and
randomized response for the label column."""

from eegprivacy.privacy.labels import (
    LABELS_IN_CLEAR_NOTE,
    LabelCalibration,
    LabelledReleaseGuarantee,
    RandomizedResponse,
    compose_with_labels,
)
from eegprivacy.privacy.mechanisms import (
    DEFAULT_DELTA,
    MECHANISMS,
    SAMPLERS,
    SAMPLING,
    Calibration,
    GaussianAnalytic,
    GaussianClassic,
    LaplaceFormal,
    LaplaceImplemented,
    Mechanism,
    guarantee_label,
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
    "DEFAULT_DELTA", "IQR_FLOOR", "LABELS_IN_CLEAR_NOTE", "NO_NOISE", "MECHANISMS", "SAMPLERS", "SAMPLING",
    "SCALING_NOTE",
    "Calibration", "DPFeatureReleaser", "GaussianAnalytic", "GaussianClassic", "LabelCalibration",
    "LabelledReleaseGuarantee", "LaplaceFormal", "LaplaceImplemented", "Mechanism", "RandomizedResponse",
    "RobustFeatureScaler",
    "clip_rows_l2", "compose_with_labels", "guarantee_label", "l1_sensitivity_replace_one", "l2_sensitivity_replace_one",
    "make_mechanism",
    "patient_vectors", "release_table",
]
