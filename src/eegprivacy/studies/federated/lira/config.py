"""The ``federated_lira`` stage's typed params (:class:`FederatedLiRAConfig`) and the names its rows and reports
share: the metrics, the FPRs a TPR is asked at, the ≥ 10-beyond rule (:data:`MIN_BEYOND`), the interval methods
and the attack − control cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from eegprivacy.attacks.lira import VARIANCES
from eegprivacy.attacks.membership import ATTACKERS
from eegprivacy.attacks.reference import REFERENCE_ATTACKS
from eegprivacy.params import Config, invalid, param
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.lira.design import loo_feasible, shadow_in_count
from eegprivacy.validation import EPSILONS_OR_INF, FRACTION_OPEN, Constraint, count, counts, options, subset_of


STAGE = "federated_lira"
FPRS = (0.01, 0.001)
METRICS = ("auroc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001")  # per model; a TPR only where resolvable, else NaN
LOWEST_FPR = min(FPRS)  # the pooled TPR's target FPR, reported only where resolvable (else the next one that is)
LOWEST_TPR = f"tpr_at_fpr_{LOWEST_FPR:g}"
POOLED_METRICS = ("auroc", LOWEST_TPR, "tpr_at_resolvable_fpr", "tpr_at_zero_fpr")
MIN_BEYOND = 10  # independent non-members a TPR's threshold must have beyond it: fpr · n_independent ≥ 10
AUROC_CI = "two_way_bootstrap"  # percentile; resamples target models and clusters of trials
TPR_CI = "blocked_threshold_bootstrap"  # the same resamples; the threshold re-estimated on each one's non-members
BOOTSTRAP_UNITS = ("subjects", "trials")
TRAINING_KNOBS = ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
                  "local_epochs", "learning_rate", "batch_size")  # read from federated_mia: shadows = targets
ATTACK_KNOBS = ("n_shadows", "shadow_seed", "target_seeds", "rf_estimators", "attack_folds", "lira_variance",
                "bootstrap", "bootstrap_unit", "shadow_in_fraction", "control_folds",
                "reference_counts")  # the rows' knobs (not workers)
NOTE = mia.NOTE
CONTROLLED = tuple(REFERENCE_ATTACKS)  # at all references: tested against their preprocessing-only control (Holm)
CONTROL_SUFFIX = "_control"  # lira_online -> lira_online_control
UNTRAINED = "lira_online_untrained_control"  # shown beside, never tested (near-constant outputs)
DIFF_METRIC = "auroc_minus_control"  # pooled AUROC of the attack minus that of its control, paired
DIFF_CI = "paired_two_way_bootstrap"  # the two-way bootstrap's resamples, the same for attack and control
ALPHA = 0.05


@dataclass(frozen=True)
class EvenCount(Constraint):
    """An even whole number ≥ ``minimum``."""

    minimum: int
    text: str

    def is_satisfied_by(self, value) -> bool:
        return count(self.minimum).is_satisfied_by(value) and value % 2 == 0


@dataclass(frozen=True)
class FederatedLiRAConfig(Config):
    """``federated_lira``: the attack knobs (the training knobs are federated_mia's, so shadows match targets)."""

    model: str = param(options(("simplenet", "eegnet"), "simplenet or eegnet"))
    epsilons: list = param(EPSILONS_OR_INF, doc="per-step ε (one local step), NOT a cumulative guarantee")
    n_shadows: int = param(EvenCount(4, "an even whole number ≥ 4 (the shadow-as-target check leaves balanced "
                                        "groups out; see check)"))
    shadow_seed: int = param(count(0), doc="shadow j trains with seed shadow_seed + j")
    target_seeds: int = param(count(1, "target models"), doc="target federations, seeds 0..n-1")
    lira_variance: str = param(options(VARIANCES), doc="per_example or global (pooled) within-trial variance")
    attackers: list = param(subset_of(ATTACKERS, "attackers"), doc="RLA attackers, cross-fitted")
    attack_folds: int = param(count(2, "folds"))
    rf_estimators: int = param(count(0))
    bootstrap: int = param(count(0), doc="resamples (target models x clusters of trials) for the pooled intervals "
                                         "(0 = none)")
    workers: int = param(count(1, "processes"), doc="processes for shadows, target cells, bootstrap")
    shadow_in_fraction: float = param(FRACTION_OPEN, default=0.5, doc="share of each client's trials a shadow "
                                                                      "trains on; every trial IN in round(n_shadows "
                                                                      "x this) shadows (0.5: complementary halves)")
    bootstrap_unit: str = param(options(BOOTSTRAP_UNITS, "subjects or trials"), default="subjects",
                                doc="the cluster the pooled bootstrap resamples with the target models: subjects "
                                    "(= clients; trials of one client share its CSP and model) or single trials")
    control_folds: int = param(count(2, "folds"), default=4,
                               doc="client folds of the preprocessing-only control: per target, one federation "
                                   "trained without each fold scores that fold's clients")
    reference_counts: list = param(counts(1, "reference models"), default=(1, 2, 4),
                                   doc="besides all shadows, each reference attack also on k references per trial "
                                       "(online: its first k/2 IN and k/2 OUT shadows; offline: its first k OUT "
                                       "ones), where the attack needs no more")

    def check(self, source, prefix: str) -> None:
        """The balanced shadow design must leave every trial two IN and two OUT shadows (LiRA's Gaussian fits),
        and from six shadows on, the shadow-as-target check must be able to leave a balanced group out
        (:func:`loo_feasible`; at in_fraction 0.8, 60 shadows leave groups of 5 out, 64 cannot)."""
        n = int(self.n_shadows)
        n_in = shadow_in_count(n, self.shadow_in_fraction)
        if min(n_in, n - n_in) < 2:
            raise invalid(source, f"{prefix}n_shadows", n,
                          f"a number whose share {self.shadow_in_fraction} leaves every trial two IN and two OUT "
                          f"shadows (has {n_in} IN, {n - n_in} OUT)")
        if n >= 6 and not loo_feasible(n, n_in):
            near = [m for m in range(6, 2 * n + 12, 2) if loo_feasible(m, shadow_in_count(m, self.shadow_in_fraction))]
            near = sorted(near, key=lambda m: (abs(m - n), m))[:2]
            raise invalid(source, f"{prefix}n_shadows", n,
                          f"a number of shadows the shadow-as-target check can leave out in balanced groups at "
                          f"shadow_in_fraction {self.shadow_in_fraction} (n_shadows / gcd(n_shadows, OUT per trial) "
                          f"shadows per group, two IN and two OUT per trial left), e.g. "
                          f"{' or '.join(map(str, sorted(near)))}")

