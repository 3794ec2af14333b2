"""One target cell (:func:`target_cell`): a target federation on its own member split, its preprocessing-only
control, LiRA online and offline, the untrained model and the record-level attacks, with the per-trial scores saved
for the pooled rows; and each shadow in turn as a target (:func:`shadow_loo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eegprivacy.attacks.lira import LiRA, logit_confidence
from eegprivacy.attacks.reference import REFERENCE_ATTACKS, feasible, fit_attack, score_attack
from eegprivacy.attacks.membership import RecordLevelAttack, record_features
from eegprivacy.pipeline.keys import config_key, epsilon_key
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.lira.config import CONTROL_SUFFIX, UNTRAINED, FederatedLiRAConfig
from eegprivacy.studies.federated.lira.design import loo_feasible, loo_group_size
from eegprivacy.studies.federated.lira.federations import (
    _federate,
    _initial_weights,
    _save_npz,
    client_index,
    control_phi,
    trial_logits,
)
from eegprivacy.studies.federated.lira.scoring import score_rows


def target_member(trials, training: FederatedMIAConfig, seed: int) -> np.ndarray:
    """Target ``seed``'s member mask: its own per-subject 80/20 split, drawn from ``split_seed`` and the target
    index exactly as ``federated_mia``'s cell of that seed draws it (:func:`~eegprivacy.studies.federated.mia.
    seed_split`), so that pooling over targets pools over splits, not over one split's trials only."""
    return mia.seed_split(trials, training, int(seed))


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
    groups: np.ndarray  # each trial's subject as a code: RMIA's population excludes the trial's own subject


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


def attack_key(name: str, k: int | None) -> str:
    """The rows' name of a reference attack on k references: ``rmia_offline`` (all), ``rmia_offline_k2``."""
    return name if k is None else f"{name}_k{int(k)}"


def references_of(key: str) -> int | None:
    """k of an :func:`attack_key` (``rmia_offline_k2`` → 2; None for all references or another row)."""
    base, _, k = key.removesuffix(CONTROL_SUFFIX).rpartition("_k")
    return int(k) if base in REFERENCE_ATTACKS and k.isdigit() else None


def reference_counts(config: FederatedLiRAConfig, name: str, masks) -> list[int | None]:
    """The reference counts attack ``name`` runs at: every ``reference_counts`` k that is at least what it needs,
    below the shadows' number and that every trial's IN/OUT shadows can fill (:func:`~eegprivacy.attacks.reference.
    feasible`), then all (None); an attack that reads no reference, all only."""
    entry = REFERENCE_ATTACKS[name]
    if entry.min_references == 0:
        return [None]
    return [int(k) for k in config.reference_counts if entry.min_references <= int(k) < int(config.n_shadows)
            and feasible(masks, int(k), entry.offline)] + [None]


def reference_scores(config: FederatedLiRAConfig, phi_shadow, masks, phi, phi_control, member, groups) -> dict:
    """Every registry attack (:data:`~eegprivacy.attacks.reference.REFERENCE_ATTACKS`) at every reference count,
    on the target and its preprocessing-only control alike (one fit on the shadows scores both); RMIA's population
    points are the target's non-members of other subjects."""
    scores, options = {}, {"lira_variance": config.lira_variance}
    for name in REFERENCE_ATTACKS:
        for k in reference_counts(config, name, masks):
            fitted = fit_attack(name, phi_shadow, masks, k, options)
            key = attack_key(name, k)
            scores[(key, "")] = score_attack(name, fitted, phi, ~member, groups)
            scores[(key + CONTROL_SUFFIX, "")] = score_attack(name, fitted, phi_control, ~member, groups)
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
    scores = reference_scores(config, shadows[epsilon_key(eps)], masks, phi, phi_c, member, ctx.groups)
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

