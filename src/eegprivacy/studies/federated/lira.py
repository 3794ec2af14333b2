"""Study B, strongest attack: LiRA with shadow federations, to ask whether per-step DP still looks protective
against the strongest membership attack we can mount on the federated model.

Shadow federations go through exactly the target's pipeline (:class:`~eegprivacy.studies.federated.mia.Federation`
and :func:`~eegprivacy.studies.federated.mia.federate`, training knobs read from ``params/federated_mia.yaml``):
one client per subject, each client's CSP fitted on its own training trials, FedAvg with the same rounds, epochs,
sampling, learning rate and DP. Shadows train on ``shadow_in_fraction`` of every (subject, label) group of trials
(default 0.8, the target's member share: at 0.5, Carlini et al.'s complementary halves, each client's
member-fitted CSP differs between shadows and target and the untrained control fell below chance, AUROC 46 %; at
0.8 it sits at 50 %); CSP, like the model, sees only the IN trials. One set of shadows per ε serves every target
seed.

Targets are federations built exactly as ``federated_mia``'s, one per target seed 0..S-1, and each draws its
own per-subject 80/20 member split of every client's trials, seeded by the target index exactly as
``federated_mia``'s seed is (:func:`target_member`): a pooled score is then about many splits, not one, and the
non-members of the S targets together cover most trials. LiRA itself never reads the target's split: its IN/OUT
fits come from the shadows' random IN masks alone, the same for every target. Every trial is scored through its
client's CSP, fitted on that target's members, then the global model. Attacks
on each target:

- ``lira_online`` / ``lira_offline``: :class:`~eegprivacy.attacks.lira.LiRA` on φ = logit confidence of the
  true label under the final global model, against the shadows' φ of the same trial.
- ``rla`` with ``lr``/``rf``/``mlp`` attackers: [p0, p1, loss] trained on the target's own member labels,
  cross-fitted (k folds) so that every trial is scored by an attacker that never saw its label.
- ``lira_online_untrained_control``: LiRA on the untrained initial models (target and shadows alike). Each
  client's CSP and scaling are fitted on its members; this control measures what that pipeline alone leaks.

Scores: per target seed AUROC, TPR at 1 % FPR and TPR at zero false positives (too few non-members per target
for 0.1 %), mean and t-interval over target seeds (``ci_over = seeds``). Pooled over the S target models: the
AUROC, the TPR at zero false positives and the TPR at the lowest FPR the pool can resolve
(``tpr_at_resolvable_fpr``, its FPR in ``fpr``), with a two-way bootstrap interval that resamples target models and
clusters of trials (``bootstrap_unit``: subjects = clients, the default, or single trials; ``ci_over`` says which).
Resolvable means at least 1/FPR *independent* non-members: distinct trials that were a non-member of at least one
target, each counted once however many targets held it out (:func:`independent_nonmembers`); pooling S models
over the same trial does not multiply what a false-positive rate can rest on. Below 1/0.001 independent
non-members the TPR is reported at the smallest resolvable FPR on a 1-2-5 grid (:func:`resolvable_fpr`), named.
Shadow-as-target (``scope = shadow_loo``): each shadow pair in turn is the target of LiRA fitted on the other
shadows, the shadows' own membership game (IN share ``shadow_in_fraction``), pooled under the same rule.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.attacks.lira import VARIANCES, LiRA, logit_confidence
from eegprivacy.attacks.membership import ATTACKERS, RecordLevelAttack, record_features
from eegprivacy.attacks.metrics import attack_summary, auroc, roc, tpr_at_fpr
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.params import Config, param
from eegprivacy.pipeline.sweep import SweepRunner, config_key, expand_grid, run_prefetched
from eegprivacy.reporting.format import epsilon_key
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig
from eegprivacy.tracking import required_tags
from eegprivacy.validation import EPSILONS_OR_INF, FRACTION_OPEN, Constraint, count, options, subset_of

STAGE = "federated_lira"
FPRS = (0.01, 0.001)
METRICS = ("auroc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "tpr_at_zero_fpr")  # per model
LOWEST_FPR = min(FPRS)  # the pooled TPR's target FPR, reported only where resolvable (else the next one that is)
POOLED_METRICS = ("auroc", "tpr_at_resolvable_fpr", "tpr_at_zero_fpr")
BOOTSTRAP_UNITS = ("subjects", "trials")
TRAINING_KNOBS = ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
                  "local_epochs", "learning_rate", "batch_size")  # read from federated_mia: shadows = targets
ATTACK_KNOBS = ("n_shadows", "shadow_seed", "target_seeds", "rf_estimators", "attack_folds", "lira_variance",
                "bootstrap", "bootstrap_unit", "shadow_in_fraction")  # what the attack rows depend on (not ``workers``)
NOTE = mia.NOTE


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
    n_shadows: int = param(EvenCount(4, "an even whole number ≥ 4 (the shadow-as-target check leaves pairs out)"))
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
                                                                      "trains on (0.5: complementary halves)")
    bootstrap_unit: str = param(options(BOOTSTRAP_UNITS, "subjects or trials"), default="subjects",
                                doc="the cluster the pooled bootstrap resamples with the target models: subjects "
                                    "(= clients; trials of one client share its CSP and model) or single trials")


# ---- the shadows -----------------------------------------------------------------------------------------------

def shadow_membership(y, subjects, n_shadows: int, seed: int, in_fraction: float = 0.5) -> np.ndarray:
    """(n_shadows, n_trials) IN mask, drawn within every (subject, label) group so each shadow client keeps
    both classes (its CSP needs them).

    ``in_fraction = 0.5``: shadow 2k takes a random half of each group (the odd trial to either side by a coin)
    and shadow 2k+1 the rest, so every trial is IN in exactly n_shadows/2 shadows (Carlini et al.'s design).
    Any other fraction: the groups are cut into blocks of the OUT share and shadows take turns leaving one
    block out (a fresh permutation per cycle), so every shadow trains on about ``in_fraction`` of each client's
    trials, like the target (1 − test_size), and every trial is OUT in about (1 − in_fraction)·n_shadows."""
    y = np.asarray(y).ravel()
    subjects = np.asarray(subjects).ravel()
    rng = np.random.default_rng(int(seed))
    mask = np.zeros((int(n_shadows), y.size), dtype=bool)
    groups = sorted({(str(s), str(c)) for s, c in zip(subjects, y)})
    if not 0.0 < float(in_fraction) < 1.0:
        raise ValueError(f"in_fraction must lie strictly between 0 and 1, got {in_fraction!r}")
    if float(in_fraction) == 0.5:
        for pair in range(int(n_shadows) // 2):
            for subject, label in groups:
                rows = np.flatnonzero((subjects.astype(str) == subject) & (y.astype(str) == label))
                order = rng.permutation(rows)
                half = rows.size // 2 + (int(rng.integers(2)) if rows.size % 2 else 0)
                mask[2 * pair, order[:half]] = True
                mask[2 * pair + 1, order[half:]] = True
        return mask
    n_blocks = max(2, round(1.0 / (1.0 - float(in_fraction))))
    for subject, label in groups:
        rows = np.flatnonzero((subjects.astype(str) == subject) & (y.astype(str) == label))
        for j in range(int(n_shadows)):
            if j % n_blocks == 0:
                blocks = np.array_split(rng.permutation(rows), n_blocks)
            mask[j, rows] = True
            mask[j, blocks[j % n_blocks]] = False
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
    local (FedBN), its own client's statistics ``locals_[c]`` (see :func:`mia.client_locals`), in trial order."""
    locals_ = locals_ if locals_ is not None else [None] * len(fed.clients)
    parts = [task.logits(weights, X.reshape(len(X), -1), local=local) if local is not None
             else task.logits(weights, X.reshape(len(X), -1))
             for (Xm, _, Xn, _), local in zip(fed.clients, locals_) for X in (Xm, Xn)]
    out = np.empty((order.size, task.classes.size))
    out[order] = np.concatenate(parts)
    return out


def _initial_weights(result):
    """The untrained global model the first round was sent (the same at every ε for one seed)."""
    return result.sent[min(result.sent)]


def _federate(model: str, eps: float, seed: int, fed: mia.Federation, training: FederatedMIAConfig):
    return mia.federate({"model": model, "epsilon": eps}, seed, fed, training)


def _train_shadows(indices, trials, masks, config: FederatedLiRAConfig, training: FederatedMIAConfig, epsilons,
                   output: str) -> dict:
    """φ of every trial under shadows ``indices`` at every ε, and under their untrained initial models."""
    out = {}
    y = None
    for j in indices:
        fed = mia.Federation(trials, masks[j], output, training.csp_components)
        order = client_index(trials, masks[j])
        seed = config.shadow_seed + int(j)
        phis = {}
        for eps in epsilons:
            task, result = _federate(config.model, eps, seed, fed, training)
            y = task._targets(trials.y).numpy() if y is None else y
            phis[epsilon_key(eps)] = logit_confidence(trial_logits(task, result.weights, fed, order,
                                                                    mia.client_locals(result, len(fed.clients))), y)
            if "untrained" not in phis:
                phis["untrained"] = logit_confidence(trial_logits(task, _initial_weights(result), fed, order,
                                                                     mia.client_locals(result, len(fed.clients), 0)), y)
        out[int(j)] = phis
    return out


def shadow_phis(trials, masks, config: FederatedLiRAConfig, training: FederatedMIAConfig, epsilons, output: str,
                cache: Path) -> dict:
    """{"inf"/"5"/…/"untrained": (n_shadows, n_trials) φ}, trained in ``workers`` processes (each shadow's
    numbers depend only on its own seed and mask, so the split over processes does not change them) and cached
    on disk under a key of everything they depend on."""
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


def resolvable_fpr(fpr: float, n_independent: int) -> float:
    """``fpr`` if ``n_independent`` non-members resolve it (n ≥ 1/fpr), else the smallest FPR on the 1-2-5 grid
    (…, 0.001, 0.002, 0.005, 0.01, …) that they do: a TPR at FPR f needs at least 1/f independent negatives below
    its threshold for f to mean anything."""
    if not 0.0 < float(fpr) < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr!r}")
    n = int(n_independent)
    if n < 1:
        raise ValueError("no independent non-member: no false-positive rate can be resolved")
    if n * float(fpr) >= 1.0 - 1e-12:
        return float(fpr)
    floor = 1.0 / n
    exponent = int(np.floor(np.log10(floor)))
    for step in (1.0, 2.0, 5.0, 10.0):
        candidate = float(f"{step * 10.0 ** exponent:.12g}")
        if candidate * n >= 1.0 - 1e-12:
            return min(candidate, 1.0)
    return 1.0  # unreachable: 10 · 10^⌊log10(1/n)⌋ ≥ 1/n


# ---- scoring ---------------------------------------------------------------------------------------------------

def zero_fpr_tpr(member, scores) -> float:
    """Share of members scored strictly above every non-member (ties count against the attacker)."""
    member = np.asarray(member).astype(bool)
    return float((scores[member] > scores[~member].max()).mean())


def chance_of(metric: str) -> float:
    """What a blind attacker scores: AUROC 0.5, TPR at x FPR = x, TPR at zero false positives 0."""
    return 0.5 if metric == "auroc" else 0.0 if metric == "tpr_at_zero_fpr" else float(metric.rsplit("_", 1)[1])


def _metrics(member, scores) -> dict[str, float]:
    out = attack_summary(member, scores, FPRS)
    out["tpr_at_zero_fpr"] = zero_fpr_tpr(member, scores)
    return out


def score_rows(member, scores: dict, **extra) -> list[dict]:
    rows = []
    for (attack, attacker), s in scores.items():
        summary = _metrics(member, s)
        for metric in METRICS:
            rows.append({"metric": metric, "value": summary[metric], "chance": chance_of(metric), "attack": attack,
                         "attacker": attacker, "n": summary["n_members"] + summary["n_nonmembers"], **extra})
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
    """One target federation at one ε on its own member split (:func:`target_member`): LiRA online/offline, the
    untrained control and the RLAs; the per-trial scores and the split go beside the cell's rows for the pooled
    metrics and the ROC figure. LiRA's fits read only the shadows (their φ and random IN masks), never the
    target's split, so the online IN/OUT comparison is the same whichever split a target drew."""
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
    shadows, masks, variance = ctx.phis, ctx.masks, config.lira_variance
    scores = {("lira_online", ""): LiRA("online", variance).fit(shadows[epsilon_key(eps)], masks).score_samples(phi),
              ("lira_offline", ""): LiRA("offline", variance).fit(shadows[epsilon_key(eps)], masks).score_samples(phi),
              ("lira_online_untrained_control", ""):
                  LiRA("online", variance).fit(shadows["untrained"], masks).score_samples(phi0)}
    scores.update(_rla_scores(config, logits, y, member, seed))
    rows = score_rows(member, scores, scope="target_seed")
    nonmember = ~member
    rows += [{"metric": "utility_accuracy_nonmembers", "value": float((logits[nonmember].argmax(1)
                                                                        == y[nonmember]).mean()), "chance": 0.5},
             {"metric": "phi_gap", "value": float(phi[member].mean() - phi[nonmember].mean())},
             {"metric": "n_members", "value": float(member.sum())},
             {"metric": "n_nonmembers", "value": float(nonmember.sum())}]
    _save_npz(ctx.scores_dir / f"{config_key({**cell, 'seed': seed})}.npz",
              {MEMBER_KEY: member, **{f"{a}|{b}": s for (a, b), s in scores.items()}})
    return rows


# ---- pooled over target models, and shadow-as-target -----------------------------------------------------------

def _pooled_metrics(members: np.ndarray, scores: np.ndarray, fpr: float) -> dict[str, float]:
    """AUROC, TPR at ``fpr`` and TPR at zero false positives of (n_models, n_trials) scores pooled."""
    member, score = members.ravel().astype(int), scores.ravel()
    if member.min() == member.max():  # a resample without members or without non-members
        return {m: float("nan") for m in POOLED_METRICS}
    return {"auroc": auroc(member, score), "tpr_at_resolvable_fpr": tpr_at_fpr(member, score, fpr),
            "tpr_at_zero_fpr": zero_fpr_tpr(member, score)}


def _stack(groups: list) -> tuple[np.ndarray, np.ndarray]:
    """(n_models, n_trials) member masks and scores from [(member, scores) per model]."""
    members = np.stack([np.asarray(g[0]).astype(int).ravel() for g in groups])
    scores = np.stack([np.asarray(g[1], dtype=float).ravel() for g in groups])
    if members.shape != scores.shape:
        raise ValueError(f"every model needs one member flag per score: {members.shape} vs {scores.shape}")
    return members, scores


def _resampled_metrics(members, scores, cluster_rows, resamples, fpr: float) -> list[dict[str, float]]:
    out = []
    for models, clusters in resamples:
        trials = np.concatenate([cluster_rows[c] for c in clusters])
        out.append(_pooled_metrics(members[models][:, trials], scores[models][:, trials], fpr))
    return out


def cluster_bootstrap(members, scores, clusters, fpr: float, n_boot: int, seed: int,
                      n_jobs: int = 1) -> dict[str, tuple[float, float]]:
    """Percentile 95 % interval of every pooled metric from a two-way bootstrap: each resample draws the models
    with replacement and, independently, the clusters of trials (``clusters``: one code per trial, e.g. its
    subject; ``None`` = every trial its own cluster), and pools every drawn model's scores on every drawn
    cluster's trials. Resampling the models alone (the old interval) treats the trials as fixed and so ignores
    the uncertainty that matters most when few distinct trials are held out. NaN when fewer than half the
    resamples give a finite value; the resamples are drawn here, in order, so ``n_jobs`` does not move it."""
    out = {m: (float("nan"), float("nan")) for m in POOLED_METRICS}
    n_models, n_trials = members.shape
    codes = np.arange(n_trials) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    if codes.size != n_trials:
        raise ValueError(f"{codes.size} cluster codes for {n_trials} trials")
    cluster_rows = [np.flatnonzero(codes == c) for c in range(codes.max() + 1)]
    if n_boot < 1 or n_models * len(cluster_rows) < 2:
        return out
    from joblib import Parallel, delayed

    rng = np.random.default_rng(seed)
    resamples = [(rng.integers(0, n_models, n_models), rng.integers(0, len(cluster_rows), len(cluster_rows)))
                 for _ in range(n_boot)]
    chunks = [[resamples[i] for i in part] for part in np.array_split(np.arange(n_boot), max(1, n_jobs))]
    draws = [d for part in Parallel(n_jobs=n_jobs)(
        delayed(_resampled_metrics)(members, scores, cluster_rows, c, fpr) for c in chunks) for d in part]
    for metric in POOLED_METRICS:
        values = np.array([d[metric] for d in draws], dtype=float)
        values = values[np.isfinite(values)]
        if values.size >= n_boot / 2:
            out[metric] = (float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975)))
    return out


def pooled_rows(per_model: dict, n_boot: int, seed: int, scope: str, n_jobs: int = 1,
                clusters=None) -> tuple[list[dict], dict]:
    """Metrics of scores pooled over models (each a (member, scores) pair over the same trials, a split of its
    own), at the lowest FPR their independent non-members resolve (:func:`resolvable_fpr`), with a two-way
    bootstrap interval over models and ``clusters`` of trials (``None``: single trials; :func:`cluster_bootstrap`);
    returns rows and each attack's pooled ROC for the figure."""
    rows, curves = [], {}
    ci_over = ("trials" if clusters is None else "subjects") + "+seeds"
    for key, groups in per_model.items():
        members, scores = _stack(groups)
        n_independent = independent_nonmembers(members)
        fpr = resolvable_fpr(LOWEST_FPR, n_independent)
        curves[key] = roc(members.ravel(), scores.ravel())
        values = _pooled_metrics(members, scores, fpr)
        intervals = cluster_bootstrap(members, scores, clusters, fpr, n_boot, seed, n_jobs)
        for metric in POOLED_METRICS:
            rows.append({"metric": metric, "value": values[metric], "ci_low": intervals[metric][0],
                         "ci_high": intervals[metric][1], "ci_over": ci_over,
                         "chance": fpr if metric == "tpr_at_resolvable_fpr" else chance_of(metric),
                         "fpr": fpr if metric == "tpr_at_resolvable_fpr" else np.nan, "attack": key[0],
                         "attacker": key[1], "scope": scope, "n": float(members.size),
                         "n_nonmembers": float((members == 0).sum()),
                         "n_independent_nonmembers": float(n_independent), "n_models": len(groups)})
    return rows, curves


def shadow_loo(phis: dict, masks: np.ndarray, eps_key: str, variance: str) -> dict:
    """Each shadow pair in turn as the target, LiRA fitted on all other shadows: {(attack, ""): [(member,
    scores), …]}. Both members of the pair leave, so the remaining IN/OUT counts say nothing about the target."""
    out = {("lira_online", ""): [], ("lira_offline", ""): []}
    n = masks.shape[0]
    for j in range(n):
        rest = np.array([k for k in range(n) if k // 2 != j // 2])
        for mode in ("online", "offline"):
            lira = LiRA(mode, variance).fit(phis[eps_key][rest], masks[rest])
            out[(f"lira_{mode}", "")].append((masks[j].astype(int), lira.score_samples(phis[eps_key][j])))
    return out


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per (ε, scope, attack, attacker, metric): per-seed/per-shadow scopes as mean and t-interval over
    models (``ci_over = seeds``), pooled scopes as their value and two-way bootstrap interval (``ci_over``
    ``subjects+seeds`` or ``trials+seeds``), their FPR and independent non-members beside."""
    rows = []
    keys = ["epsilon", "scope", "attack", "attacker", "metric"]
    frame = tidy[tidy["metric"].isin(set(METRICS) | set(POOLED_METRICS))]
    for key, part in frame.groupby(keys, dropna=False, sort=True):
        record = dict(zip(keys, key))
        if str(record["scope"]).endswith("pooled"):
            r = part.iloc[0]
            record.update(value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
                          n_nonmembers=r.get("n_nonmembers"), chance=r["chance"], ci_over=r.get("ci_over"),
                          fpr=r.get("fpr", np.nan), n_independent_nonmembers=r.get("n_independent_nonmembers"))
        else:
            mean, low, high = mean_ci(part["value"].to_numpy(dtype=float))
            low, high = max(low, 0.0), min(high, 1.0)  # every metric here is a rate in [0, 1]
            record.update(value=mean, ci_low=low, ci_high=high, n=float(part["value"].notna().sum()),
                          n_nonmembers=np.nan, chance=float(part["chance"].iloc[0]), ci_over="seeds",
                          fpr=np.nan, n_independent_nonmembers=np.nan)
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
        # Subjects (= clients) as codes for the cluster bootstrap; the ids themselves stay here.
        self.clusters = (np.unique(subjects.astype(str).to_numpy(), return_inverse=True)[1]
                         if config.bootstrap_unit == "subjects" else None)
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
        rows, roc_t = pooled_rows(self._saved_scores(plan), config.bootstrap, config.shadow_seed, "target_pooled",
                                  config.workers, self.clusters)
        # Shadow-as-target needs two IN and two OUT values per trial once a pair leaves: six shadows or more.
        loo = shadow_loo(self.phis, self.masks, key, config.lira_variance) if self.masks.shape[0] >= 6 else {}
        rows_l, roc_l = pooled_rows(loo, config.bootstrap, config.shadow_seed, "shadow_loo_pooled", config.workers,
                                    self.clusters)
        for attack, groups in loo.items():  # per shadow target, like the per-seed rows of the real targets
            for j, (m, s) in enumerate(groups):
                rows_l += [{**r, "shadow": j} for r in score_rows(m.astype(bool), {attack: s}, scope="shadow_loo")]
        extra = pd.DataFrame(rows + rows_l)
        extra["epsilon"], extra["mechanism"], extra["model"] = plan.epsilon, plan.mechanism, config.model
        for (attack, attacker), c in roc_t.items():
            if attack != "lira_online_untrained_control":
                self.curves[("target_pooled", key, attack, attacker)] = c
        for (attack, attacker), c in roc_l.items():
            self.curves[("shadow_loo", key, attack, attacker)] = c
        for r in rows + [r for r in rows_l if r["scope"] == "shadow_loo_pooled"]:
            self.parent_metrics.setdefault(plan.name, {})[
                f"{r['scope']}/{r['attack']}{'_' + r['attacker'] if r['attacker'] else ''}/{r['metric']}"] = r["value"]
        return extra

    def tidy(self, frames: list[pd.DataFrame], pooled: list[pd.DataFrame]) -> pd.DataFrame:
        """The target cells' rows, then the pooled and shadow-as-target rows."""
        extra = pd.concat(pooled, ignore_index=True)
        extra["study"], extra["dataset"] = "b", self.dataset
        tidy = pd.concat([pd.concat(frames, ignore_index=True), extra], ignore_index=True)
        tidy["synthetic"] = self.synthetic
        for column in ("attack", "attacker"):
            tidy[column] = tidy[column].fillna("")
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
                "shadow_in_fraction": config.shadow_in_fraction, "lira_variance": config.lira_variance,
                "attack_folds": config.attack_folds, "epsilons": self.epsilons,
                "training": ", ".join(f"{k} {getattr(training, k)}" for k in (
                    "num_rounds", "local_epochs", "clients_per_round", "batch_size", "learning_rate", "clip_norm"))}
