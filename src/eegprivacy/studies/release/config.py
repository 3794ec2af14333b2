"""Typed params of study A's stages: one :class:`~eegprivacy.params.Config` per params section.

Each field carries its constraint (:mod:`eegprivacy.validation`) and a one-line doc; ``Config.load`` checks them
all, and rejects unknown or missing keys, before a stage loads any data. ε is per patient (one patient's feature
vector is the unit a release protects) unless a field says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from eegprivacy.params import Config, ParamsError, invalid, param
from eegprivacy.validation import (
    BOOLEAN,
    CLIP_NORM,
    DELTA,
    EPSILON,
    EPSILON_OR_INF,
    EPSILONS,
    FRACTION,
    FRACTION_OPEN,
    NON_NEGATIVE,
    POSITIVE,
    TEXT,
    TEXTS,
    AnyOf,
    Interval,
    ListOf,
    Range,
    count,
    counts,
    options,
    subset_of,
)

MECHANISM_NAMES = ("gaussian_analytic", "gaussian_classic", "laplace_implemented", "laplace_formal")
MECHANISMS = subset_of(MECHANISM_NAMES, "mechanism names (eegprivacy.privacy.MECHANISMS)")
PROCESSES = count(1, "processes")


@dataclass(frozen=True)
class PatientLabel(Config):
    """How a dataset's patient table is made: the label (the window table's ``label`` or a metadata-derived one)
    and the condition whose windows form each patient vector."""

    label: str = param(TEXT, doc="'label' or a metadata label such as bad_counter")
    condition: str | None = param(AnyOf((TEXT, options((None,))), text="a condition name or null"), default=None,
                                  doc="the condition whose windows form a patient vector (null: the patient's "
                                      "windows must share one condition)")


@dataclass(frozen=True)
class DPReleaseConfig(Config):
    """``dp_release``: the release sweep (ε × mechanism × noise seed) of every patient table."""

    clip_norm: float = param(CLIP_NORM, doc="L2 clipping threshold C (sensitivities derive from it)")
    delta: float = param(DELTA, doc="δ of the Gaussian mechanisms")
    epsilons: list = param(EPSILONS, doc="ε per patient of each release")
    mechanisms: list = param(MECHANISMS)
    noise_seeds: int = param(count(1, "seeds"), doc="noise realisations per (mechanism, ε)")
    datasets: dict[str, PatientLabel] = param(doc="patient label and condition per dataset")
    common_random_numbers: bool = param(BOOLEAN, default=False,
                                        doc="one noise stream per seed shared by every mechanism and ε (default: "
                                            "independent noise per (mechanism, ε, seed))")
    label_epsilon: float = param(EPSILON_OR_INF, default=float("inf"),
                                 doc="label DP: randomized response on each patient's label at this ε, composed "
                                     "with the feature release's (∞ = labels in the clear, the paper's release)")


@dataclass(frozen=True)
class DPUtilityConfig(Config):
    """``dp_utility``: LOSO utility of the non-private table, its permuted-label control and every release."""

    mechanisms: list = param(MECHANISMS, doc="mechanisms whose releases (and matched nulls) are evaluated: a "
                                             "subset of dp_release.mechanisms")
    baseline_mlp_seeds: int = param(count(1, "seeds"), doc="MLP seeds on the non-private features and on the "
                                                           "noise-free scaled and clipped table (arm clipped)")
    nested_seeds: int = param(count(0), doc="seeds of each cell that also run the nested protocol (fewer than 2: "
                                            "no balanced-accuracy horizon is tested)")
    n_jobs: int = param(PROCESSES, doc="processes over the cells (results do not depend on it)")
    figure_epsilon: float = param(EPSILON, doc="ε at which the confusion matrices are drawn")
    nested_inner_folds: int | str = param(AnyOf((count(2), options(("loso",))), text="loso or a whole number of "
                                                "inner folds, at least 2"), default="loso",
                                          doc="inner split of the nested protocol: loso or k folds")
    permutations: int = param(count(1, "permutations"), default=40,
                              doc="label permutations of the permuted-label control, each its own seed (its "
                                  "permutation and its MLP initialisation)")
    bootstrap: int = param(count(100, "resamples"), default=10000,
                           doc="patient-level (cluster) bootstrap resamples of every interval and p-value")
    confidence: float = param(FRACTION_OPEN, default=0.95, doc="interval level; 1 - confidence is the α of the "
                                                               "table, split over its mechanisms (α/m), at which "
                                                               "each mechanism's fixed-sequence horizon test runs")


@dataclass(frozen=True)
class FederatedBaseline(Config):
    """The decentralised scenario's FedAvg MLP."""

    backend: str = param(options(("inprocess", "flower")), doc="Flower code driven in-process, or ray simulation")
    hidden_layer_sizes: list = param(counts(1, "layer sizes"))
    num_rounds: int = param(count(1, "rounds"))
    local_epochs: int = param(count(1, "epochs"))
    learning_rate_init: float = param(POSITIVE, doc="a positive learning rate")


@dataclass(frozen=True)
class ScenarioVisits(Config):
    """What one dataset's *visits* are: a patient seen at two hospitals brings some of its visits to each."""

    visits: str = param(options(("recordings", "halves")), default="recordings",
                        doc="recordings: every recording is a visit; halves: the first and the second half of every "
                            "recording are two visits (one session; for cohorts with one recording per subject)")


@dataclass(frozen=True)
class DeploymentConfig(Config):
    """``deployment``: client-side, server-side and decentralised releases (clip_norm, δ, label and condition:
    dp_release)."""

    scenarios: list = param(subset_of(("client_side", "server_side", "decentralised"), "scenarios"))
    n_hospitals: int = param(count(2, "hospitals"))
    shared_fraction: float = param(Interval(0, 1, closed="left", text="a fraction in [0, 1)"),
                                   doc="share of patients also seen at a second hospital")
    mechanisms: list = param(MECHANISMS)
    epsilons: list = param(EPSILONS, doc="ε per release (a patient at two hospitals spends it twice client-side)")
    noise_seeds: int = param(count(1, "seeds"))
    federated: FederatedBaseline = param(doc="the decentralised scenario's FedAvg")
    datasets: dict[str, ScenarioVisits] = param(default={}, doc="per dataset, what a visit is (a dataset not "
                                                                "listed: its recordings)")


@dataclass(frozen=True)
class DPScalingConfig(Config):
    """``dp_scaling``: private vs public-reference vs DP-quantile scaling statistics at matched total ε."""

    datasets: list = param(TEXTS, doc="datasets the aggregate covers")
    public_fraction: float = param(FRACTION_OPEN, doc="share of patients set aside as the public cohort")
    split_seed: int = param(count(0), doc="seed of the public/private split")
    bounds_margin: float = param(NON_NEGATIVE, doc="DP-quantile bounds widened by this × range on each side")
    mechanisms: list = param(MECHANISMS)
    total_epsilons: list = param(EPSILONS, doc="ε of the whole pipeline (scaling + release)")
    scaling_fraction: float = param(FRACTION_OPEN, doc="share of the total ε spent on the quantile queries")
    noise_seeds: int = param(count(1, "seeds"))
    n_jobs: int = param(PROCESSES, default=1, doc="processes over the cells (results do not depend on it)")


# Study A's end-to-end private releases (dp_end_to_end); eegprivacy.studies.release.end_to_end.DESIGNS holds each.
END_TO_END_NAMES = ("paper_public_scaling", "public_pca", "public_pls", "dp_pca", "marginal_synthesis")
PROJECTION_NAMES = ("public_pca", "public_pls", "dp_pca")
RELEASE_NOISES = options(("gaussian_analytic", "laplace_formal"), "a formally calibrated release mechanism")


@dataclass(frozen=True)
class ComponentSweep(Config):
    """Utility against k: the projection designs at a few total ε, each k a release and its matched null."""

    mechanisms: list = param(subset_of(PROJECTION_NAMES, "projection designs"), doc="designs whose k is swept")
    n_components: list = param(counts(1, "dimensions"), doc="k values")
    total_epsilons: list = param(EPSILONS, doc="total ε per patient of the swept cells")
    noise_seeds: int = param(count(1, "seeds"), doc="noise (and MLP) seeds per cell")
    enabled: bool = param(BOOLEAN, default=True, doc="run the sweep (the default profile leaves it to the full one)")


@dataclass(frozen=True)
class DPEndToEndConfig(Config):
    """``dp_end_to_end``: release designs whose every data-dependent step is public or paid for in ε."""

    datasets: list = param(TEXTS, doc="datasets the stage runs on (one per invocation)")
    mechanisms: list = param(subset_of(END_TO_END_NAMES, "end-to-end release designs"),
                             doc="the designs of the headline table (one fixed-sequence horizon test each)")
    release_noise: str = param(RELEASE_NOISES, doc="noise of the projected releases (and the reference row)")
    total_epsilons: list = param(EPSILONS, doc="ε per patient of the whole pipeline")
    noise_seeds: int = param(count(2, "seeds"), doc="noise (and MLP) seeds per (design, ε) at ε ≤ high_epsilon")
    reference_seeds: int = param(count(2, "seeds"), doc="MLP seeds of the no-DP baseline and each noise-free arm")
    mc_error_fraction: float = param(FRACTION_OPEN, doc="seed rule: a difference's Monte-Carlo error over the "
                                                        "seeds at most this share of its interval's half-width")
    kfold_splits: int = param(count(2, "folds"), doc="stratified k-fold beside LOSO (each seed its own split)")
    power: float = param(FRACTION_OPEN, doc="power at which the minimum detectable effect is given")
    pca_components: int = param(count(1), doc="k of public_pca")
    pls_components: int = param(count(1), doc="k of public_pls")
    dp_pca_components: int = param(count(1), doc="k of dp_pca")
    dp_pca_fraction: float = param(FRACTION_OPEN, doc="share of the total ε that dp_pca's covariance spends")
    synthesis_components: int = param(count(1), doc="public PLS dimensions the synthesiser discretises")
    synthesis_bins: int = param(count(3), doc="bins per dimension (public quantiles)")
    synthesis_pairs: str = param(options(("label", "all")), doc="marginals measured: label pairs, or all pairs")
    component_sweep: ComponentSweep = param(doc="utility against k")
    high_epsilon: float = param(EPSILON, default=10.0, doc="above it, noise_seeds_high seeds per (design, ε)")
    noise_seeds_high: int = param(count(2, "seeds"), default=40, doc="seeds per (design, ε) at ε > high_epsilon")
    design_epsilons: dict = param(default={}, doc="a design's own subset of total_epsilons (design -> list of ε); "
                                                  "a design not named runs them all")
    n_jobs: int = param(PROCESSES, default=1, doc="processes over the cells (results do not depend on it)")

    def check(self, source, prefix: str) -> None:
        for design, epsilons in self.design_epsilons.items():
            if design not in self.mechanisms:
                raise ParamsError(f"{source}: {prefix}design_epsilons names {design!r}, which is not in "
                                  f"{prefix}mechanisms {self.mechanisms}")
            if not isinstance(epsilons, list) or not epsilons or not {float(e) for e in epsilons} <= {
                    float(e) for e in self.total_epsilons}:
                raise ParamsError(f"{source}: {prefix}design_epsilons[{design!r}] must be a non-empty subset of "
                                  f"{prefix}total_epsilons {self.total_epsilons}, got {epsilons!r}")

    def epsilons_of(self, design: str) -> list[float]:
        """The total ε a headline design runs at (its ``design_epsilons`` entry, else every one)."""
        return [float(e) for e in self.design_epsilons.get(design, self.total_epsilons)]

    def seeds_at(self, epsilon: float) -> int:
        """Noise seeds per (design, ε) at this total ε (the seed rule's counts, params/dp_end_to_end.yaml)."""
        return self.noise_seeds if float(epsilon) <= self.high_epsilon else self.noise_seeds_high


@dataclass(frozen=True)
class DPSampleSizeConfig(Config):
    """``dp_sample_size`` (SYNTHETIC): the end-to-end designs on calibrated synthetic cohorts of growing size."""

    datasets: list = param(TEXTS, doc="the real cohort each synthetic cohort is calibrated to (one per invocation)")
    designs: list = param(subset_of(END_TO_END_NAMES, "end-to-end release designs"),
                          doc="designs swept (their k, noise and ε split are dp_end_to_end's)")
    n_patients: list = param(counts(8, "private patients"), doc="synthetic private cohort sizes")
    total_epsilons: list = param(EPSILONS, doc="ε per patient of the whole pipeline")
    seeds: int = param(count(2, "seeds"), doc="synthetic cohorts (each with its noise and MLP seed) per cell")
    horizon_targets: list = param(EPSILONS, doc="ε for the 'patients needed for a horizon ≤ ε' table")
    calibration_draws: int = param(count(2, "draws"), doc="synthetic cohorts per step of the effect-scale bisection")
    n_jobs: int = param(PROCESSES, default=1, doc="processes over the cells (results do not depend on it)")


OPTIONAL_CONDITION = AnyOf((TEXT, options((None,))), text="a condition name or null")


@dataclass(frozen=True)
class TablePairing(Config):
    """How one dataset's two re-identification tables are formed, rows aligned by subject: what is released and
    what the attacker holds of the same subjects.

    - ``split: conditions`` (cross-condition): the release is each subject's ``release_condition`` recording, the
      attacker holds its ``auxiliary_condition`` recording (eegmat: task released, rest held);
    - ``split: halves`` (same-session halves): for a cohort with one recording per subject, the release is the
      first half of every recording and the attacker holds the second half. Both halves come from one session, so
      the attack is an upper bound on what linkage across sessions would achieve.
    """

    split: str = param(options(("conditions", "halves")), default="conditions",
                       doc="conditions (cross-condition) or halves (same-session halves)")
    release_condition: str | None = param(OPTIONAL_CONDITION, default=None,
                                          doc="split conditions: the condition of the released recording")
    auxiliary_condition: str | None = param(OPTIONAL_CONDITION, default=None,
                                            doc="split conditions: the condition of the recording the attacker holds")

    def check(self, source, prefix: str) -> None:
        conditions = (self.release_condition, self.auxiliary_condition)
        if self.split == "halves" and any(c is not None for c in conditions):
            raise ParamsError(f"{source}: {prefix}split = 'halves' releases the first half of each recording and "
                              f"takes no release_condition or auxiliary_condition; remove them from {source}")
        if self.split == "conditions" and (None in conditions or conditions[0] == conditions[1]):
            raise ParamsError(f"{source}: {prefix}split = 'conditions' (the default) needs two different conditions, "
                              f"release_condition and auxiliary_condition (got {conditions[0]!r} and "
                              f"{conditions[1]!r}); fix them in {source}, or use split: halves for a cohort with "
                              "one recording per subject")


@dataclass(frozen=True)
class ReidentificationSettings(Config):
    datasets: dict[str, TablePairing] = param(doc="per dataset, how the released and the attacker's tables are "
                                                  "formed")
    metrics: list = param(TEXTS, doc="distance names")
    top_k: list = param(counts(1, "k"), doc="top-k accuracies reported")


@dataclass(frozen=True)
class MembershipSettings(Config):
    member_fraction: float = param(FRACTION_OPEN, doc="share of the cohort each trial releases")
    trials: int = param(count(1, "trials"), doc="releases per seed")
    scores: list = param(TEXTS, doc="score names")
    fprs: list = param(ListOf(FRACTION_OPEN, text="a non-empty list of false-positive rates in (0, 1)"))


@dataclass(frozen=True)
class TableAttacksConfig(Config):
    """``table_attacks``: re-identification and membership inference on the released table."""

    mechanisms: list = param(MECHANISMS)
    epsilons: list = param(EPSILONS)
    noise_seeds: int = param(count(1, "seeds"))
    reidentification: ReidentificationSettings = param()
    membership: MembershipSettings = param()


@dataclass(frozen=True)
class SearchSpaceA(Config):
    mechanisms: list = param(MECHANISMS)
    epsilon: list = param(Range(text="a [low, high] range of ε with 0 < low < high"), doc="log-uniform")
    clip_norm: list = param(Range(text="a [low, high] range of C with 0 < low < high"), doc="log-uniform")


@dataclass(frozen=True)
class OptunaStudyAConfig(Config):
    """``optuna_study_a``: the multi-objective search over (mechanism, ε, C) and the re-evaluation of its front.

    Search and re-evaluation seeds are disjoint (``reevaluation_seed_offset`` ≥ ``noise_seeds``): the front is
    the best of many noisy trials, so only values measured on seeds the search never saw say what it is worth."""

    dataset: str = param(TEXT)
    label: str = param(TEXT, doc="patient label (as dp_release's datasets.<name>.label)")
    condition: str | None = param(AnyOf((TEXT, options((None,))), text="a condition name or null"),
                                  doc="the recording condition whose halves are used (null: every subject's windows "
                                      "must share one condition)")
    delta: float = param(DELTA)
    search_space: SearchSpaceA = param()
    noise_seeds: int = param(count(1, "seeds"), doc="every trial's objectives are means over seeds 0..noise_seeds-1")
    reevaluation_seeds: int = param(count(1, "seeds"), doc="fresh seeds every Pareto-front trial is re-evaluated on")
    reevaluation_seed_offset: int = param(count(1), doc="the first re-evaluation seed (at least noise_seeds)")
    bootstrap: int = param(count(100, "resamples"), doc="patient-level (cluster) bootstrap resamples of the "
                                                        "re-evaluated intervals")
    confidence: float = param(FRACTION_OPEN, doc="interval level; 1 - confidence is the α of the Holm-corrected "
                                                 "keeps-utility decisions over the front")
    n_jobs: int = param(PROCESSES, doc="processes over a trial's seeds (results do not depend on it)")
    n_trials: int = param(count(1, "trials"), doc="the study's target of COMPLETE trials")
    sampler: str = param(options(("tpe", "nsga2"), "tpe or nsga2"))
    population_size: int = param(count(2), doc="nsga2 only")
    seed: int = param(count(0), doc="sampler seed")
    storage: str = param(TEXT, doc="SQLAlchemy URL of the study database")
    heartbeat_interval: int = param(count(1, "seconds"))

    def check(self, source, prefix: str) -> None:
        if self.reevaluation_seed_offset < self.noise_seeds:
            raise invalid(source, f"{prefix}reevaluation_seed_offset", self.reevaluation_seed_offset,
                          f"at least noise_seeds ({self.noise_seeds}) so the re-evaluation seeds are fresh")


@dataclass(frozen=True)
class LinkageConfig(Config):
    """``linkage``: exact GlobalID vs keyed Bloom-filter linkage on SYNTHETIC identity tables."""

    n_records: int = param(count(1, "records"))
    overlap: float = param(FRACTION)
    household_rate: float = param(FRACTION)
    format_rate: float = param(FRACTION)
    typo_rates: list = param(ListOf(FRACTION, text="a non-empty list of rates in [0, 1]"))
    seeds: list = param(ListOf(Interval(None, None, integral=True), text="a non-empty list of whole-number seeds"),
                        doc="one synthetic scenario (and evaluation key) per seed")
    q: int = param(count(1), doc="q-gram length")
    num_bits: int = param(count(1), doc="Bloom filter length")
    num_hashes: int = param(count(1), doc="keyed hashes per q-gram")
    fields: list = param(ListOf(AnyOf((TEXT, TEXTS)), text="a non-empty list of field names (a list = one "
                                                             "order-invariant field)"))
    thresholds: list = param(ListOf(FRACTION, text="a non-empty list of Dice thresholds in [0, 1]"))
    default_threshold: float = param(FRACTION, doc="the headline threshold (one of the thresholds)")

    def check(self, source, prefix: str) -> None:
        if not any(abs(self.default_threshold - t) <= 1e-8 + 1e-5 * abs(t) for t in self.thresholds):  # np.isclose
            raise invalid(source, f"{prefix}default_threshold", self.default_threshold,
                          f"one of the thresholds {self.thresholds}")


@dataclass(frozen=True)
class MechanismAuditConfig(Config):
    """``dp_audit``: empirical lower bounds on each mechanism's ε (worst-case neighbours, no data)."""

    mechanisms: list = param(MECHANISMS)
    epsilons: list = param(EPSILONS)
    clip_norm: float = param(CLIP_NORM)
    delta: float = param(DELTA)
    dims: list = param(counts(1, "dimensions d"))
    n_trials: int = param(count(1, "trials"))
    seeds: int = param(count(1, "seeds"), doc="independent audits per (mechanism, ε, d)")
    confidence: float = param(FRACTION_OPEN)
    n_jobs: int = param(PROCESSES, default=1, doc="processes over the cells (results do not depend on it)")
