"""The audit's knobs (:class:`AuditConfig`) and their mapping onto study A's typed ``dp_release`` and
``dp_utility`` configs (:func:`study_a_configs`), with the names every part of the audit shares (stage, ε unit)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from eegprivacy.params import ParamsError
from eegprivacy.privacy import make_mechanism
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig

STAGE = "audit_cohort"
EPS_UNIT = "subject"
# The formally calibrated mechanisms (dp_utility's defaults); the paper's laplace_implemented can be asked for by
# name and is flagged wherever it appears (PAPER_MECHANISMS).
DEFAULT_MECHANISMS = ("gaussian_analytic", "laplace_formal")
DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
PAPER_MECHANISMS = {"laplace_implemented": "the paper's mechanism (b = 2C/ε): no formal guarantee for d > 1"}
# Where the audit's study-A configs say they come from in an error message.
_SOURCE = "audit-cohort settings"


@dataclass(frozen=True)
class AuditConfig:
    """Every knob of an audit (all logged as params; the CLI exposes each). The utility knobs are those of study A's
    ``dp_release``/``dp_utility`` (:func:`study_a_configs` maps them), with the same defaults where they matter for
    the horizon test (bootstrap count, permutations, nested seeds)."""

    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    noise_seeds: int = 10  # noise draws (and MLP seeds) per (mechanism, ε), as dp_release's default profile
    baseline_seeds: int = 5  # MLP seeds of the baseline and of the noise-free clipped table
    permutations: int = 40  # the permuted-label control: label permutations, each its own seed
    nested_seeds: int = 2  # seeds (first ones) that also run the nested threshold protocol; < 2: no BA horizon
    inner_folds: int = 3  # the nested protocol's inner k-fold over the training patients
    clip_norm: float = 2.0
    delta: float = 1e-5
    bootstrap: int = 10000  # patient-level (cluster) bootstrap resamples of every interval and p-value
    confidence: float = 0.95  # intervals; α = 1 − confidence for the horizon test (split over the mechanisms)
    min_patients: int = 6
    min_per_class: int = 2
    caution_per_class: int = 8  # fewer patients in a class: the verdict cautions that its intervals are too wide
    membership_trials: int = 20
    member_fraction: float = 0.5
    split_halves: bool = True  # one recording per subject: re-identify its second half from its first
    features_params: str | None = None  # a params file with a ``features`` section; None: the packaged defaults
    skip_bad: bool = True  # leave out a recording that cannot be used (unreadable, NaN samples) instead of stopping

    def __post_init__(self):
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        object.__setattr__(self, "epsilons", tuple(sorted(float(e) for e in self.epsilons)))
        for name in self.mechanisms:
            make_mechanism(name, 1.0, self.delta)  # refuses an unknown name now, not in a worker
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"epsilons must be positive and finite, got {self.epsilons}")
        if self.noise_seeds < 1 or self.baseline_seeds < 1:
            raise ValueError("noise_seeds and baseline_seeds must be >= 1")
        study_a_configs(self)  # every utility knob within study A's constraints, before any data is read

    def to_dict(self) -> dict:
        return asdict(self)


def study_a_configs(config: AuditConfig, dataset: str = "cohort") -> tuple[DPReleaseConfig, DPUtilityConfig]:
    """The audit's utility knobs as study A's typed ``dp_release`` and ``dp_utility`` configs (checked by their
    constraints), so :func:`eegprivacy.studies.release.utility.utility_plan` builds the audit's utility cells.

    Labels travel in the clear (``label_epsilon`` = ∞) and every (mechanism, ε, seed) draws its own noise."""
    try:
        release = DPReleaseConfig.from_mapping(
            {"clip_norm": float(config.clip_norm), "delta": float(config.delta), "epsilons": list(config.epsilons),
             "mechanisms": list(config.mechanisms), "noise_seeds": int(config.noise_seeds),
             "datasets": {dataset: {"label": "label"}}, "common_random_numbers": False,
             "label_epsilon": math.inf}, _SOURCE, "dp_release.")
        utility = DPUtilityConfig.from_mapping(
            {"mechanisms": list(config.mechanisms), "baseline_mlp_seeds": int(config.baseline_seeds),
             "permutations": int(config.permutations), "nested_seeds": int(config.nested_seeds), "n_jobs": 1,
             "figure_epsilon": float(max(config.epsilons)), "nested_inner_folds": int(config.inner_folds),
             "bootstrap": int(config.bootstrap), "confidence": float(config.confidence)}, _SOURCE, "dp_utility.")
    except ParamsError as err:
        raise ValueError(f"an audit setting is outside study A's utility protocol: {err}") from None
    return release, utility
