"""Study B's multi-objective Optuna search for the utility–leakage trade-off of DP federated learning (stage
``optuna_study_b``).

``federated_mia`` answers "what does per-step ε = 10, 5, 1 cost" on a fixed grid; this search asks which
(ε, clip norm C, local epochs) settings are Pareto-optimal. One trial = one setting, trained as ``federated_mia``
trains a cell (its :class:`~eegprivacy.studies.federated.mia.Federation`, ``federate`` and ``utility_rows``;
every knob not searched comes from ``params/federated_mia.yaml``, except ``num_rounds``, which the search's params
set) and scored by two objectives:

- maximise the global model's utility: the client-mean AUROC on every client's non-member trials
  (``federated_mia``'s ``utility_auroc``; chance 0.5);
- minimise the record-level attack's TPR at 1 % FPR on the final global model (``federated_mia``'s RLA,
  members vs non-members, cross-fitted over two folds; chance 0.01): per seed the strongest of the attackers
  run (``federated_mia``'s ``attackers``), since a defender must hold against the best one.

Both are means over ``noise_seeds`` seeds (member split, initialisation, client sampling and DP noise vary
together, as ``federated_mia``'s seeds do); the per-seed values and a t-interval are kept as trial user
attributes, with the strongest attacker's AUROC reported alongside. ``mechanism: none`` trials (no DP, so no ε
and no clipping) put the non-private end of the front into the same search. ε is per local step, not a
cumulative guarantee. Storage, resuming, several workers and MLflow children come from
:mod:`eegprivacy.pipeline.search`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from eegprivacy.attacks.membership import RecordLevelAttack
from eegprivacy.attacks.metrics import attack_summary
from eegprivacy.pipeline import search
from eegprivacy.pipeline.keys import config_key
from eegprivacy.studies.federated.config import (
    DatasetSpec,
    FederatedMIAConfig,
    OptunaStudyBConfig,
)
from eegprivacy.studies.federated.mia import (
    NOTE,
    Federation,
    federate,
    seed_split,
    utility_rows,
)

OBJECTIVES = ("utility_auroc", "rla_tpr_at_fpr_0.01")  # directions: maximise, minimise
DIRECTIONS = ("maximize", "minimize")
REPORTED = ("rla_auroc",)  # the strongest attacker's AUROC, reported next to the objectives
CHANCE = {"utility_auroc": 0.5, "rla_tpr_at_fpr_0.01": 0.01, "rla_auroc": 0.5}
PARAMS = ("mechanism", "epsilon", "clip_norm", "local_epochs")
ATTACK_FOLDS = 2
# federated_mia's knobs a trial uses; the searched ones (clip_norm, local_epochs) and num_rounds are set here.
TRAINING_KEYS = ("test_size", "split_seed", "csp_components", "clients_per_round", "learning_rate", "batch_size",
                 "attackers", "rf_estimators")
# What a trial's numbers (or the sampler's proposals) depend on; n_trials, n_jobs, storage and the heartbeat are
# left out, so raising the target resumes the same study.
FINGERPRINT_KEYS = ("dataset", "model", "num_rounds", "search_space", "noise_seeds", "sampler", "population_size",
                    "seed")


def training_config(training: FederatedMIAConfig, cfg: OptunaStudyBConfig) -> FederatedMIAConfig:
    """federated_mia's knobs with the search's round count (already checked by its own config)."""
    return dataclasses.replace(training, num_rounds=cfg.num_rounds)


def training_knobs(train: FederatedMIAConfig) -> dict:
    """The federated_mia knobs a trial uses, as MLflow records them."""
    return {**{k: getattr(train, k) for k in TRAINING_KEYS}, "num_rounds": train.num_rounds}


def score_seed(fed: Federation, model: str, epsilon: float, clip_norm: float, local_epochs: int,
               train: FederatedMIAConfig, seed: int) -> dict:
    """Utility and the record-level attacks for one seed: one federation trained as federated_mia's cell, scored
    after its last round as federated_mia scores that round (same attack seed). Takes the prepared
    ``Federation``, so a worker process is sent the CSP features, not the raw trials.

    The attack is cross-fitted (every trial scored once by an attacker fitted on the other fold) rather than
    federated_mia's one half-split: eegmat's ~140 non-members halved are too few to resolve a 1 % FPR."""
    from eegprivacy.federated.task import derive_seed

    # A no-DP trial's C is nan: federate never reads C at ε = ∞.
    knobs = dataclasses.replace(train, clip_norm=clip_norm, local_epochs=local_epochs)
    task, result = federate({"model": model, "epsilon": epsilon}, seed, fed, knobs)
    last = max(result.sent)
    utility = next(r["value"] for r in utility_rows(task, result.weights, fed, last) if r["metric"] == "utility_auroc")
    flat = lambda X: X.reshape(len(X), -1)  # noqa: E731
    (Xm, ym, _), (Xn, yn, _) = fed.pooled(True), fed.pooled(False)
    w = result.weights
    data = (task.predict_proba(w, flat(Xm)), task._targets(ym).numpy(), task.predict_proba(w, flat(Xn)),
            task._targets(yn).numpy(), task.losses(w, flat(Xm), ym), task.losses(w, flat(Xn), yn))
    y = np.r_[np.ones(len(ym), int), np.zeros(len(yn), int)]
    out = {"utility_auroc": float(utility)}
    for attacker in train.attackers:
        rla = RecordLevelAttack(attacker=attacker, n_estimators=train.rf_estimators,
                                random_state=derive_seed(seed, last, 11))
        X, _ = rla.attack_data(*data)  # rows: members, then non-members
        scores = attack_summary(y, rla.cross_fitted_scores(X, y, ATTACK_FOLDS), (0.01,))
        out[f"{attacker}_tpr"], out[f"{attacker}_auroc"] = scores["tpr_at_fpr_0.01"], scores["auroc"]
    return out


class Objective:
    """Suggests (mechanism, ε, C, local epochs), scores every seed (in ``parallel``'s workers), returns the means.
    Each seed's Federation (member split + per-client CSP) is the same for every trial, so it is built once."""

    def __init__(self, trials, cfg: OptunaStudyBConfig, train: FederatedMIAConfig, parallel):
        self.trials, self.cfg, self.train, self.parallel = trials, cfg, train, parallel
        self._federations = {}

    def federation(self, seed: int) -> Federation:
        from eegprivacy.signal.csp import MODEL_INPUT

        if seed not in self._federations:
            member = seed_split(self.trials, self.train, seed)
            fed = Federation(self.trials, member, MODEL_INPUT[self.cfg.model], self.train.csp_components)
            if len(fed.pooled(False)[1]) < 100:
                raise ValueError(f"{len(fed.pooled(False)[1])} non-member trials cannot resolve a TPR at 1 % FPR "
                                 "(it needs at least 100): use a larger cohort or test_size")
            self._federations[seed] = fed
        return self._federations[seed]

    def suggest(self, trial) -> tuple[str, float, float, int]:
        """(mechanism, ε, C, local epochs); a no-DP trial has neither noise nor clipping, so neither knob."""
        space = self.cfg.search_space
        mechanism = trial.suggest_categorical("mechanism", list(space.mechanisms))
        if mechanism == "laplace_gradient":
            epsilon = trial.suggest_float("epsilon", *map(float, space.epsilon), log=True)
            clip_norm = trial.suggest_float("clip_norm", *map(float, space.clip_norm), log=True)
        else:
            epsilon, clip_norm = math.inf, math.nan
        return mechanism, epsilon, clip_norm, trial.suggest_int("local_epochs", *space.local_epochs)

    def __call__(self, trial) -> tuple[float, float]:
        from joblib import delayed

        _, epsilon, clip_norm, local_epochs = self.suggest(trial)
        per_seed = self.parallel(delayed(score_seed)(self.federation(seed), self.cfg.model, epsilon, clip_norm,
                                                     local_epochs, self.train, seed)
                                 for seed in range(self.cfg.noise_seeds))
        attackers = self.train.attackers
        for attacker in attackers:
            trial.set_user_attr(f"rla_{attacker}_tpr_at_fpr_0.01_per_seed", [s[f"{attacker}_tpr"] for s in per_seed])
        strongest = [max(attackers, key=lambda a: s[f"{a}_tpr"]) for s in per_seed]
        trial.set_user_attr("strongest_attacker_per_seed", strongest)
        trial.set_user_attr("rla_auroc", search.set_seed_attrs(
            trial, "rla_auroc", [s[f"{a}_auroc"] for s, a in zip(per_seed, strongest)]))
        return (search.set_seed_attrs(trial, "utility_auroc", [s["utility_auroc"] for s in per_seed]),
                search.set_seed_attrs(trial, "rla_tpr_at_fpr_0.01", [s[f"{a}_tpr"] for s, a in zip(per_seed,
                                                                                                  strongest)]))


def study_fingerprint(cfg: OptunaStudyBConfig, train: FederatedMIAConfig, spec: DatasetSpec, dataset_version: str,
                      code_hash: str) -> str:
    """Hash of everything a trial's numbers (or the sampler's proposals) depend on (:data:`FINGERPRINT_KEYS`,
    the training knobs, the data and the code), so a changed setting starts a new study."""
    settings = cfg.to_dict()
    return config_key({**{k: settings[k] for k in FINGERPRINT_KEYS},
                       "training": {k: getattr(train, k) for k in TRAINING_KEYS}, "paradigm": spec.as_mapping(),
                       "dataset_version": dataset_version, "code_hash": code_hash})[:12]


def trial_epsilon(trial) -> float:
    return trial.params.get("epsilon", math.inf)


def front_and_trials(study, cfg: OptunaStudyBConfig, train: FederatedMIAConfig, synthetic: bool,
                     n_clients: int) -> tuple[dict, pd.DataFrame]:
    """The Pareto front summary (JSON) and the tidy table of every trial (CSV), over every worker's trials; a
    no-DP trial has no ε or C: JSON gets null, the CSV an empty cell."""
    head = {"dataset": cfg.dataset, "synthetic": synthetic, "model": cfg.model, "study_name": study.study_name,
            "objectives": dict(zip(OBJECTIVES, DIRECTIONS)), "attackers": train.attackers,
            "num_rounds": cfg.num_rounds, "noise_seeds": cfg.noise_seeds, "n_clients": n_clients,
            "epsilon_scope": NOTE}
    summary = search.front_summary(study, OBJECTIVES, (0.5, 1.0), CHANCE, head, REPORTED)
    for entry in summary["front"]:
        for key in PARAMS:
            entry.setdefault(key, None)
    tidy = search.trial_rows(study, OBJECTIVES, PARAMS, CHANCE, {e["trial"] for e in summary["front"]},
                             cfg.noise_seeds, {"study": "b", "dataset": cfg.dataset, "model": cfg.model}, REPORTED)
    return summary, tidy
