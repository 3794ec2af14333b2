"""evaluation layer: LOSO, thresholds, confusion metrics and intervals; one implementation for all studies."""

from eegprivacy.evaluation.cluster_bootstrap import fixed_sequence_horizon, p_value_mc_error
from eegprivacy.evaluation.intervals import bootstrap_ci, mean_ci, wilson_interval
from eegprivacy.evaluation.loso import PROTOCOLS, LOSOEvaluation, LOSOResult, ProtocolResult, default_mlp
from eegprivacy.evaluation.metrics import classification_metrics, confusion_counts, confusion_matrix
from eegprivacy.evaluation.thresholds import (
    DP_GRID,
    ORIGINAL_GRID,
    best_f1_threshold,
    f1_by_threshold,
    make_grid,
)

__all__ = [
    "wilson_interval",
    "bootstrap_ci",
    "mean_ci",
    "confusion_counts",
    "confusion_matrix",
    "classification_metrics",
    "ORIGINAL_GRID",
    "DP_GRID",
    "make_grid",
    "f1_by_threshold",
    "best_f1_threshold",
    "LOSOEvaluation",
    "LOSOResult",
    "ProtocolResult",
    "PROTOCOLS",
    "default_mlp",
    "fixed_sequence_horizon",
    "p_value_mc_error",
]
