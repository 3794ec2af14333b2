"""Study B's controlled membership table: how much membership federated training leaks, apart from what
member-fitted preprocessing leaks, and how much DP removes.

Each client's CSP and scaling in the paper are fitted on its member trials, so members sit further from the
decision boundary in CSP space than non-members *whatever model is applied afterwards*. An attack on the trained
model then detects preprocessing as well as training. The control that isolates training is a model that never
saw the attacked client, scored through that client's own preprocessing:

- **attack**: the final global model of the federation the client joined, on the client's members and
  non-members through its preprocessing.
- **control (preprocessing only)**: the final global model of a federation trained, with the same protocol,
  seed and ε, on the *other* clients only — the client's fold of ``control_folds`` client folds left out — scored
  through the very same preprocessing. Whatever it detects comes from the preprocessing and from what all
  subjects share, not from training on this client.
- **untrained**: the initial global model through the same preprocessing. Shown, not tested: an untrained
  network's outputs are nearly constant, so it cannot show a preprocessing leak (which is why it is not the
  control).

The arms differ in the weights alone: the same rows, preprocessing, attackers and seeds, and (EEGNet) BatchNorm
statistics computed the same way in each, from the client's calibration block through the model being scored
(:func:`normalisation`). Statistics the client kept from training exist only in the attack arm, and statistics
from its members would be a member-fitted step of their own; both made EEGNet's control score its members better
than the attack (−0.13 AUROC) and its accuracy look like chance.

The table's cell is attack − control, paired (same clients, seeds and attacker), with an interval from a cluster
bootstrap over subjects and seeds and a two-sided bootstrap p-value, Holm-adjusted over the cells of one model's
table (the family); a cell where the control scores significantly above the attack is a failed control
(``failed_control``), not "no leak". Attacks, all at the final round and all scoring every trial by an attacker
that never saw that trial's client (cross-fitted over client folds):

- ``loss``: the loss-threshold attack (score −loss; no attacker to train).
- ``rla``: record level, [p(0), p(1), loss] per trial.
- ``fla``: feature level, the model's embedding per trial.
- ``gla``: gradient level (the sound GLA): per client, the model trained locally on as many of its members as it
  has non-members, and on its non-members; the attacker tells the two updates apart.

Preprocessing (:data:`~eegprivacy.federated.preprocessing.PREPROCESSING`): the paper's member-fitted CSP and the
options that read no member of the client (calibration block, DP-CSP, fixed Laplacians, CSP pooled over the other
clients, tangent space, and for EEGNet the raw channels). Every option sees the same members: a stratified
``calibration_fraction`` of each subject's trials is taken out of the paper's 80 % members for every option, so
members are 60 % and non-members the paper's 20 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.evaluation.client_bootstrap import auroc_replicates, client_resample_counts
from eegprivacy.evaluation.cluster_bootstrap import (
    bootstrap_p_value_two_sided,
    combine_seeds,
    holm,
    percentile_interval,
    seed_indices,
)
from eegprivacy.federated.preprocessing import PREPROCESSING
from eegprivacy.params import Config, param
from eegprivacy.studies.federated.config import MODELS, FederatedMIAConfig, ProtocolOverride
from eegprivacy.validation import (
    DELTA,
    EPSILONS_OR_INF,
    FRACTION_OPEN,
    POSITIVE,
    TEXT,
    count,
    subset_of,
)

ARMS = ("attack", "control", "untrained")
TRAINING_KNOBS = ("clip_norm", "test_size", "split_seed", "clients_per_round", "learning_rate", "batch_size",
                  "batchnorm_stats", "csp_components")
ALPHA = 0.05


@dataclass(frozen=True)
class FederatedControlConfig(Config):
    """``federated_control``: the preprocessing options × per-step ε grid, each cell with its leave-fold-out
    control federations. Training knobs and the dataset's spec come from ``federated_mia``."""

    dataset: str = param(TEXT, doc="a key of federated_mia.datasets")
    models: list = param(subset_of(MODELS, "models"), doc="simplenet and/or eegnet")
    preprocessing: list = param(subset_of(tuple(PREPROCESSING), "options"),
                                doc="client preprocessing options (channels: EEGNet only)")
    epsilons: list = param(EPSILONS_OR_INF, doc="per-step ε of the Laplace gradient DP (.inf: no DP)")
    seeds: int = param(count(1, "seeds"), doc="seeds 0..n-1 (federated_mia's member split of each seed)")
    num_rounds: int = param(count(1, "rounds"))
    local_epochs: int = param(count(1, "epochs"))
    control_folds: int = param(count(2, "folds"), default=4,
                               doc="client folds: each control federation trains without one fold")
    calibration_fraction: float = param(FRACTION_OPEN, default=0.2,
                                        doc="share of each subject's trials taken out of its members for calibration")
    dp_csp_epsilon: float = param(POSITIVE, default=5.0, doc="DP-CSP's ε per trial (Gaussian mechanism)")
    dp_csp_delta: float = param(DELTA, default=1e-5, doc="DP-CSP's δ per trial")
    attackers: list = param(subset_of(("lr", "rf", "mlp"), "attackers"), default=["lr"],
                            doc="attack classifiers of rla, fla and gla")
    attack_folds: int = param(count(2, "folds"), default=4, doc="client folds of the attackers' cross-fitting")
    bootstrap: int = param(count(1, "resamples"), default=2000, doc="subjects+seeds cluster-bootstrap resamples")
    confidence: float = param(FRACTION_OPEN, default=0.95)
    per_model: dict[str, ProtocolOverride] = param(default={},
                                                   doc="per model: seeds, num_rounds, local_epochs, epsilons "
                                                       "replacing these")

    def for_model(self, model: str) -> dict:
        """Seeds, rounds, local epochs and per-step ε grid model ``model`` runs with (its ``per_model`` override
        applied)."""
        base = {"seeds": self.seeds, "num_rounds": self.num_rounds, "local_epochs": self.local_epochs,
                "epsilons": list(self.epsilons)}
        override = self.per_model.get(model)
        return {**base, **({k: v for k, v in override.changes().items() if k in base} if override else {})}


def preprocessing_options(config: FederatedControlConfig, model: str) -> list[str]:
    """The options that can feed ``model`` (``channels`` is EEGNet's only)."""
    return [p for p in config.preprocessing if model in PREPROCESSING[p].models]


class ClientSet:
    """Per-client (X_members, y_members, X_nonmembers, y_nonmembers) after each client's preprocessing, and each
    client's calibration block through the same preprocessing (``calibration``: what every arm's BatchNorm
    statistics are computed on); the interface :func:`~eegprivacy.studies.federated.mia.federate` trains on.
    ``subset`` keeps some clients with their preprocessing unchanged (a control federation)."""

    def __init__(self, clients: list, calibration: list | None = None):
        self.clients = clients
        self.calibration = calibration if calibration is not None else [None] * len(clients)
        self.input_shape = clients[0][0].shape[1:]

    def partitions(self):
        return [(Xm.reshape(len(Xm), -1), ym) for Xm, ym, _, _ in self.clients]

    def subset(self, keep) -> ClientSet:
        return ClientSet([self.clients[k] for k in keep], [self.calibration[k] for k in keep])


def client_preprocessing(trials, member, calibration, preprocessing: str, model: str, config: FederatedControlConfig,
                         n_components: int, seed: int, standardise: bool = False) -> ClientSet:
    """Every client's data through its own preprocessing, fitted by
    :func:`~eegprivacy.federated.preprocessing.fit_clients` on exactly what the option names (the client's
    training members, its calibration block, the other clients' shared sums, or nothing); non-members are only
    transformed. ``standardise``: then each feature centred and scaled by the client's own calibration block
    (:func:`standardised`), which reads no member or non-member."""
    from eegprivacy.federated.preprocessing import ClientTrials, fit_clients
    from eegprivacy.signal.csp import MODEL_INPUT

    labels = trials.metadata["subject"].to_numpy()
    train = member & ~calibration
    rows = [labels == subject for subject in trials.subjects()]
    data = [ClientTrials(members=(trials.X[r & train], trials.y[r & train]),
                         calibration=(trials.X[r & calibration], trials.y[r & calibration])) for r in rows]
    pres = fit_clients(preprocessing, data, output=MODEL_INPUT[model], n_components=n_components,
                       montage=trials.channels, sfreq=trials.sfreq, epsilon=config.dp_csp_epsilon,
                       delta=config.dp_csp_delta, seed=seed)
    clients, blocks = [], []
    for pre, r, client in zip(pres, rows, data):
        non = r & ~member
        clients.append((pre.transform(client.members[0]), client.members[1], pre.transform(trials.X[non]),
                        trials.y[non]))
        blocks.append(pre.transform(client.calibration[0]))
    out = ClientSet(clients, blocks)
    return standardised(out) if standardise else out


def standardised(clients: ClientSet) -> ClientSet:
    """Each client's features minus its calibration block's mean, over its standard deviation (per feature).

    Why: clipped per-example gradients (DP-SGD) keep little of a signal that lives in small deviations around a
    large common offset (log-variances sit near −1.4 with SD 0.27), so every example's gradient points the same
    way and the noise swamps the rest. The block is neither trained on nor attacked, as for the BatchNorm
    statistics (:func:`normalisation`); it is private data read outside ε, which the rows say."""
    out, blocks = [], []
    for (Xm, ym, Xn, yn), block in zip(clients.clients, clients.calibration):
        mean, scale = block.mean(axis=0), block.std(axis=0) + 1e-6
        out.append(((Xm - mean) / scale, ym, (Xn - mean) / scale, yn))
        blocks.append((block - mean) / scale)
    return ClientSet(out, blocks)


def client_folds(n_clients: int, n_folds: int, seed: int) -> list[np.ndarray]:
    """``n_folds`` disjoint client folds, seeded (the clients each control federation leaves out)."""
    from eegprivacy.federated.task import derive_seed

    order = np.random.default_rng(derive_seed(seed, 29)).permutation(n_clients)
    return [np.sort(f) for f in np.array_split(order, min(int(n_folds), n_clients))]


def _flat(X):
    return X.reshape(len(X), -1)


def _arm_outputs(task, weights: list, clients, locals_) -> dict:
    """Per trial (members first, then non-members, client by client): probabilities, losses, embeddings, client
    index and membership, each client's rows through its own model ``weights[k]`` and local state."""
    proba, loss, embed, client, member = [], [], [], [], []
    for k, ((Xm, ym, Xn, yn), w, local) in enumerate(zip(clients, weights, locals_)):
        for X, y, m in ((Xm, ym, 1), (Xn, yn, 0)):
            proba.append(task.predict_proba(w, _flat(X), local=local))
            loss.append(task.losses(w, _flat(X), y, local=local))
            embed.append(task.embed(w, _flat(X), local=local))
            client.append(np.full(len(y), k))
            member.append(np.full(len(y), m))
    return {"proba": np.concatenate(proba), "loss": np.concatenate(loss), "embed": np.concatenate(embed),
            "client": np.concatenate(client), "member": np.concatenate(member)}


def cross_fitted(features: np.ndarray, member: np.ndarray, clients: np.ndarray, attacker: str, n_folds: int,
                 seed: int, n_estimators: int = 100) -> np.ndarray:
    """P(member) of every row from an attacker fitted on the other client folds: no attacker ever saw the
    attacked client's labels."""
    from sklearn.model_selection import GroupKFold

    from eegprivacy.attacks.membership import MembershipAttack

    scores = np.full(len(member), np.nan)
    folds = GroupKFold(n_splits=min(int(n_folds), np.unique(clients).size))
    for train, test in folds.split(features, member, clients):
        attack = MembershipAttack(attacker=attacker, n_estimators=n_estimators, random_state=seed)
        scores[test] = attack.fit(features[train], member[train]).decision_function(features[test])
    return scores


def sound_updates(task, weights: list, clients, epochs: int, seed: int) -> tuple:
    """Sound GLA's updates: per client, its model ``weights[k]`` trained locally on as many of its members as it
    has non-members (a seeded pick, the same for every arm), and on its non-members; (updates, client, member).
    SimpleNet's local trainings run as one batched program (:meth:`~eegprivacy.federated.torch_task.TorchTask.
    train_many`, the loop's numbers to 1e-6), EEGNet's one by one (batching is slower for it)."""
    from eegprivacy.federated.task import derive_seed
    from eegprivacy.federated.torch_task import TrainJob
    from eegprivacy.models.gradients import update_vector

    jobs, client, member = [], [], []
    for k, ((Xm, ym, Xn, yn), w0) in enumerate(zip(clients, weights)):
        pick = np.random.default_rng(derive_seed(seed, k, 31)).choice(len(ym), len(yn), replace=False)
        for X, y, m in ((Xm[pick], ym[pick], 1), (Xn, yn, 0)):
            jobs.append(TrainJob(w0, None, _flat(X), y, epochs, derive_seed(seed, k, 37, m)))
            client.append(k)
            member.append(m)
    trained = (task.train_many(jobs) if task.model_spec == "simplenet" else
               [task.train_local(j.weights, j.local, j.X, j.y, epochs=j.epochs, seed=j.seed) for j in jobs])
    updates = [update_vector(w, job.weights) for (w, _, _), job in zip(trained, jobs)]
    return np.stack(updates), np.array(client), np.array(member)


def arm_scores(task, weights: list, clients: list, locals_: list, config: FederatedControlConfig, epochs: int,
               seed: int, n_estimators: int = 100) -> dict:
    """Every attack's per-row scores against one arm (client k scored by ``weights[k]`` with ``locals_[k]``):
    ``scores`` maps an attack to (scores, client, member); ``accuracy`` is each client's non-member accuracy.
    The attackers are cross-fitted over client folds with the same seed in every arm."""
    from eegprivacy.attacks.membership import record_features

    out = _arm_outputs(task, weights, clients, locals_)
    client, member = out["client"], out["member"]
    targets = task._targets(np.concatenate([np.concatenate([c[1], c[3]]) for c in clients])).numpy()
    scores = {"loss": (-out["loss"], client, member)}
    record = record_features(out["proba"], targets, out["loss"])
    updates, u_client, u_member = sound_updates(task, weights, clients, epochs, seed)
    for attacker in config.attackers:
        for name, X, c, m in (("rla", record, client, member), ("fla", out["embed"], client, member),
                              ("gla", updates, u_client, u_member)):
            scores[f"{name}_{attacker}"] = (cross_fitted(X, m, c, attacker, config.attack_folds, seed,
                                                         n_estimators), c, m)
    correct = out["proba"].argmax(1) == targets
    accuracy = np.array([correct[(member == 0) & (client == k)].mean() for k in range(len(clients))])
    return {"scores": scores, "accuracy": accuracy}


def normalisation(task, weights: list, clients: ClientSet) -> list:
    """Every client's BatchNorm statistics for the model ``weights[k]`` it is scored with: computed afresh from its
    calibration block through its own preprocessing (:meth:`~eegprivacy.federated.torch_task.TorchTask.calibrate`),
    the same way in every arm — as a deployed client recalibrates the final model on its calibration block before
    use. The block is neither trained on nor attacked, so the normalisation reads no member and no non-member; the
    statistics a client kept from training (FedBN) are never used, since the control model has none. Nones for a
    model without BatchNorm."""
    if not task.local_names:
        return [None] * len(weights)
    return [task.calibrate(w, _flat(block)) for w, block in zip(weights, clients.calibration)]


def federations(cell: dict, seed: int, sets: list[ClientSet], config: FederatedMIAConfig) -> list[tuple]:
    """(task, result) of one seeded federation per client set, every one with the cell's protocol and seed.
    SimpleNet's run in lock-step (one batched local training per round across them: the same numbers as one at a
    time, to 1e-6, several times faster); EEGNet's one after another, since batching never wins for it
    (``benchmarks/federated_round.py``)."""
    from eegprivacy.studies.federated.mia import federate, federate_many

    if cell["model"] == "simplenet":
        return federate_many([(cell, seed, clients) for clients in sets], config)
    return [federate(cell, seed, clients, config) for clients in sets]


def cell_arrays(cell: dict, seed: int, trials, training: FederatedMIAConfig, config: FederatedControlConfig) -> dict:
    """One (model, preprocessing, ε, seed): the federation on every client, ``control_folds`` federations each
    without one client fold, and every attack's per-row scores against the trained model (attack), the model
    that never saw the client (control) and the untrained model; plus each client's non-member accuracy. The three
    arms differ only in the weights that score a client: the same rows, preprocessing, normalisation
    (:func:`normalisation`), attackers and seeds."""
    from dataclasses import replace

    from eegprivacy.federated.preprocessing import calibration_split
    from eegprivacy.studies.federated.mia import seed_split

    model, protocol = cell["model"], config.for_model(cell["model"])
    if model == "eegnet" and training.batchnorm_stats != "local":
        raise ValueError("federated_control needs batchnorm_stats: local, so that every arm's BatchNorm statistics "
                         "are computed the same way (from the client's calibration block); shared statistics "
                         "would carry the attacked client's data into the attack arm only")
    fed_config = replace(training, num_rounds=protocol["num_rounds"], local_epochs=protocol["local_epochs"])
    member = seed_split(trials, training, seed)
    calibration = calibration_split(trials.y, trials.metadata["subject"], member, config.calibration_fraction,
                                    seed)
    clients = client_preprocessing(trials, member, calibration, cell["preprocessing"], model, config,
                                   training.csp_components, seed, standardise=bool(cell.get("standardise", False)))
    n = len(clients.clients)
    folds = client_folds(n, config.control_folds, seed)
    trained = [[k for k in range(n) if k not in set(fold.tolist())] for fold in folds]
    runs = federations(cell, seed, [clients] + [clients.subset(keep) for keep in trained], fed_config)
    (task, result), fold_results = runs[0], [r for _, r in runs[1:]]
    control_weights = [None] * n
    for fold, fold_result in zip(folds, fold_results):
        for k in fold:
            control_weights[k] = fold_result.weights
    initial = result.sent[min(result.sent)]
    epochs, rf = protocol["local_epochs"], training.rf_estimators
    arms = {"attack": [result.weights] * n, "control": control_weights, "untrained": [initial] * n}
    return {arm: arm_scores(task, weights, clients.clients, normalisation(task, weights, clients), config, epochs,
                            seed, rf)
            for arm, weights in arms.items()}


def pooled_auroc(scores, member) -> float:
    from eegprivacy.evaluation.cluster_bootstrap import auroc_along

    return float(auroc_along(np.asarray(scores)[None, :], np.asarray(member)[None, :])[0])


def arm_rows(arms: dict) -> tuple[list[dict], dict]:
    """:func:`cell_arrays`' arms as a cell's tidy rows (each arm's non-member accuracy and pooled AUROC per attack)
    and the per-row arrays :func:`summarise` bootstraps (``<arm>/accuracy``, ``<arm>/<attack>/scores|client|
    member``)."""
    rows, arrays = [], {}
    for arm, result in arms.items():
        rows.append({"metric": f"{arm}/utility_accuracy", "value": float(np.mean(result["accuracy"])),
                     "chance": 0.5})
        arrays[f"{arm}/accuracy"] = result["accuracy"]
        for attack, (scores, client, member) in result["scores"].items():
            rows.append({"metric": f"{arm}/{attack}/auroc", "value": pooled_auroc(scores, member), "chance": 0.5})
            arrays[f"{arm}/{attack}/scores"] = scores
            arrays[f"{arm}/{attack}/client"] = client
            arrays[f"{arm}/{attack}/member"] = member
    return rows, arrays


def cell_rows(cell: dict, seed: int, trials, training: FederatedMIAConfig, config: FederatedControlConfig,
              arrays_dir: str | Path | None = None) -> list[dict]:
    """The cell's tidy rows (each arm's pooled AUROC per attack, each arm's non-member accuracy) and, with
    ``arrays_dir``, every per-row score as ``<arrays_dir>/<cell key>.npz`` (what the summary bootstraps)."""
    from eegprivacy.pipeline.keys import config_key

    rows, arrays = arm_rows(cell_arrays(cell, seed, trials, training, config))
    if arrays_dir is not None:
        path = Path(arrays_dir) / f"{config_key({**cell, 'seed': seed})}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(handle, **arrays)
    return rows


# ---- the summary: paired differences with a subjects+seeds cluster bootstrap ----------------------------------

def summarise(cells: list[tuple[dict, int, dict]], n_clients: int, n_resamples: int = 2000,
              confidence: float = 0.95) -> pd.DataFrame:
    """Each (model, preprocessing, ε, attack): attack, control and untrained AUROC (mean over seeds of the
    pooled AUROC) with subjects+seeds intervals, and attack − control (paired) with its interval, two-sided
    bootstrap p-value and Holm adjustment over the cells of the model's table; each (model, preprocessing, ε)
    also its non-member accuracy. ``cells``: (cell config, seed, arrays)."""
    counts = client_resample_counts(n_clients, n_resamples)
    groups: dict = {}
    for config, seed, arrays in cells:
        key = (config["model"], config["preprocessing"], float(config["epsilon"]))
        groups.setdefault(key, []).append((seed, arrays))
    records = []
    for (model, prep, eps), members in groups.items():
        members.sort(key=lambda item: item[0])
        seeds = [s for s, _ in members]
        seed_idx = seed_indices(len(seeds), n_resamples, seed=0)
        base = {"model": model, "preprocessing": prep, "epsilon": eps, "n_subjects": n_clients,
                "n_seeds": len(seeds), "ci_over": "subjects+seeds"}
        for arm in ARMS:  # utility: the mean over clients of non-member accuracy, resampled the same way
            acc = np.stack([a[f"{arm}/accuracy"] for _, a in members])  # (seeds, clients)
            per_seed = (acc @ counts.T) / counts.sum(1)  # the mean over resampled clients, per seed
            low, high = percentile_interval(combine_seeds(per_seed, seed_idx), confidence)
            records.append({**base, "attack": "utility_accuracy", "arm": arm, "value": float(acc.mean()),
                            "ci_low": low, "ci_high": high, "chance": 0.5})
        attacks = sorted({k.split("/")[1] for k in members[0][1] if k.endswith("/scores")})
        for attack in attacks:
            reps, values = {}, {}
            for arm in ARMS:
                per_seed, point = [], []
                for _, a in members:
                    s, m, c = (a[f"{arm}/{attack}/{x}"] for x in ("scores", "member", "client"))
                    per_seed.append(auroc_replicates(s, m, c, counts))
                    point.append(pooled_auroc(s, m))
                reps[arm] = combine_seeds(np.stack(per_seed), seed_idx)
                values[arm] = float(np.mean(point))
                low, high = percentile_interval(reps[arm], confidence)
                records.append({**base, "attack": attack, "arm": arm, "value": values[arm], "ci_low": low,
                                "ci_high": high, "chance": 0.5})
            diff = reps["attack"] - reps["control"]
            low, high = percentile_interval(diff, confidence)
            explained = ((values["control"] - 0.5) / (values["attack"] - 0.5)
                         if values["attack"] - 0.5 > 0 else float("nan"))
            records.append({**base, "attack": attack, "arm": "attack_minus_control",
                            "value": values["attack"] - values["control"], "ci_low": low, "ci_high": high,
                            "p_value": bootstrap_p_value_two_sided(diff), "chance": 0.0,
                            "control_share": explained})
    out = pd.DataFrame(records)
    for column in ("p_value", "control_share"):
        if column not in out:
            out[column] = np.nan
    out["p_holm"] = np.nan
    out["family"] = ""
    tested = out["arm"].eq("attack_minus_control") & out["p_value"].notna()
    for model, index in out[tested].groupby("model").groups.items():
        out.loc[index, "p_holm"] = holm(out.loc[index, "p_value"].to_numpy())
        out.loc[index, "family"] = f"{model}: attack − control, {len(index)} cells"
    out["significant"] = out["p_holm"] < ALPHA
    # Two-sided: a control significantly above its attack is a finding (the control is not equal to the attack
    # arm in all but membership), never read as "no leak".
    out["failed_control"] = out["significant"] & out["value"].lt(0)
    return out


def certified_epsilon(step_epsilon: float, *, preprocessing: str, dim: int, num_rounds: int, local_epochs: int,
                      n_members: int, batch_size: int, clip_norm: float, csp_epsilon: float, csp_delta: float,
                      delta: float, accountant: str = "pld") -> float:
    """ε per member trial of the whole run at ``delta`` (certified calibration: 2·sqrt(d)·ε per step, replace-one;
    every round counted, as if the client joined them all); NaN where the option lets a trial travel un-noised
    beyond its client (no guarantee to print), ∞ without DP.

    Whether a trial's ε is the client's depends on the preprocessing (its registry entry's ``fits_on``). Fitted on
    the members (``member_csp``): one trial moves every other trial's features, so its ε is the client's
    composition over every step of every round (as ``federated_accounting`` states). Options that read no member
    of the client: a trial enters only the steps whose batch holds it (one per local epoch). ``dp_csp`` adds its
    Gaussian release of the class covariances (one (ε, δ) event per trial, replace-one) to those steps:
    ``ComposedDpEvent`` of the two, read by the accountant.
    """
    import dp_accounting

    from eegprivacy.federated.preprocessing import PREPROCESSING, dp_csp_event
    from eegprivacy.privacy.accounting import FederatedSchedule, federated_event, make_accountant

    option = PREPROCESSING[preprocessing]
    if not math.isfinite(step_epsilon):
        return math.inf
    if not option.certified:
        return math.nan
    schedule = FederatedSchedule.for_client(num_rounds, local_epochs, n_members, batch_size)
    unit = "client" if option.fits_on == "members" and not option.spends_epsilon else "example"
    event = federated_event(step_epsilon, calibration="certified", unit=unit, dim=dim, schedule=schedule,
                            clip_norm=clip_norm)
    if option.spends_epsilon:
        event = dp_accounting.ComposedDpEvent([event, dp_csp_event(csp_epsilon, csp_delta)])
    return float(make_accountant(accountant).epsilon(event, delta).epsilon)


def _dim(model: str, shape) -> int:
    """Trainable parameters of ``model`` on inputs of ``shape`` (what the DP step noises)."""
    from eegprivacy.federated.torch_task import TorchTask

    net = TorchTask(model, tuple(shape)).build(0)
    return int(sum(p.numel() for p in net.parameters() if p.requires_grad))


def certified_epsilons(config: FederatedControlConfig, training: FederatedMIAConfig, cells, trials) -> pd.DataFrame:
    """:func:`certified_epsilon` (RDP, δ = DP-CSP's δ) for every (model, preprocessing, ε) in ``cells``, with the
    mean member count of a client (60 % of its trials) and each model's gradient dimension on the input its
    preprocessing gives (the registry's ``n_features``)."""
    from eegprivacy.federated.preprocessing import PREPROCESSING
    from eegprivacy.signal.csp import MODEL_INPUT

    labels = trials.metadata["subject"].to_numpy()
    n_members = int(round(np.mean([(labels == s).sum() for s in trials.subjects()])
                          * (1 - training.test_size - config.calibration_fraction)))
    spec = training.datasets[config.dataset]
    samples = int(round(float(spec.epoch_s or 4.0) * float(spec.resample or 128.0)))
    rows = []
    for model, prep, eps in cells:
        protocol = config.for_model(model)
        size = PREPROCESSING[prep].n_features(MODEL_INPUT[model], training.csp_components)
        shape = (size,) if model == "simplenet" else (size, samples)
        value = certified_epsilon(eps, preprocessing=prep, dim=_dim(model, shape), num_rounds=protocol["num_rounds"],
                                  local_epochs=protocol["local_epochs"], n_members=max(n_members, 1),
                                  batch_size=training.batch_size, clip_norm=training.clip_norm,
                                  csp_epsilon=config.dp_csp_epsilon, csp_delta=config.dp_csp_delta,
                                  delta=config.dp_csp_delta, accountant="rdp")
        rows.append({"model": model, "preprocessing": prep, "epsilon": eps, "certified_epsilon": value})
    return pd.DataFrame(rows)
