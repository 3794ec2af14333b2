"""The federations LiRA trains besides each target, all through the target's pipeline
(:func:`~eegprivacy.studies.federated.mia.federate`): the shadows at every ε, in lock-step and cached on disk
(:func:`shadow_phis`), and the preprocessing-only control's fold federations (:func:`control_models`); and every
trial's logits, each through its own client's CSP and local statistics (:func:`trial_logits`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path
from eegprivacy.attacks.lira import logit_confidence
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.studies.federated import control, mia
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.lira.config import FederatedLiRAConfig


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

