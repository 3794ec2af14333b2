"""Study B, strongest attack: LiRA with shadow federations, to ask whether per-step DP still looks protective
against the strongest membership attack we can mount on the federated model.

Shadow federations go through exactly the target's pipeline (:class:`~eegprivacy.studies.federated.mia.Federation`
and :func:`~eegprivacy.studies.federated.mia.federate`, training knobs read from ``params/federated_mia.yaml``):
one client per subject, each client's CSP fitted on its own training trials, FedAvg with the same rounds, epochs,
sampling, learning rate and DP. Shadows train on ``shadow_in_fraction`` of every (subject, label) group of trials
(0.8 in the params, the target's member share: at 0.5, Carlini et al.'s complementary halves, each client's
member-fitted CSP differs between shadows and target and the untrained control fell below chance, AUROC 46 %; at
0.8 it sits at 50 %); CSP, like the model, sees only the IN trials. One set of shadows per ε serves every target
seed.

The shadow masks are balanced (:func:`shadow_membership`): every trial is IN in exactly k = round(n_shadows ·
shadow_in_fraction) shadows and OUT in the other n_shadows − k, and every shadow holds k/n_shadows of each
(subject, label) group to within one trial. The per-trial IN/OUT counts are therefore constant and carry no
information about any membership. That was not so before: the earlier block design at 0.8 gave trials 12 or 13
OUT shadows of 64, and a trial's OUT count alone predicted a held-out shadow's membership with AUROC ≈ 0.83,
an answer leaked into the shadow-as-target check. What LiRA reads, and what it does not: its IN/OUT fits come
from the shadows' φ and masks alone, the same for every target; it never reads a target's split, and the masks
are drawn independently of every target's split (from ``shadow_seed``), so they say nothing about a target's
members either.

Targets are federations built exactly as ``federated_mia``'s, one per target seed 0..S-1, and each draws its
own per-subject 80/20 member split of every client's trials, seeded by the target index exactly as
``federated_mia``'s seed is (:func:`target_member`): a pooled score is then about many splits, not one, and the
non-members of the S targets together cover most trials. Every trial is scored through its client's CSP, fitted
on that target's members, then the global model. Attacks on each target:

- ``lira_online`` / ``lira_offline``: :class:`~eegprivacy.attacks.lira.LiRA` on φ = logit confidence of the
  true label under the final global model, against the shadows' φ of the same trial.
- ``rla`` with ``lr``/``rf``/``mlp`` attackers: [p0, p1, loss] trained on the target's own member labels,
  cross-fitted (k folds) so that every trial is scored by an attacker that never saw its label.
- ``lira_online_control`` / ``lira_offline_control``, the preprocessing-only control (``federated_control``'s
  control applied to LiRA): each client's CSP and scaling are fitted on its members, so members sit further from
  the decision boundary in CSP space *whatever model is applied afterwards*, and an attack on the trained model
  detects that as well as training. Per target, ``control_folds`` fold federations are trained exactly like the
  target (same :func:`~eegprivacy.studies.federated.mia.federate`, seed, ε and member split), each without one
  client fold (:func:`~eegprivacy.studies.federated.control.client_folds`; the other clients keep their own
  member-fitted CSP, which does not depend on the other clients). Client k's control φ is the logit confidence
  of the fold model that never saw k, on k's trials through *the target's* preprocessing of k (EEGNet, FedBN:
  BatchNorm statistics calibrated on k's members, as the trained model's come from them); LiRA scores it against
  the same shadows exactly as it scores the target (:func:`control_phi`). What the control detects comes from
  preprocessing and from what all subjects share, not from training on the client.
- ``lira_online_untrained_control``: LiRA on the untrained initial models (target and shadows alike). Shown, never
  tested, and not the control: an untrained network's outputs are nearly constant, so it cannot show a
  preprocessing leak.

Which TPRs are reported (:data:`MIN_BEYOND`): a TPR at FPR f is a number only where at least 10 *independent*
non-members lie beyond its threshold, f · n_independent ≥ 10 (:func:`resolvable`), independent non-members being
distinct trials that were a non-member of at least one model, each counted once however many models held it out
(:func:`independent_nonmembers`): pooling S models over the same trial does not multiply what a false-positive
rate can rest on. Below that the TPR is NaN in the rows, ``resolvable`` False, and its ``note`` reads "not
resolvable: needs ≥ N independent non-members, has M; supports F % FPR", F the lowest FPR on the 1-2-5 grid the
pool resolves (:func:`resolvable_fpr`). The TPR at zero false positives is never resolvable: a threshold above
every non-member has, by construction, no non-member beyond it (:data:`ZERO_FPR_NOTE`).

Scores: per target seed AUROC and the TPR at 1 % and 0.1 % FPR where one target's non-members resolve them
(144 do not: NaN), mean and t-interval over target seeds (``ci_over = seeds``, ``ci_method = t_interval``). Pooled
over the S target models (:func:`pooled_rows`): the AUROC with a two-way percentile bootstrap that resamples
target models and clusters of trials (``ci_method = two_way_bootstrap``; ``bootstrap_unit``: subjects = clients,
the default, or single trials; ``ci_over`` says which); the TPR at 0.1 % FPR and at the lowest resolvable FPR
(``tpr_at_resolvable_fpr``, its FPR in ``fpr``), where resolvable, with the blocked threshold bootstrap
(``ci_method = blocked_threshold_bootstrap``, :func:`cluster_bootstrap`): the same resamples, the threshold
re-estimated at that FPR on each resample's non-members and the TPR read off its members, so the interval carries
the threshold's sampling error and the clustering of trials within subjects. Every pooled row states the subject
clusters of the pool (``n_clusters``).

LiRA − control (:func:`control_difference_rows`, metric :data:`DIFF_METRIC`, ``scope = target_pooled``): the
pooled AUROC of ``lira_online`` (``lira_offline``) minus that of its control, paired, with a percentile interval
from the same two-way bootstrap (the same resamples of target models and subjects for attack and control,
``ci_method = paired_two_way_bootstrap``), its two-sided bootstrap p-value of "difference = 0" and Holm over the
table's attack − control cells (every ε and both modes; :func:`holm_control_cells`). Controls are not hypotheses
of the family: their rows carry no p-value. ``control_share`` = (control − 0.5) / (attack − 0.5), how much of the
attack's AUROC excess over chance the control reaches.
Shadow-as-target (``scope = shadow_loo``, :func:`shadow_loo`): each shadow in turn is the target of LiRA fitted on
the shadows outside its balanced leave-out group (:func:`loo_group_size`: pairs at 0.5, groups of 5 at 0.8 with 60
shadows), so every trial keeps the same number of IN and OUT fitting shadows; the shadows' own membership game
(IN share k/n_shadows), pooled under the same rule.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.attacks.lira import VARIANCES, LiRA, logit_confidence
from eegprivacy.attacks.membership import ATTACKERS, RecordLevelAttack, record_features
from eegprivacy.attacks.metrics import auroc, roc
from eegprivacy.evaluation.client_bootstrap import auroc_replicates
from eegprivacy.evaluation.cluster_bootstrap import bootstrap_p_value_two_sided, holm, p_value_mc_error
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.evaluation.weighted_replicates import tpr_at_threshold_weighted, two_way_cells
from eegprivacy.params import Config, ParamsError, param
from eegprivacy.pipeline.keys import config_key, epsilon_key
from eegprivacy.pipeline.sweep import SweepRunner, expand_grid, run_prefetched
from eegprivacy.studies.federated import control, mia
from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig
from eegprivacy.tracking import required_tags
from eegprivacy.validation import EPSILONS_OR_INF, FRACTION_OPEN, Constraint, count, options, subset_of

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
                "bootstrap", "bootstrap_unit", "shadow_in_fraction", "control_folds")  # the rows' knobs (not workers)
NOTE = mia.NOTE
CONTROLLED = ("lira_online", "lira_offline")  # the attacks with a preprocessing-only control, tested against it
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

    def check(self, source, prefix: str) -> None:
        """The balanced shadow design must leave every trial two IN and two OUT shadows (LiRA's Gaussian fits),
        and from six shadows on, the shadow-as-target check must be able to leave a balanced group out
        (:func:`loo_feasible`; at in_fraction 0.8, 60 shadows leave groups of 5 out, 64 cannot)."""
        n = int(self.n_shadows)
        n_in = shadow_in_count(n, self.shadow_in_fraction)
        if min(n_in, n - n_in) < 2:
            raise ParamsError(f"{source}: {prefix}n_shadows = {n!r} is invalid; it must be a number whose share "
                              f"{self.shadow_in_fraction} leaves every trial two IN and two OUT shadows (has {n_in} "
                              f"IN, {n - n_in} OUT). Fix it in {source} and run the stage again (nothing was "
                              "computed or written)")
        if n >= 6 and not loo_feasible(n, n_in):
            near = [m for m in range(6, 2 * n + 12, 2) if loo_feasible(m, shadow_in_count(m, self.shadow_in_fraction))]
            near = sorted(near, key=lambda m: (abs(m - n), m))[:2]
            raise ParamsError(f"{source}: {prefix}n_shadows = {n!r} is invalid; it must be a number of shadows the "
                              f"shadow-as-target check can leave out in balanced groups at shadow_in_fraction "
                              f"{self.shadow_in_fraction} (n_shadows / gcd(n_shadows, OUT per trial) shadows per "
                              f"group, two IN and two OUT per trial left), e.g. {' or '.join(map(str, sorted(near)))}. "
                              f"Fix it in {source} and run the stage again (nothing was computed or written)")


# ---- the shadows -----------------------------------------------------------------------------------------------

def shadow_in_count(n_shadows: int, in_fraction: float) -> int:
    """How many shadows every trial is IN: n_shadows · in_fraction rounded half up, kept in 1..n_shadows − 1 (a
    trial needs an IN and an OUT shadow)."""
    if not 0.0 < float(in_fraction) < 1.0:
        raise ValueError(f"in_fraction must lie strictly between 0 and 1, got {in_fraction!r}")
    n = int(n_shadows)
    return min(max(int(np.floor(n * float(in_fraction) + 0.5)), 1), n - 1)


def loo_group_size(n_shadows: int, n_in: int) -> int:
    """Shadows the shadow-as-target check leaves out together: g = n_shadows / gcd(n_shadows, n_out), the
    smallest block of consecutive shadows of :func:`shadow_membership` in which every trial is OUT the same
    number of times (n_out / gcd), so the shadows left to fit LiRA hold every trial IN (and OUT) equally often.
    2 at ``in_fraction`` 0.5 (complementary pairs), 5 at 0.8 when 5 divides n_shadows."""
    n, n_out = int(n_shadows), int(n_shadows) - int(n_in)
    return n // math.gcd(n, n_out)


def loo_counts(n_shadows: int, n_in: int) -> tuple[int, int]:
    """(IN, OUT) shadows every trial keeps once one group of :func:`loo_group_size` leaves."""
    n, n_out = int(n_shadows), int(n_shadows) - int(n_in)
    g = loo_group_size(n, n_in)
    out_in_group = n_out // (n // g)
    return int(n_in) - (g - out_in_group), n_out - out_in_group


def loo_feasible(n_shadows: int, n_in: int) -> bool:
    """Whether shadow-as-target can run: at least two groups, and two IN and two OUT shadows per trial left once
    a group leaves (a Gaussian fit on each side)."""
    kept_in, kept_out = loo_counts(n_shadows, n_in)
    return int(n_shadows) // loo_group_size(n_shadows, n_in) >= 2 and min(kept_in, kept_out) >= 2


def _cyclic_position(n_shadows: int, n_in: int) -> np.ndarray:
    """Each shadow's position on the cycle of the design: shadow group·g + t sits at group + t·s (s = n / g), so
    the g shadows of one leave-out group are spread evenly round the cycle."""
    g = loo_group_size(n_shadows, n_in)
    s = int(n_shadows) // g
    j = np.arange(int(n_shadows))
    return (j // g) + (j % g) * s


def shadow_membership(y, subjects, n_shadows: int, seed: int, in_fraction: float = 0.5) -> np.ndarray:
    """(n_shadows, n_trials) IN mask, balanced: every trial is IN in exactly k = :func:`shadow_in_count` shadows,
    and every shadow holds k/n_shadows of each (subject, label) group to within one trial (each shadow client
    keeps both classes, which its CSP needs, and about the target's member share of them).

    A cyclic design, drawn per (subject, label) group of m trials: the group's trials in a seeded random order,
    trial p starting at offset ⌊p·n/m⌋ plus a seeded rotation of the group, IN in the k cycle positions from its
    offset on (mod n). Any k consecutive positions then hold ⌊km/n⌋ or ⌈km/n⌉ of the group's offsets, so every
    shadow's share of the group is within one trial of k/n. Shadows sit on the cycle as
    :func:`_cyclic_position` says, so that every block of :func:`loo_group_size` consecutive shadows holds each
    trial IN the same number of times (at 0.5: complementary pairs 2i, 2i + 1, Carlini et al.'s design).

    Why balanced: with a per-trial IN count that varies (the earlier block design at 0.8 gave 12 or 13 OUT
    shadows per trial), the count itself predicted a held-out shadow's membership (AUROC ≈ 0.83) and so leaked
    the answer into the shadow-as-target check. A constant count carries nothing (AUROC exactly 0.5)."""
    y = np.asarray(y).ravel()
    subjects = np.asarray(subjects).ravel()
    n = int(n_shadows)
    k = shadow_in_count(n, in_fraction)
    rng = np.random.default_rng(int(seed))
    position = _cyclic_position(n, k)
    mask = np.zeros((n, y.size), dtype=bool)
    labels, names = y.astype(str), subjects.astype(str)
    for subject, label in sorted({(str(s), str(c)) for s, c in zip(subjects, y)}):
        rows = rng.permutation(np.flatnonzero((names == subject) & (labels == label)))
        offsets = (np.arange(rows.size) * n // rows.size + int(rng.integers(n))) % n
        mask[:, rows] = (position[:, None] - offsets[None, :]) % n < k
    return mask


def client_index(trials, member) -> np.ndarray:
    """Trial indices in the order a ``Federation`` holds them (per client: members, then non-members), so
    model outputs on the federation's arrays map back to trial order."""
    subjects = trials.metadata["subject"].to_numpy()
    order = []
    for subject in trials.subjects():  # the same loop as Federation: the subject id stays here
        rows = subjects == subject
        order += [np.flatnonzero(rows & member), np.flatnonzero(rows & ~member)]
    return np.concatenate(order)


def trial_logits(task, weights, fed, order: np.ndarray, locals_: list | None = None) -> np.ndarray:
    """Logits of every trial, each through its own client's CSP and, where the task keeps BatchNorm statistics
    local (FedBN), its own client's statistics ``locals_[c]`` (see :func:`mia.client_locals`), in trial order.
    ``weights``: one model for every client, or a list with client c's model at c (the control's fold models)."""
    locals_ = locals_ if locals_ is not None else [None] * len(fed.clients)
    per_client = weights if isinstance(weights, ClientModels) else [weights] * len(fed.clients)
    parts = [task.logits(w, X.reshape(len(X), -1), local=local) if local is not None
             else task.logits(w, X.reshape(len(X), -1))
             for (Xm, _, Xn, _), w, local in zip(fed.clients, per_client, locals_) for X in (Xm, Xn)]
    out = np.empty((order.size, task.classes.size))
    out[order] = np.concatenate(parts)
    return out


class ClientModels(list):
    """Client c's model weights at index c (a model per client, as the control's fold models are); a plain list
    of weights is one model's parameters, so the two are told apart by type."""


def control_models(task, fed, model: str, eps: float, seed: int, training: FederatedMIAConfig,
                   folds: int) -> tuple[ClientModels, list, list]:
    """The preprocessing-only control's models: for each of ``folds`` client folds
    (:func:`~eegprivacy.studies.federated.control.client_folds` of the target's seed), a federation trained exactly
    like the target (:func:`_federate`: same model, ε, seed, knobs) on the target's clients without that fold, each
    remaining client with its own member-fitted CSP unchanged. Returns (client k's fold model, client k's local
    state, the folds): the model of the fold that left k out, and, where the task keeps BatchNorm statistics local
    (FedBN), statistics calibrated on k's members (``task.calibrate``; None otherwise)."""
    n = len(fed.clients)
    clients = control.ClientSet(fed.clients)
    weights, locals_ = ClientModels([None] * n), [None] * n
    client_folds = control.client_folds(n, folds, seed)
    for fold in client_folds:
        left_out = set(fold.tolist())
        _, result = _federate(model, eps, seed, clients.subset([k for k in range(n) if k not in left_out]), training)
        for k in fold:
            weights[k] = result.weights
            locals_[k] = (task.calibrate(result.weights, fed.clients[k][0].reshape(len(fed.clients[k][0]), -1))
                          if result.initial_local is not None else None)
    return weights, locals_, client_folds


def control_phi(task, fed, order: np.ndarray, y: np.ndarray, model: str, eps: float, seed: int,
                training: FederatedMIAConfig, folds: int) -> tuple[np.ndarray, np.ndarray]:
    """φ (logit confidence of the true label, as the target's) of every trial under the control
    (:func:`control_models`): client k's trials, through the target's CSP of k, scored by the fold model that
    never saw k; in trial order. Also the logits (for the control's utility)."""
    weights, locals_, _ = control_models(task, fed, model, eps, seed, training, folds)
    logits = trial_logits(task, weights, fed, order, locals_)
    return logit_confidence(logits, y), logits


def _initial_weights(result):
    """The untrained global model the first round was sent (the same at every ε for one seed)."""
    return result.sent[min(result.sent)]


def _federate(model: str, eps: float, seed: int, fed, training: FederatedMIAConfig):
    return mia.federate({"model": model, "epsilon": eps}, seed, fed, training)


def _train_shadows(indices, trials, masks, config: FederatedLiRAConfig, training: FederatedMIAConfig, epsilons,
                   output: str) -> dict:
    """φ of every trial under shadows ``indices`` at every ε, and under their untrained initial models. All of
    them (shadows × ε) train in lock-step (:func:`~eegprivacy.studies.federated.mia.federate_many`): each round's
    local training of every shadow is one batched tensor program per ε, and each shadow's numbers are what
    :func:`_federate` gives it alone."""
    feds = {int(j): mia.Federation(trials, masks[j], output, training.csp_components) for j in indices}
    runs = [({"model": config.model, "epsilon": eps}, config.shadow_seed + j, fed)
            for j, fed in feds.items() for eps in epsilons]
    trained = iter(mia.federate_many(runs, training))
    out = {}
    y = None
    for j, fed in feds.items():
        order = client_index(trials, masks[j])
        phis = {}
        for eps in epsilons:
            task, result = next(trained)
            y = task._targets(trials.y).numpy() if y is None else y
            phis[epsilon_key(eps)] = logit_confidence(trial_logits(task, result.weights, fed, order,
                                                                    mia.client_locals(result, len(fed.clients))), y)
            if "untrained" not in phis:
                phis["untrained"] = logit_confidence(trial_logits(task, _initial_weights(result), fed, order,
                                                                     mia.client_locals(result, len(fed.clients), 0)), y)
        out[j] = phis
    return out


def shadow_phis(trials, masks, config: FederatedLiRAConfig, training: FederatedMIAConfig, epsilons, output: str,
                cache: Path) -> dict:
    """{"inf"/"5"/…/"untrained": (n_shadows, n_trials) φ}, trained in ``workers`` processes, each training its
    share of the shadows at every ε in lock-step (:func:`_train_shadows`; each shadow's numbers depend only on its
    own seed and mask, so neither the split over processes nor the batching changes them), and cached on disk
    under a key of everything they depend on."""
    if cache.exists():
        with np.load(cache) as saved:
            return {k: saved[k] for k in saved.files}
    n = masks.shape[0]
    workers = min(config.workers, n)
    chunks = [list(range(n))[w::workers] for w in range(workers)]
    if workers > 1:
        from joblib import Parallel, delayed

        parts = Parallel(n_jobs=workers, backend="loky")(
            delayed(_train_shadows)(c, trials, masks, config, training, epsilons, output) for c in chunks)
    else:
        parts = [_train_shadows(chunks[0], trials, masks, config, training, epsilons, output)]
    merged = {j: v for part in parts for j, v in part.items()}
    phis = {k: np.stack([merged[j][k] for j in range(n)]) for k in merged[0]}
    _save_npz(cache, phis)
    return phis


def _save_npz(path: Path, arrays: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)


# ---- the targets' splits and what they can resolve -------------------------------------------------------------

def target_member(trials, training: FederatedMIAConfig, seed: int) -> np.ndarray:
    """Target ``seed``'s member mask: its own per-subject 80/20 split, drawn from ``split_seed`` and the target
    index exactly as ``federated_mia``'s cell of that seed draws it (:func:`~eegprivacy.studies.federated.mia.
    seed_split`), so that pooling over targets pools over splits, not over one split's trials only."""
    return mia.seed_split(trials, training, int(seed))


def independent_nonmembers(members) -> int:
    """Distinct trials that were a non-member of at least one target model, each counted once: (n_models,
    n_trials) member masks in. S targets scoring the same held-out trial give S correlated scores, not S
    independent non-members, so this, not the pooled count, is what a false-positive rate rests on."""
    members = np.asarray(members).astype(bool)
    if members.ndim != 2:
        raise ValueError(f"members must be (n_models, n_trials), got shape {members.shape}")
    return int((~members).any(axis=0).sum())


def resolvable(fpr: float, n_independent: int, beyond: int = MIN_BEYOND) -> bool:
    """Whether a TPR at ``fpr`` can be reported: at least ``beyond`` independent non-members lie beyond its
    threshold, fpr · n_independent ≥ beyond (10 by default). A threshold set by fewer rests on a handful of
    correlated scores, and no interval we have holds there (the percentile bootstrap put the TPR at 0.2 % FPR,
    3 non-members beyond, at the bottom of its own interval)."""
    return float(fpr) * int(n_independent) >= int(beyond) - 1e-9


def needed_nonmembers(fpr: float, beyond: int = MIN_BEYOND) -> int:
    """Independent non-members a TPR at ``fpr`` needs: ⌈beyond / fpr⌉."""
    return int(np.ceil(int(beyond) / float(fpr) - 1e-9))


def resolvable_fpr(fpr: float, n_independent: int, beyond: int = MIN_BEYOND) -> float:
    """``fpr`` if ``n_independent`` non-members resolve it (:func:`resolvable`: fpr · n ≥ ``beyond``), else the
    smallest FPR on the 1-2-5 grid (…, 0.001, 0.002, 0.005, 0.01, …) that they do; NaN when none below 1 does
    (fewer than 2 · ``beyond`` independent non-members: even 50 % FPR is out of reach)."""
    if not 0.0 < float(fpr) < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr!r}")
    n = int(n_independent)
    if n < 1:
        raise ValueError("no independent non-member: no false-positive rate can be resolved")
    if resolvable(fpr, n, beyond):
        return float(fpr)
    floor = int(beyond) / n
    exponent = int(np.floor(np.log10(floor)))
    for scale in (exponent, exponent + 1):
        for step in (1.0, 2.0, 5.0):
            candidate = float(f"{step * 10.0 ** scale:.12g}")
            if resolvable(candidate, n, beyond):
                return candidate if candidate < 1.0 else float("nan")
    return float("nan")


def not_resolvable_note(fpr: float, n_independent: int, beyond: int = MIN_BEYOND, what: str = "") -> str:
    """The text an unresolvable TPR is reported as: what it needs, what it has, and the FPR the pool supports."""
    supported = resolvable_fpr(fpr, n_independent, beyond) if int(n_independent) >= 1 else float("nan")
    where = (f"; supports {100 * supported:g} % FPR" if np.isfinite(supported)
             else f"; no FPR below 1 (needs ≥ {2 * int(beyond)})")
    return (f"not resolvable: needs ≥ {needed_nonmembers(fpr, beyond):,} independent non-members{what}, has "
            f"{int(n_independent):,}{where}")


ZERO_FPR_NOTE = (f"not resolvable: a threshold above every non-member has no non-member beyond it, and a TPR "
                 f"needs ≥ {MIN_BEYOND} beyond its threshold")


# ---- scoring ---------------------------------------------------------------------------------------------------

def zero_fpr_tpr(member, scores) -> float:
    """Share of members scored strictly above every non-member (ties count against the attacker). Never reported
    as a number: its threshold has no non-member beyond it, so it fails the ≥ 10-beyond rule by construction
    (:data:`ZERO_FPR_NOTE`); it is a diagnostic only."""
    member = np.asarray(member).astype(bool)
    return float((scores[member] > scores[~member].max()).mean())


def tpr_at_threshold(member, scores, fpr: float) -> float:
    """TPR at the threshold of FPR ``fpr`` set on these non-members: the share of members scored strictly above
    the (⌊fpr·n⌋ + 1)-th highest of the n non-member scores (ties count against the attacker) — the highest TPR
    at an operating point with FPR ≤ ``fpr``, as :func:`~eegprivacy.attacks.metrics.tpr_at_fpr` computes it, in
    one partial sort and without its 1/fpr floor (the caller applies :func:`resolvable`)."""
    member = np.asarray(member).astype(bool).ravel()
    scores = np.asarray(scores, dtype=float).ravel()
    negatives, positives = scores[~member], scores[member]
    if negatives.size == 0 or positives.size == 0:
        return float("nan")
    allowed = int(np.floor(float(fpr) * negatives.size + 1e-9))
    if allowed >= negatives.size:
        return 1.0
    cut = negatives.size - allowed - 1
    return float((positives > np.partition(negatives, cut)[cut]).mean())


def chance_of(metric: str) -> float:
    """What a blind attacker scores: AUROC 0.5, TPR at x FPR = x, TPR at zero false positives 0."""
    return 0.5 if metric == "auroc" else 0.0 if metric == "tpr_at_zero_fpr" else float(metric.rsplit("_", 1)[1])


def score_rows(member, scores: dict, **extra) -> list[dict]:
    """One model's rows: AUROC, and the TPR at each of :data:`FPRS` where this model's own non-members (distinct
    trials) resolve it (:func:`resolvable`), NaN where they do not — one target's 144 non-members resolve
    neither 1 % (1.4 beyond) nor 0.1 %."""
    member = np.asarray(member).astype(bool).ravel()
    n_nonmembers = int((~member).sum())
    rows = []
    for (attack, attacker), s in scores.items():
        summary = {"auroc": auroc(member.astype(int), s)}
        for fpr in FPRS:
            summary[f"tpr_at_fpr_{fpr:g}"] = (tpr_at_threshold(member, s, fpr) if resolvable(fpr, n_nonmembers)
                                              else float("nan"))
        for metric in METRICS:
            rows.append({"metric": metric, "value": summary[metric], "chance": chance_of(metric), "attack": attack,
                         "attacker": attacker, "n": float(member.size), **extra})
    return rows


MEMBER_KEY = "member"  # the target's split, saved beside its per-trial scores


@dataclass
class TargetContext:
    """What every target cell shares (pickled to the worker processes): the trials, the model input, the
    shadows' φ and IN masks and where each cell leaves its per-trial scores. Each cell draws its own split."""

    config: FederatedLiRAConfig
    training: FederatedMIAConfig
    trials: object
    output: str
    phis: dict
    masks: np.ndarray
    scores_dir: Path


def _rla_scores(config: FederatedLiRAConfig, logits, y, member, seed: int) -> dict:
    """Cross-fitted RLA scores of every attacker on [p0, p1, loss] of the final model."""
    from eegprivacy.federated.task import derive_seed

    proba = np.exp(logits - logits.max(1, keepdims=True))
    proba /= proba.sum(1, keepdims=True)
    loss = -np.log(np.clip(proba[np.arange(y.size), y], 1e-300, None))
    features = record_features(proba, y, loss)
    scores = {}
    for attacker in config.attackers:
        rla = RecordLevelAttack(attacker=attacker, n_estimators=config.rf_estimators,
                                random_state=derive_seed(seed, 17))
        scores[("rla", attacker)] = rla.cross_fitted_scores(features, member.astype(int), config.attack_folds)
    return scores


def target_cell(cell: dict, seed: int, ctx: TargetContext) -> list[dict]:
    """One target federation at one ε on its own member split (:func:`target_member`), and its ``control_folds``
    fold federations (:func:`control_phi`): LiRA online/offline on the target and on the preprocessing-only
    control, the untrained model and the RLAs; the per-trial scores and the split go beside the cell's rows (and
    into the cell's cache, so a rerun resumes) for the pooled metrics and the ROC figure. LiRA's fits read only
    the shadows (their φ and balanced IN masks, drawn independently of every target's split), never the target's
    split, so the online IN/OUT comparison is the same whichever split a target drew."""
    eps, config = float(cell["epsilon"]), ctx.config
    member = target_member(ctx.trials, ctx.training, seed)
    fed = mia.Federation(ctx.trials, member, ctx.output, ctx.training.csp_components)
    order = client_index(ctx.trials, member)
    task, result = _federate(config.model, eps, seed, fed, ctx.training)
    y = task._targets(ctx.trials.y).numpy()
    logits = trial_logits(task, result.weights, fed, order, mia.client_locals(result, len(fed.clients)))
    phi = logit_confidence(logits, y)
    phi0 = logit_confidence(trial_logits(task, _initial_weights(result), fed, order,
                                         mia.client_locals(result, len(fed.clients), 0)), y)
    phi_c, logits_c = control_phi(task, fed, order, y, config.model, eps, seed, ctx.training, config.control_folds)
    shadows, masks, variance = ctx.phis, ctx.masks, config.lira_variance
    scores = {}
    for mode in ("online", "offline"):  # one fit on the shadows scores the target and its control alike
        lira = LiRA(mode, variance).fit(shadows[epsilon_key(eps)], masks)
        scores[(f"lira_{mode}", "")] = lira.score_samples(phi)
        scores[(f"lira_{mode}{CONTROL_SUFFIX}", "")] = lira.score_samples(phi_c)
    scores[(UNTRAINED, "")] = LiRA("online", variance).fit(shadows["untrained"], masks).score_samples(phi0)
    scores.update(_rla_scores(config, logits, y, member, seed))
    rows = score_rows(member, scores, scope="target_seed")
    nonmember = ~member
    rows += [{"metric": "utility_accuracy_nonmembers", "value": float((logits[nonmember].argmax(1)
                                                                        == y[nonmember]).mean()), "chance": 0.5},
             {"metric": "utility_accuracy_nonmembers_control",
              "value": float((logits_c[nonmember].argmax(1) == y[nonmember]).mean()), "chance": 0.5},
             {"metric": "phi_gap", "value": float(phi[member].mean() - phi[nonmember].mean())},
             {"metric": "phi_gap_control", "value": float(phi_c[member].mean() - phi_c[nonmember].mean())},
             {"metric": "n_members", "value": float(member.sum())},
             {"metric": "n_nonmembers", "value": float(nonmember.sum())}]
    _save_npz(ctx.scores_dir / f"{config_key({**cell, 'seed': seed})}.npz",
              {MEMBER_KEY: member, **{f"{a}|{b}": s for (a, b), s in scores.items()}})
    return rows


# ---- pooled over target models, and shadow-as-target -----------------------------------------------------------

def _pooled_metrics(members: np.ndarray, scores: np.ndarray, fprs: dict, with_auroc: bool = True) -> dict:
    """AUROC (if ``with_auroc``) and the TPR at each {metric: fpr} of ``fprs``, the threshold set on these
    (n_models, n_trials) scores' own non-members (:func:`tpr_at_threshold`), pooled."""
    member, score = members.ravel().astype(int), scores.ravel()
    names = (["auroc"] if with_auroc else []) + list(fprs)
    if member.min() == member.max():  # a resample without members or without non-members
        return {m: float("nan") for m in names}
    out = {"auroc": auroc(member, score)} if with_auroc else {}
    out.update({metric: tpr_at_threshold(member, score, fpr) for metric, fpr in fprs.items()})
    return out


def _stack(groups: list) -> tuple[np.ndarray, np.ndarray]:
    """(n_models, n_trials) member masks and scores from [(member, scores) per model]."""
    members = np.stack([np.asarray(g[0]).astype(int).ravel() for g in groups])
    scores = np.stack([np.asarray(g[1], dtype=float).ravel() for g in groups])
    if members.shape != scores.shape:
        raise ValueError(f"every model needs one member flag per score: {members.shape} vs {scores.shape}")
    return members, scores


def _resample_cells(members, resamples, cluster_of) -> tuple[np.ndarray, np.ndarray]:
    """The (models, clusters) resamples as (model, cluster) cells: each row's cell and the (B, cells) counts."""
    n_models, n_clusters = members.shape[0], int(cluster_of.max()) + 1
    model_counts = np.stack([np.bincount(models, minlength=n_models) for models, _ in resamples])
    cluster_counts = np.stack([np.bincount(clusters, minlength=n_clusters) for _, clusters in resamples])
    return two_way_cells(model_counts, cluster_counts, cluster_of)


def _resampled_metrics(members, scores, cluster_of, resamples, fprs: dict, with_auroc: bool) -> list[dict]:
    """:func:`_pooled_metrics` of every resample from its multiplicities, the values the materialised resample
    gives without building it (:func:`~eegprivacy.evaluation.client_bootstrap.auroc_replicates` over the
    resample's (model, cluster) cells; :func:`~eegprivacy.evaluation.weighted_replicates.
    tpr_at_threshold_weighted`)."""
    cells, counts = _resample_cells(members, resamples, cluster_of)
    member, score = members.ravel(), scores.ravel()
    values = {"auroc": auroc_replicates(score, member, cells, counts)} if with_auroc else {}
    weights = counts[:, cells] if fprs else None
    values.update({metric: tpr_at_threshold_weighted(score, member, weights, fpr) for metric, fpr in fprs.items()})
    return [{metric: float(v[b]) for metric, v in values.items()} for b in range(len(resamples))]


def two_way_resamples(n_models: int, n_clusters: int, n_boot: int, seed: int) -> list[tuple]:
    """The two-way bootstrap's resamples, in order: (models, clusters) drawn with replacement, independently, n − 1
    of each n (all n where n ≤ 2: a pool of one model or one cluster is another statistic, not a resample of this
    one). :func:`cluster_bootstrap` and :func:`paired_difference` draw the same ones from the same seed.

    Why n − 1 of n: a resample of all n units has the variance of a mean with divisor n, (n − 1)/n of the
    unbiased one, and with 10 target models and 16 subjects that bias is the interval's: drawn n of n, the paired
    LiRA − control test rejected 0.057 [0.049, 0.066] of 3,000 null pools at α = 0.05 and its interval covered
    0.937 (the calibration stage, ``study_b.lira_minus_control``). Drawing n − 1 of n (the rescaling bootstrap of
    Rao & Wu 1988 at its unbiased size) makes the resampled mean's variance the unbiased s²/n."""
    rng = np.random.default_rng(seed)
    m, k = (n - 1 if n > 2 else n for n in (n_models, n_clusters))
    return [(rng.integers(0, n_models, m), rng.integers(0, n_clusters, k)) for _ in range(n_boot)]


def _cluster_codes(clusters, n_trials: int) -> np.ndarray:
    """The cluster index (0..k − 1) of every trial; every trial its own cluster when ``clusters`` is None."""
    codes = np.arange(n_trials) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    if codes.size != n_trials:
        raise ValueError(f"{codes.size} cluster codes for {n_trials} trials")
    return codes.ravel()


def cluster_bootstrap(members, scores, clusters, fprs: dict, n_boot: int, seed: int, n_jobs: int = 1,
                      with_auroc: bool = True) -> dict[str, tuple[float, float]]:
    """Percentile 95 % intervals from a two-way bootstrap: each resample draws n − 1 of the n models with
    replacement and, independently, n − 1 of the n clusters of trials (``clusters``: one code per trial, e.g. its
    subject; ``None`` = every trial its own cluster; :func:`two_way_resamples` says why n − 1), and pools every
    drawn model's scores on every drawn cluster's trials. Each resample's metrics are computed from its
    multiplicities, exactly as on the materialised resample (:func:`_resampled_metrics`).

    - ``auroc`` (:data:`AUROC_CI`): the AUROC of each resample.
    - each TPR of ``fprs`` ({metric: fpr}; :data:`TPR_CI`, the blocked threshold bootstrap): the threshold is
      re-estimated in every resample, at the same FPR, on the resampled non-members, and the TPR read off the
      resampled members (:func:`tpr_at_threshold`). The interval thus carries the threshold's own sampling error,
      which a binomial interval at a fixed threshold (Clopper–Pearson) leaves out, and resamples whole subjects,
      whose trials share a CSP and a client model, where a binomial interval would count correlated trials as
      independent. Only used where ≥ 10 independent non-members lie beyond the threshold (:func:`resolvable`):
      the percentile interval of a tail quantile is not trusted below that.

    Resampling the models alone would treat the trials as fixed and so ignore the uncertainty that matters most
    when few distinct trials are held out. NaN when fewer than half the resamples give a finite value; the
    resamples are drawn here, in order, so ``n_jobs`` does not move the intervals."""
    names = (["auroc"] if with_auroc else []) + list(fprs)
    out = {m: (float("nan"), float("nan")) for m in names}
    n_models, n_trials = members.shape
    cluster_of = _cluster_codes(clusters, n_trials)
    if n_boot < 1 or n_models * (cluster_of.max() + 1) < 2:
        return out
    resamples = two_way_resamples(n_models, int(cluster_of.max()) + 1, n_boot, seed)
    chunks = [[resamples[i] for i in part] for part in np.array_split(np.arange(n_boot), max(1, n_jobs))]
    if n_jobs > 1:
        from joblib import Parallel, delayed

        parts = Parallel(n_jobs=n_jobs)(delayed(_resampled_metrics)(members, scores, cluster_of, c, fprs,
                                                                    with_auroc) for c in chunks)
    else:
        parts = [_resampled_metrics(members, scores, cluster_of, c, fprs, with_auroc) for c in chunks]
    draws = [d for part in parts for d in part]
    for metric in names:
        values = np.array([d[metric] for d in draws], dtype=float)
        values = values[np.isfinite(values)]
        if values.size >= n_boot / 2:
            out[metric] = (float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975)))
    return out


def _n_clusters(n_trials: int, clusters, subjects) -> float:
    """Subject clusters the pool spans (``subjects`` if given, else the bootstrap's clusters, else trials)."""
    codes = subjects if subjects is not None else clusters
    return float(n_trials if codes is None else np.unique(np.asarray(codes)).size)


def pooled_rows(per_model: dict, n_boot: int, seed: int, scope: str, n_jobs: int = 1,
                clusters=None, subjects=None) -> tuple[list[dict], dict]:
    """Metrics of scores pooled over models (each a (member, scores) pair over the same trials, a split of its
    own) and each attack's pooled ROC for the figure.

    Per attack, one row per :data:`POOLED_METRICS`: the AUROC with its two-way bootstrap interval; the TPR at
    :data:`LOWEST_FPR` and at the lowest FPR the pool resolves on the 1-2-5 grid (:func:`resolvable_fpr`, its FPR
    in ``fpr``), each a number with its blocked threshold-bootstrap interval only where ≥ 10 independent
    non-members lie beyond its threshold (``resolvable``), else NaN with ``note`` saying what it needs and has;
    the TPR at zero false positives never resolvable (:data:`ZERO_FPR_NOTE`). Every row names its interval
    (``ci_method``), what it resamples (``ci_over``) and the subject clusters of the pool (``n_clusters``:
    distinct ``subjects``, else ``clusters``)."""
    rows, curves = [], {}
    ci_over = ("trials" if clusters is None else "subjects") + "+seeds"
    for key, groups in per_model.items():
        members, scores = _stack(groups)
        n_independent = independent_nonmembers(members)
        supported = resolvable_fpr(LOWEST_FPR, n_independent) if n_independent else float("nan")
        fprs = {m: f for m, f in ((LOWEST_TPR, LOWEST_FPR), ("tpr_at_resolvable_fpr", supported))
                if np.isfinite(f) and resolvable(f, n_independent)}
        curves[key] = roc(members.ravel(), scores.ravel())
        values = _pooled_metrics(members, scores, fprs)
        intervals = cluster_bootstrap(members, scores, clusters, fprs, n_boot, seed, n_jobs)
        common = {"ci_over": ci_over, "attack": key[0], "attacker": key[1], "scope": scope,
                  "n": float(members.size), "n_nonmembers": float((members == 0).sum()),
                  "n_independent_nonmembers": float(n_independent), "n_models": len(groups),
                  "n_clusters": _n_clusters(members.shape[1], clusters, subjects)}
        for metric in POOLED_METRICS:
            fpr = {LOWEST_TPR: LOWEST_FPR, "tpr_at_resolvable_fpr": supported, "tpr_at_zero_fpr": 0.0}.get(metric,
                                                                                                    np.nan)
            ok = metric == "auroc" or metric in fprs
            note = ("" if ok else ZERO_FPR_NOTE if metric == "tpr_at_zero_fpr"
                    else not_resolvable_note(LOWEST_FPR, n_independent))
            low, high = intervals.get(metric, (np.nan, np.nan)) if ok else (np.nan, np.nan)
            method = "none" if not ok or n_boot < 1 else AUROC_CI if metric == "auroc" else TPR_CI
            chance = chance_of(metric) if metric in ("auroc", "tpr_at_zero_fpr") else fpr
            rows.append({"metric": metric, "value": values[metric] if ok else np.nan, "ci_low": low,
                         "ci_high": high, "ci_method": method, "chance": chance,
                         "fpr": fpr if metric != "auroc" else np.nan, "resolvable": ok, "note": note, **common})
    return rows, curves


def _resampled_differences(members, attack, control_scores, cluster_of, resamples) -> np.ndarray:
    cells, counts = _resample_cells(members, resamples, cluster_of)
    member = members.ravel()
    return (auroc_replicates(attack.ravel(), member, cells, counts)
            - auroc_replicates(control_scores.ravel(), member, cells, counts))


def paired_difference(members, attack, control_scores, clusters, n_boot: int, seed: int, n_jobs: int = 1,
                      confidence: float = 0.95) -> dict:
    """The pooled AUROC of ``attack`` minus that of ``control_scores`` ((n_models, n_trials) scores of the same
    trials and member masks), paired: each of the two-way bootstrap's resamples (:func:`two_way_resamples`, the
    resamples :func:`cluster_bootstrap` draws from the same seed: target models and clusters of trials, e.g.
    subjects) pools both arms on the same models and trials. Returns ``value``, ``ci_low``/``ci_high`` (percentile),
    ``p_value`` (two-sided, "difference = 0",
    :func:`~eegprivacy.evaluation.cluster_bootstrap.bootstrap_p_value_two_sided`: a control above its attack is a
    finding too),
    its Monte-Carlo error ``p_mc_error`` and ``n_resamples`` (finite ones); NaN interval and p without resamples."""
    members = np.asarray(members).astype(int)
    attack, control_scores = np.asarray(attack, dtype=float), np.asarray(control_scores, dtype=float)
    if not members.shape == attack.shape == control_scores.shape:
        raise ValueError(f"members, attack and control must share one shape: {members.shape}, {attack.shape}, "
                         f"{control_scores.shape}")
    n_models, n_trials = members.shape
    value = auroc(members.ravel(), attack.ravel()) - auroc(members.ravel(), control_scores.ravel())
    out = {"value": float(value), "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan, "p_mc_error": np.nan,
           "n_resamples": 0}
    cluster_of = _cluster_codes(clusters, n_trials)
    if n_boot < 1 or n_models * (cluster_of.max() + 1) < 2:
        return out
    resamples = two_way_resamples(n_models, int(cluster_of.max()) + 1, n_boot, seed)
    chunks = [[resamples[i] for i in part] for part in np.array_split(np.arange(n_boot), max(1, n_jobs))]
    if n_jobs > 1:
        from joblib import Parallel, delayed

        parts = Parallel(n_jobs=n_jobs)(delayed(_resampled_differences)(members, attack, control_scores,
                                                                         cluster_of, c) for c in chunks)
    else:
        parts = [_resampled_differences(members, attack, control_scores, cluster_of, c) for c in chunks]
    draws = np.concatenate(parts)
    draws = draws[np.isfinite(draws)]
    if draws.size < n_boot / 2:
        return out
    alpha = 1.0 - float(confidence)
    p = bootstrap_p_value_two_sided(draws)
    out.update(ci_low=float(np.quantile(draws, alpha / 2)), ci_high=float(np.quantile(draws, 1 - alpha / 2)),
               p_value=p, p_mc_error=p_value_mc_error(p, draws.size), n_resamples=int(draws.size))
    return out


def control_share(attack_auroc: float, control_auroc: float) -> float:
    """How much of the attack's AUROC excess over chance its control reaches: (control − 0.5) / (attack − 0.5);
    NaN where the attack has no excess."""
    excess = float(attack_auroc) - 0.5
    return (float(control_auroc) - 0.5) / excess if excess > 0 else float("nan")


def control_difference_rows(per_model: dict, n_boot: int, seed: int, scope: str = "target_pooled", n_jobs: int = 1,
                            clusters=None, subjects=None) -> list[dict]:
    """One :data:`DIFF_METRIC` row per attack of :data:`CONTROLLED` whose control (``<attack>_control``) is in
    ``per_model`` ({(attack, attacker): [(member, scores) per model]}): attack − control of the AUROC pooled over
    models, with the paired two-way bootstrap's interval and two-sided p-value (:func:`paired_difference`), the
    attack's, the control's and (online) the untrained model's pooled AUROC beside, and ``control_share``. Holm
    is applied over a table's cells afterwards (:func:`holm_control_cells`)."""
    rows = []
    ci_over = ("trials" if clusters is None else "subjects") + "+seeds"
    untrained = per_model.get((UNTRAINED, ""))
    for attack in CONTROLLED:
        if (attack, "") not in per_model or (attack + CONTROL_SUFFIX, "") not in per_model:
            continue
        members, scores = _stack(per_model[(attack, "")])
        control_members, control_scores = _stack(per_model[(attack + CONTROL_SUFFIX, "")])
        if not np.array_equal(members, control_members):
            raise ValueError(f"{attack} and its control must score the same members of the same models")
        diff = paired_difference(members, scores, control_scores, clusters, n_boot, seed, n_jobs)
        a, c = auroc(members.ravel(), scores.ravel()), auroc(members.ravel(), control_scores.ravel())
        u = (auroc(*(x.ravel() for x in _stack(untrained))) if untrained is not None and attack == "lira_online"
             else np.nan)
        n_independent = independent_nonmembers(members)
        rows.append({"metric": DIFF_METRIC, "value": diff["value"], "ci_low": diff["ci_low"],
                     "ci_high": diff["ci_high"], "ci_method": DIFF_CI if diff["n_resamples"] else "none",
                     "chance": 0.0, "fpr": np.nan, "resolvable": True, "note": "", "ci_over": ci_over,
                     "attack": attack, "attacker": "", "scope": scope, "n": float(members.size),
                     "n_nonmembers": float((members == 0).sum()), "n_independent_nonmembers": float(n_independent),
                     "n_models": len(per_model[(attack, "")]),
                     "n_clusters": _n_clusters(members.shape[1], clusters, subjects),
                     "p_value": diff["p_value"], "p_mc_error": diff["p_mc_error"],
                     "n_resamples": float(diff["n_resamples"]), "attack_auroc": a, "control_auroc": c,
                     "untrained_auroc": u, "control_share": control_share(a, c)})
    return rows


def holm_control_cells(tidy: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Holm over the table's attack − control cells (:data:`DIFF_METRIC` rows with a p-value: every ε and attack
    of the stage, one model): ``p_holm``, ``significant`` (p_holm < ``alpha``) and ``family`` on those rows, NaN /
    empty on every other row (controls, attacks and the rest are not hypotheses of the family)."""
    tidy = tidy.copy()
    for column in ("p_value", "p_holm"):
        if column not in tidy:
            tidy[column] = np.nan
    tidy["p_holm"] = np.nan
    tidy["significant"] = pd.Series([pd.NA] * len(tidy), index=tidy.index, dtype="boolean")
    tidy["family"] = ""
    cells = (tidy["metric"] == DIFF_METRIC) & tidy["p_value"].notna()
    if cells.any():
        tidy.loc[cells, "p_holm"] = holm(tidy.loc[cells, "p_value"].to_numpy(dtype=float))
        tidy.loc[cells, "significant"] = tidy.loc[cells, "p_holm"] < alpha
        tidy.loc[cells, "family"] = f"LiRA − preprocessing-only control, Holm over {int(cells.sum())} cells"
    return tidy


def shadow_loo(phis: dict, masks: np.ndarray, eps_key: str, variance: str) -> dict:
    """Each shadow in turn as the target, LiRA fitted on the shadows outside its leave-out group (the
    :func:`loo_group_size` consecutive shadows it belongs to, all left out together): {(attack, ""): [(member,
    scores), …]}. With the balanced masks of :func:`shadow_membership` every trial is then IN (and OUT) in the same
    number of fitting shadows, so those counts say nothing about the held-out shadow's membership."""
    masks = np.asarray(masks).astype(bool)
    n = masks.shape[0]
    n_in = np.unique(masks.sum(0))
    if n_in.size != 1:
        raise ValueError("shadow-as-target needs balanced masks (every trial IN in the same number of shadows)")
    if not loo_feasible(n, int(n_in[0])):
        raise ValueError(f"{n} shadows with {int(n_in[0])} IN per trial leave fewer than two IN and two OUT per "
                         "trial once a balanced group leaves")
    g = loo_group_size(n, int(n_in[0]))
    out = {("lira_online", ""): [], ("lira_offline", ""): []}
    for j in range(n):
        rest = np.array([k for k in range(n) if k // g != j // g])
        for mode in ("online", "offline"):
            lira = LiRA(mode, variance).fit(phis[eps_key][rest], masks[rest])
            out[(f"lira_{mode}", "")].append((masks[j].astype(int), lira.score_samples(phis[eps_key][j])))
    return out


def _model_nonmembers(tidy: pd.DataFrame, part: pd.DataFrame, epsilon) -> float:
    """The fewest non-members one model of a per-model scope had: the rows' own ``n_nonmembers`` (shadow
    targets), else the cells' ``n_nonmembers`` rows at that ε (target seeds)."""
    if "n_nonmembers" in part and part["n_nonmembers"].notna().any():
        return float(part["n_nonmembers"].min())
    hit = tidy[(tidy["metric"] == "n_nonmembers") & (tidy["epsilon"] == epsilon)]
    return float(hit["value"].min()) if len(hit) else float("nan")


DIFF_COLUMNS = ("p_value", "p_mc_error", "p_holm", "significant", "family", "n_resamples", "attack_auroc",
                "control_auroc", "untrained_auroc", "control_share")


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per (ε, scope, attack, attacker, metric): per-seed/per-shadow scopes as mean and t-interval over
    models (``ci_over = seeds``, ``ci_method = t_interval``), a per-model TPR not resolvable by one model's
    non-members NaN with its ``note``; pooled scopes as their value, interval, ``ci_method``, ``n_clusters``,
    FPR, independent non-members and ``resolvable``/``note`` beside, and the attack − control cells
    (:data:`DIFF_METRIC`) their p-value, Holm p-value, family and the AUROCs beside (:data:`DIFF_COLUMNS`)."""
    rows = []
    keys = ["epsilon", "scope", "attack", "attacker", "metric"]
    frame = tidy[tidy["metric"].isin(set(METRICS) | set(POOLED_METRICS) | {DIFF_METRIC})]
    for key, part in frame.groupby(keys, dropna=False, sort=True):
        record = dict(zip(keys, key))
        if str(record["scope"]).endswith("pooled"):
            r = part.iloc[0]
            ok = bool(r.get("resolvable", True)) if pd.notna(r.get("resolvable", True)) else True
            note = r.get("note")
            record.update(value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
                          n_nonmembers=r.get("n_nonmembers"), chance=r["chance"], ci_over=r.get("ci_over"),
                          fpr=r.get("fpr", np.nan), n_independent_nonmembers=r.get("n_independent_nonmembers"),
                          ci_method=r.get("ci_method"), n_clusters=r.get("n_clusters", np.nan), resolvable=ok,
                          note=note if isinstance(note, str) else "")
            for column in DIFF_COLUMNS:  # the attack − control cells' test (NaN / empty elsewhere)
                record[column] = r.get(column, "" if column == "family" else np.nan)
        else:
            metric = record["metric"]
            fpr = float(metric.rsplit("_", 1)[1]) if metric.startswith("tpr_at_fpr_") else np.nan
            n_model = _model_nonmembers(tidy, part, record["epsilon"]) if np.isfinite(fpr) else np.nan
            ok = not np.isfinite(fpr) or (np.isfinite(n_model) and resolvable(fpr, int(n_model)))
            mean, low, high = mean_ci(part["value"].to_numpy(dtype=float)) if ok else (np.nan,) * 3
            low, high = max(low, 0.0), min(high, 1.0)  # every metric here is a rate in [0, 1]
            record.update(value=mean, ci_low=low, ci_high=high, n=float(part["value"].notna().sum()),
                          n_nonmembers=n_model, chance=float(part["chance"].iloc[0]), ci_over="seeds", fpr=fpr,
                          n_independent_nonmembers=n_model, ci_method="t_interval" if ok else "none",
                          n_clusters=np.nan, resolvable=ok,
                          note="" if ok else not_resolvable_note(fpr, int(n_model) if np.isfinite(n_model) else 0,
                                                                 what=" per model"))
        rows.append(record)
    return pd.DataFrame(rows)


# ---- the study: shadows, target cells, pooled rows -----------------------------------------------------------------

@dataclass
class Plan:
    """One ε's target cells and the sweep runner (MLflow parent run, cell cache) that computes them."""

    epsilon: float
    mechanism: str
    name: str
    runner: SweepRunner
    cells: list


class LiRAStudy:
    """LiRA and RLA on one dataset: the shadows' φ, each ε's target cells (each on its own member split) and what
    is pooled over them. ``training`` holds the target's knobs (the shadows share them), ``spec`` the dataset's
    spec in it, ``code`` the stage's code hash (part of every cache key). Reads the trials and draws every
    target's member split and the shadows' IN masks."""

    def __init__(self, config: FederatedLiRAConfig, training: FederatedMIAConfig, dataset: str, spec: DatasetSpec,
                 cells_dir: Path, code: str, progress: bool = True):
        from eegprivacy.signal.csp import MODEL_INPUT

        self.config, self.training, self.dataset, self.spec = config, training, dataset, spec
        self.code, self.progress = code, progress
        loaded, self.trials = mia.load_trials(dataset, spec)
        self.version, self.synthetic = loaded.version(), bool(self.trials.synthetic)
        self.output = MODEL_INPUT[config.model]
        self.epsilons = [float(e) for e in config.epsilons]
        subjects = self.trials.metadata["subject"]
        self.target_members = np.stack([target_member(self.trials, training, seed)
                                        for seed in range(config.target_seeds)])
        # Subjects (= clients) as codes for the cluster bootstrap and the pooled rows' n_clusters; the ids
        # themselves stay here.
        self.subject_codes = np.unique(subjects.astype(str).to_numpy(), return_inverse=True)[1]
        self.clusters = self.subject_codes if config.bootstrap_unit == "subjects" else None
        self.masks = shadow_membership(self.trials.y, subjects.to_numpy(), config.n_shadows, config.shadow_seed,
                                       config.shadow_in_fraction)
        self.knobs = {k: getattr(training, k) for k in TRAINING_KNOBS}
        self.attack_knobs = {k: getattr(config, k) for k in ATTACK_KNOBS}
        self.root = cells_dir / STAGE / dataset / config.model
        self.scores_dir = self.root / "scores"
        self.shadow_key = config_key({
            "dataset_version": self.version, "code_hash": code, "paradigm": spec.paradigm_text(),
            "model": config.model, "epsilons": [epsilon_key(e) for e in self.epsilons], **self.knobs,
            "n_shadows": config.n_shadows, "shadow_seed": config.shadow_seed,
            "shadow_in_fraction": config.shadow_in_fraction})
        self.phis: dict = {}
        self.curves: dict = {}
        self.parent_metrics: dict = {}
        self._diff_runs: dict = {}  # (ε, attack) -> (MLflow parent run, metric name) of the attack − control cells

    def train_shadows(self) -> None:
        """The shadows' φ at every ε (cached under a key of everything they depend on)."""
        self.phis = shadow_phis(self.trials, self.masks, self.config, self.training, self.epsilons, self.output,
                                self.root / f"shadows-{self.shadow_key}.npz")

    def _tags(self, seed, eps: float, mechanism: str) -> dict:
        return required_tags(study="b", stage=STAGE, dataset=self.dataset, dataset_version=self.version,
                             synthetic=self.synthetic, seed=seed, dvc_stage=STAGE, model=self.config.model,
                             epsilon=epsilon_key(eps), mechanism=mechanism, attack="lira,rla",
                             split="per_subject_80_20_per_target")

    def plans(self) -> list[Plan]:
        """Each ε's target cells (seeds 0..target_seeds-1) with its runner, in the order they run."""
        config = self.config
        base = {"dataset_version": self.version, "code_hash": self.code, "shadow_key": self.shadow_key,
                "model": config.model, "attackers": ",".join(config.attackers), "paradigm": self.spec.paradigm_text(),
                **self.knobs, **self.attack_knobs}
        plans = []
        for eps in self.epsilons:
            mechanism = mia.mechanism(eps)
            cells = expand_grid({"epsilon": [eps], "mechanism": [mechanism]}, seeds=range(config.target_seeds),
                                base=base)
            name = f"{STAGE}-{self.dataset}-{config.model}-eps{eps:g}"
            runner = SweepRunner(name=name, study="b", dataset=self.dataset, out_dir=self.root / f"eps{eps:g}",
                                 parent_tags=self._tags(None, eps, mechanism),
                                 tags_fn=lambda cell, eps=eps, m=mechanism: self._tags(cell.seed, eps, m),
                                 params={STAGE: {**self.knobs, **self.attack_knobs, "model": config.model,
                                                 "epsilon": eps, "attackers": config.attackers,
                                                 "epsilon_scope": NOTE}, "synthetic": self.synthetic},
                                 progress=self.progress)
            plans.append(Plan(eps, mechanism, name, runner, cells))
        return plans

    def run_targets(self, plans: list[Plan]) -> list[pd.DataFrame]:
        """The target cells of every ε in ``workers`` processes, like the shadows (each is a function of its seed
        alone)."""
        context = TargetContext(self.config, self.training, self.trials, self.output, self.phis, self.masks,
                                self.scores_dir)
        return run_prefetched([(p.runner, p.cells) for p in plans], functools.partial(target_cell, ctx=context),
                              n_jobs=self.config.workers)

    def _saved_scores(self, plan: Plan) -> dict:
        """{(attack, attacker): [(member, scores) per target seed]} from the files the cells left (each target's
        own split beside its scores)."""
        per_model: dict = {}
        for cell in plan.cells:
            path = self.scores_dir / f"{cell.key}.npz"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing while its cell's rows are cached; delete "
                                        f"{plan.runner.out_dir} and run the stage again")
            with np.load(path) as saved:
                member = saved[MEMBER_KEY].astype(int)
                for k in saved.files:
                    if k != MEMBER_KEY:
                        per_model.setdefault(tuple(k.split("|")), []).append((member, saved[k]))
        return per_model

    def pooled(self, plan: Plan) -> pd.DataFrame:
        """One ε's rows pooled over target seeds, and shadow-as-target (per shadow and pooled); their ROC curves
        go to ``curves``, the pooled numbers to ``parent_metrics``."""
        config, key = self.config, epsilon_key(plan.epsilon)
        saved = self._saved_scores(plan)
        rows, roc_t = pooled_rows(saved, config.bootstrap, config.shadow_seed, "target_pooled", config.workers,
                                  self.clusters, self.subject_codes)
        rows += control_difference_rows(saved, config.bootstrap, config.shadow_seed, "target_pooled", config.workers,
                                        self.clusters, self.subject_codes)
        # Shadow-as-target needs two IN and two OUT values per trial once a balanced group leaves (loo_feasible).
        loo = shadow_loo(self.phis, self.masks, key, config.lira_variance) if self.loo_runs() else {}
        rows_l, roc_l = pooled_rows(loo, config.bootstrap, config.shadow_seed, "shadow_loo_pooled", config.workers,
                                    self.clusters, self.subject_codes)
        for attack, groups in loo.items():  # per shadow target, like the per-seed rows of the real targets
            for j, (m, s) in enumerate(groups):
                rows_l += [{**r, "shadow": j, "n_nonmembers": float((m == 0).sum())}
                           for r in score_rows(m.astype(bool), {attack: s}, scope="shadow_loo")]
        extra = pd.DataFrame(rows + rows_l)
        extra["epsilon"], extra["mechanism"], extra["model"] = plan.epsilon, plan.mechanism, config.model
        for (attack, attacker), c in roc_t.items():
            if attack != UNTRAINED and not attack.endswith(CONTROL_SUFFIX):  # the figure: the attacks
                self.curves[("target_pooled", key, attack, attacker)] = c
        for (attack, attacker), c in roc_l.items():
            self.curves[("shadow_loo", key, attack, attacker)] = c
        for r in rows + [r for r in rows_l if r["scope"] == "shadow_loo_pooled"]:
            if not (r["resolvable"] and np.isfinite(r["value"])):  # an unresolvable cell is no number in MLflow
                continue
            name = f"{r['scope']}/{r['attack']}{'_' + r['attacker'] if r['attacker'] else ''}/{r['metric']}"
            metrics = self.parent_metrics.setdefault(plan.name, {})
            metrics[name] = r["value"]
            if r["metric"] == "tpr_at_resolvable_fpr":
                metrics[f"{name}_fpr"] = r["fpr"]
            if r["metric"] == DIFF_METRIC:
                for column in ("ci_low", "ci_high", "p_value", "control_share"):
                    if np.isfinite(r[column]):
                        metrics[f"{name}_{column}"] = r[column]
                self._diff_runs[(plan.epsilon, r["attack"])] = (plan.name, name)
        return extra

    def loo_runs(self) -> bool:
        """Whether the shadow-as-target check runs (:func:`loo_feasible`)."""
        return loo_feasible(self.masks.shape[0], shadow_in_count(self.masks.shape[0], self.config.shadow_in_fraction))

    def tidy(self, frames: list[pd.DataFrame], pooled: list[pd.DataFrame]) -> pd.DataFrame:
        """The target cells' rows, then the pooled and shadow-as-target rows."""
        extra = pd.concat(pooled, ignore_index=True)
        extra["study"], extra["dataset"] = "b", self.dataset
        tidy = pd.concat([pd.concat(frames, ignore_index=True), extra], ignore_index=True)
        tidy["synthetic"] = self.synthetic
        for column in ("attack", "attacker"):
            tidy[column] = tidy[column].fillna("")
        tidy = holm_control_cells(tidy)
        cells = tidy[(tidy["metric"] == DIFF_METRIC) & tidy["p_holm"].notna()]
        for r in cells.to_dict("records"):  # Holm needs every ε's cell: logged once all are pooled
            run, name = self._diff_runs.get((r["epsilon"], r["attack"]), (None, None))
            if run is not None:
                self.parent_metrics.setdefault(run, {})[f"{name}_p_holm"] = float(r["p_holm"])
        return tidy

    def meta(self) -> dict:
        """What the report and the headline JSON say about the run."""
        config, training = self.config, self.training
        members = self.target_members
        return {"dataset": self.dataset, "model": config.model, "synthetic": self.synthetic,
                "split_seed": training.split_seed, "n_trials": int(members.shape[1]),
                "n_members": int(members[0].sum()), "n_nonmembers": int((~members[0]).sum()),
                "n_independent_nonmembers": independent_nonmembers(members),
                "n_clients": len(self.trials.subjects()), "bootstrap_unit": config.bootstrap_unit,
                "target_seeds": config.target_seeds, "n_shadows": config.n_shadows,
                "shadow_in_fraction": config.shadow_in_fraction,
                "shadow_in_count": shadow_in_count(config.n_shadows, config.shadow_in_fraction),
                "loo_group": loo_group_size(config.n_shadows, shadow_in_count(config.n_shadows,
                                                                              config.shadow_in_fraction)),
                "min_beyond": MIN_BEYOND, "lira_variance": config.lira_variance,
                "control_folds": config.control_folds, "alpha": ALPHA,
                "attack_folds": config.attack_folds, "epsilons": self.epsilons,
                "training": ", ".join(f"{k} {getattr(training, k)}" for k in (
                    "num_rounds", "local_epochs", "clients_per_round", "batch_size", "learning_rate", "clip_norm"))}
