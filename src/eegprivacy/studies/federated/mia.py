"""Study B: per-subject FedAvg with per-step Laplace gradient DP, attacked per round.

One cell is (model, ε, seed) on one dataset: every subject is a client, its trials split 80/20 into members and
non-members (:func:`seed_split`, a new split per seed); each client fits its own CSP on its members only
(:class:`Federation`); FedAvg runs in-process through Flower's strategy code with ``clients_per_round`` clients
sampled per round (seeded, so a cell is reproducible). After every round the global model is scored on every
client's non-members (utility) and, in the attacked rounds, attacked: RLA, FLA, GLA as the paper ran it (real vs
matched Gaussian updates) and GLA sound (same global model, member vs non-member batches of equal size, split by
client); the CLA runs once per cell on the updates of all rounds. ε is per mechanism application (one local
step), not a cumulative guarantee (:data:`NOTE`).

BatchNorm (EEGNet): with ``batchnorm_stats: local`` (FedBN, the default) each client keeps its own running
statistics, the server averages the trainable parameters only, and every evaluation or attack of "the global
model" on a client's trials uses that client's statistics after the round (:meth:`Scoring.client_locals`); with
``shared`` the statistics travel un-noised with the weights (no DP guarantee at any ε). A DP client's reply holds
no train loss and no gradient norm (:mod:`eegprivacy.federated.client_app`); ``client_train_loss`` is then the
experimenter-side mean over the sampled clients' kept diagnostics, never sent to the server.

The library a notebook, the ``federated_mia`` stage, federated_lira's shadows and optuna_study_b's trials share:
every knob comes from a :class:`~eegprivacy.studies.federated.config.FederatedMIAConfig`.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path
from eegprivacy.attacks.membership import (
    ClientLevelAttack,
    FeatureLevelAttack,
    GradientLevelAttack,
    RecordLevelAttack,
    SyntheticGradientAttack,
)
from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation.metrics import classification_metrics, confusion_counts
from eegprivacy.pipeline.keys import config_key
from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig
from eegprivacy.studies.federated.replicates import Replicates

UTILITY = ("accuracy", "precision", "recall", "f1", "auroc", "loss")
ATTACK_KEEP = ("accuracy", "balanced_accuracy", "auroc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001")
QUANTILES = np.linspace(0.0, 1.0, 21)
NOTE = ("epsilon is per mechanism application (one local optimiser step on one batch gradient), not a "
        "cumulative guarantee over steps, epochs or rounds")
# The knobs every cell records (its cache key, its tidy rows' columns, its MLflow params).
CELL_KNOBS = ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
              "local_epochs", "learning_rate", "batch_size", "rf_estimators", "attack_test_size", "cla_components",
              "batchnorm_stats", "subject_bootstrap")


def load_trials(name: str, spec: DatasetSpec):
    """The dataset and its trials under the paradigm ``spec`` names (shared with the SuperNode's ClientApp)."""
    from eegprivacy.federated.cohort import load_trials as load

    return load(name, spec.as_mapping())


def versioned_trials(name: str, spec: DatasetSpec):
    """The trials of dataset ``name`` under ``spec`` (:func:`load_trials`), the dataset's version and whether it is
    synthetic: what a stage training on them tags its runs and cells with."""
    dataset, trials = load_trials(name, spec)
    return trials, dataset.version(), bool(trials.synthetic)


def mechanism(epsilon: float) -> str:
    """The DP mechanism of a per-step ε: Laplace gradient noise, or none for ε = ∞ (the no-DP baseline)."""
    return "laplace_gradient" if math.isfinite(epsilon) else "none"


def cell_knobs(config: FederatedMIAConfig) -> dict:
    """What every cell of the sweep records besides its model, ε and seed (``attack_rounds`` as text)."""
    knobs = {key: getattr(config, key) for key in CELL_KNOBS}
    rounds = config.attack_rounds
    knobs["attack_rounds"] = rounds if rounds == "all" else ",".join(str(r) for r in rounds)
    return knobs


class Federation:
    """Per-client member/non-member data after each client's own CSP, for one model input type."""

    def __init__(self, trials, member, output: str, n_components: int):
        from eegprivacy.federated.cohort import client_data

        # (X_members, y_members, X_nonmembers, y_nonmembers); index = partition id. The subject id never leaves
        # this loop: clients are indices.
        self.clients = [client_data(trials, member, subject, output, n_components) for subject in trials.subjects()]
        self.input_shape = self.clients[0][0].shape[1:]

    def partitions(self):
        return [(Xm.reshape(len(Xm), -1), ym) for Xm, ym, _, _ in self.clients]

    def pooled(self, members: bool):
        i = (0, 1) if members else (2, 3)
        X = np.concatenate([c[i[0]] for c in self.clients])
        y = np.concatenate([c[i[1]] for c in self.clients])
        client = np.concatenate([np.full(len(c[i[1]]), k) for k, c in enumerate(self.clients)])
        return X, y, client


def sampling_strategy(per_round: int, seed: int):
    """FedAvg sampling `per_round` clients per round, seeded from the cell seed (shared with the ServerApp)."""
    from eegprivacy.federated.server_app import sampling_strategy as sampling

    return sampling(per_round, seed)


def seed_split(trials, config: FederatedMIAConfig, seed: int) -> np.ndarray:
    """The member mask of one seed. Each seed draws its own 80/20 split per subject (from ``split_seed`` and the
    seed), so the spread across seeds covers the split as well as initialisation, client sampling and noise."""
    from eegprivacy.federated.splits import member_split, run_split_seed

    return member_split(trials.y, trials.metadata["subject"], config.test_size,
                        run_split_seed(config.split_seed, int(seed)))


def dp_step(cell: dict, config: FederatedMIAConfig):
    """The DP object a cell's clients apply at every local step, by the cell's ``mechanism``: the paper's per-step
    Laplace gradient noise at ``epsilon`` (clip ``config.clip_norm``), record-level DP-SGD
    (``gaussian_example``: the cell's ``noise_multiplier``, ``sample_rate`` and ``clip_norm``), or None (no DP:
    ε = ∞). A cell without ``mechanism`` is the paper's."""
    from eegprivacy.federated.dp import LaplaceGradientDP

    eps = float(cell["epsilon"])
    kind = cell.get("mechanism", mechanism(eps))
    if kind == "gaussian_example":
        from eegprivacy.federated.dp_sgd import GaussianExampleDP

        return GaussianExampleDP(float(cell["clip_norm"]), float(cell["noise_multiplier"]), float(cell["sample_rate"]))
    if kind == "laplace_gradient":
        return LaplaceGradientDP(float(config.clip_norm), eps)
    if kind != "none" or math.isfinite(eps):
        raise ValueError(f"unknown DP mechanism {kind!r} for epsilon {eps:g}; known: laplace_gradient, "
                         "gaussian_example, none (epsilon = inf)")
    return None


def federation_call(cell: dict, seed: int, fed: Federation, config: FederatedMIAConfig) -> tuple:
    """(task, ``run_fedavg`` keyword arguments) of one seeded FedAvg run of the cell's model at its ε (``cell``:
    ``model``, ``epsilon``), keeping every round's client updates: what :func:`federate` runs, and what
    :func:`federate_many` runs in lock-step with others."""
    from eegprivacy.federated.torch_task import TorchTask

    dp = dp_step(cell, config)
    task = TorchTask(cell["model"], fed.input_shape, learning_rate=float(config.learning_rate),
                     batch_size=config.batch_size, dp=dp, batchnorm_stats=config.batchnorm_stats)
    return task, dict(task_factory=task, partitions=fed.partitions(), num_rounds=config.num_rounds,
                      local_epochs=config.local_epochs, seed=seed, backend="inprocess", keep_updates=True,
                      strategy_factory=sampling_strategy(config.clients_per_round, seed))


def federate(cell: dict, seed: int, fed: Federation, config: FederatedMIAConfig):
    """One seeded FedAvg run of the cell's model at its ε (``cell``: ``model``, ``epsilon``), keeping every
    round's client updates."""
    import torch

    from eegprivacy.federated import run_fedavg

    torch.set_num_threads(1)
    task, call = federation_call(cell, seed, fed, config)
    return task, run_fedavg(**call)


def federate_many(runs: list[tuple[dict, int, Federation]], config: FederatedMIAConfig) -> list[tuple]:
    """:func:`federate` of every (cell, seed, federation) in ``runs``, the federations in lock-step
    (:func:`~eegprivacy.federated.lockstep.run_fedavg_many`): each round's local training of all of them is one
    batched tensor program per ε, and every run's numbers are its own :func:`federate`'s. One torch thread, as
    :func:`federate`: the batch is the parallelism, processes split the runs."""
    import torch

    from eegprivacy.federated.lockstep import run_fedavg_many

    torch.set_num_threads(1)
    prepared = [federation_call(cell, seed, fed, config) for cell, seed, fed in runs]
    results = run_fedavg_many([call for _, call in prepared])
    return [(task, result) for (task, _), result in zip(prepared, results)]


def _flat(X: np.ndarray) -> np.ndarray:
    return X.reshape(len(X), -1)


def client_locals(result, n_clients: int, rnd: int | None = None) -> list:
    """Every client's local state (FedBN statistics) after round ``rnd`` (0: before training; None: the last
    round), or Nones when the task keeps nothing local. What evaluating the global model on a client's own trials
    must use: the client normalises its data with its own statistics."""
    if result is None or result.initial_local is None:
        return [None] * n_clients
    if rnd == 0:
        return [result.initial_local] * n_clients
    return [result.local_state(k, rnd) for k in range(n_clients)]


def per_client(fn, parts, locals_: list) -> np.ndarray:
    """``fn(X, y, local)`` on each client's (X, y) with its own local state, concatenated in client order (the
    order of :meth:`Federation.pooled`)."""
    return np.concatenate([fn(_flat(X), y, local) for (X, y), local in zip(parts, locals_)])


def _attack_rows(scores: dict, attack: str, attacker: str, rnd) -> list[dict]:
    rows = []
    for metric in ATTACK_KEEP:
        if metric not in scores:
            continue
        chance = (scores["chance_accuracy"] if metric == "accuracy" else
                  scores["chance_balanced_accuracy"] if metric == "balanced_accuracy" else
                  0.5 if metric == "auroc" else float(metric.rsplit("_", 1)[1]))
        rows.append({"metric": metric, "value": float(scores[metric]), "chance": chance, "attack": attack,
                     "attacker": attacker, "round": rnd, "n": scores.get("n_test")})
    return rows


def utility_rows(task, weights, fed: Federation, rnd: int, locals_: list | None = None,
                 replicates: Replicates | None = None) -> list[dict]:
    """Global model on every client's non-members (each with its own local state in ``locals_``): pooled metrics,
    client means, per-client accuracy; with ``replicates``, also each client mean's client-bootstrap replicates."""
    rows, per_client = [], []
    locals_ = locals_ or [None] * len(fed.clients)
    for k, (_, _, Xn, yn) in enumerate(fed.clients):
        proba = task.predict_proba(weights, _flat(Xn), local=locals_[k])
        loss = float(task.losses(weights, _flat(Xn), yn, local=locals_[k]).mean())
        cm = classification_metrics(**confusion_counts(yn, proba.argmax(1)))
        one = {"accuracy": cm["accuracy"], "precision": cm["precision"], "recall": cm["recall"], "f1": cm["f1"],
               "auroc": auroc(yn, proba[:, 1]), "loss": loss}
        per_client.append(one)
        rows.append({"metric": "client_accuracy", "value": one["accuracy"], "client": k, "round": rnd,
                     "chance": 0.5, "n": len(yn)})
    for metric in UTILITY:
        values = np.array([c[metric] for c in per_client], dtype=float)
        rows.append({"metric": f"utility_{metric}", "value": float(np.nanmean(values)), "round": rnd,
                     "chance": 0.5 if metric != "loss" else float("nan"), "n": len(values)})
    if replicates is not None:
        replicates.utility(per_client, UTILITY)
    return rows


class Scoring:
    """One cell's pooled members and non-members, and what the attacks read off a global model's weights."""

    def __init__(self, task, fed: Federation, config: FederatedMIAConfig, seed: int, result=None):
        self.task, self.fed, self.config, self.seed, self.result = task, fed, config, seed, result
        self.sound_rounds: list = []  # every attacked round's sound-GLA updates, pooled per cell
        self.Xm, self.ym, self.cm = fed.pooled(True)
        self.Xn, self.yn, self.cn = fed.pooled(False)
        # The client of every record- and feature-level attack row (members stacked over non-members).
        self.record_clients = np.concatenate([self.cm, self.cn])
        # Client-bootstrap replicates of every number that has a per-client reading (None: not collected).
        self.replicates: Replicates | None = None

    def _evaluate(self, attack, X, y, clients, name: str, attacker: str, **evaluate) -> dict:
        """``attack.evaluate(X, y, ...)``; with :attr:`replicates`, also the client-bootstrap replicates of its
        scores (the attacker-test rows resampled by ``clients``, one per row of ``X``; None: no per-client
        reading, no replicates). The rows and scores are what ``evaluate`` alone gives."""
        scores = attack.evaluate(X, y, test_size=self.config.attack_test_size, **evaluate)
        if self.replicates is not None and clients is not None:
            self.replicates.attack(attack, X, y, clients, scores, name, attacker, ATTACK_KEEP)
        return scores

    def _scored(self, attack, X, y, clients, name: str, attacker: str, rnd, **evaluate) -> list[dict]:
        """:meth:`_evaluate` as tidy rows."""
        return _attack_rows(self._evaluate(attack, X, y, clients, name, attacker, **evaluate), name, attacker, rnd)

    def client_locals(self, rnd: int | None = None) -> list:
        """Each client's local state after round ``rnd`` (0: the untrained model's), see :func:`client_locals`."""
        return client_locals(self.result, len(self.fed.clients), rnd)

    def _members(self, members: bool) -> list:
        i = (0, 1) if members else (2, 3)
        return [(c[i[0]], c[i[1]]) for c in self.fed.clients]

    def record(self, weights, locals_: list | None = None) -> tuple:
        """The record-level attack's inputs: probabilities, targets and losses of members, then non-members
        (each client's trials through its own local state in ``locals_``)."""
        task, ym, yn = self.task, self.ym, self.yn
        if locals_ is None or all(local is None for local in locals_):
            Xm, Xn = self.Xm, self.Xn
            pm, pn = task.predict_proba(weights, _flat(Xm)), task.predict_proba(weights, _flat(Xn))
            lm, ln = task.losses(weights, _flat(Xm), ym), task.losses(weights, _flat(Xn), yn)
        else:
            def proba(X, y, local):
                return task.predict_proba(weights, X, local=local)

            def losses(X, y, local):
                return task.losses(weights, X, y, local=local)

            members, nonmembers = self._members(True), self._members(False)
            pm, pn = per_client(proba, members, locals_), per_client(proba, nonmembers, locals_)
            lm, ln = per_client(losses, members, locals_), per_client(losses, nonmembers, locals_)
        return pm, task._targets(ym).numpy(), pn, task._targets(yn).numpy(), lm, ln

    def embeddings(self, weights, locals_: list | None = None) -> tuple:
        if locals_ is None or all(local is None for local in locals_):
            return self.task.embed(weights, _flat(self.Xm)), self.task.embed(weights, _flat(self.Xn))

        def embed(X, y, local):
            return self.task.embed(weights, X, local=local)

        return per_client(embed, self._members(True), locals_), per_client(embed, self._members(False), locals_)

    def attackers(self, *seed_keys: int):
        """(name, keyword arguments) of every configured attacker, seeded from the cell seed and ``seed_keys``."""
        from eegprivacy.federated.task import derive_seed

        for attacker in self.config.attackers:
            yield attacker, {"attacker": attacker, "n_estimators": self.config.rf_estimators,
                             "random_state": derive_seed(self.seed, *seed_keys)}

    def record_and_feature_rows(self, record, embeddings, rnd: int, attacker: str, kw: dict,
                                suffix: str = "") -> list[dict]:
        rla, fla = RecordLevelAttack(**kw), FeatureLevelAttack(**kw)
        return (self._scored(rla, *rla.attack_data(*record), self.record_clients, "rla" + suffix, attacker, rnd)
                + self._scored(fla, *fla.attack_data(*embeddings), self.record_clients, "fla" + suffix, attacker,
                               rnd))

    def untrained_control_rows(self, initial) -> list[dict]:
        """Negative control (round 0): the record- and feature-level attacks on the untrained initial model,
        which has seen no trial. Each client's CSP and its scaling are fitted on its members only, so members and
        non-members can differ before any training; whatever these attacks find above chance comes from that
        pipeline, not from the federated model, and the trained-model scores should be read against it."""
        locals_ = self.client_locals(0)
        record, embeddings = self.record(initial, locals_), self.embeddings(initial, locals_)
        rows = []
        for attacker, kw in self.attackers(0, 11):
            rows += self.record_and_feature_rows(record, embeddings, 0, attacker, kw, "_untrained_control")
        return rows

    def sound_updates(self, clients, before, rnd: int, initial=None) -> tuple[list, list, list, list]:
        """Sound GLA's data: the same global model trained by the same local procedure on equally many member
        and non-member trials of each sampled client; with ``initial`` (the untrained global model), also the
        control's updates: ``initial`` trained on the very same batches with the same local seeds, so whatever the
        control detects comes from the data and its member-fitted CSP, not from the trained model. Returns
        (member, non-member, control member, control non-member) update lists (the control's empty without
        ``initial``)."""
        from eegprivacy.federated.task import derive_seed
        from eegprivacy.models.gradients import update_vector

        sound_m, sound_n, control_m, control_n = [], [], [], []
        for c in clients:
            Xcm, ycm, Xcn, ycn = self.fed.clients[c]
            pick = np.random.default_rng(derive_seed(self.seed, c, rnd, 7)).choice(len(ycm), len(ycn), replace=False)
            for X_, y_, out, ctrl, tag in ((Xcm[pick], ycm[pick], sound_m, control_m, 1),
                                           (Xcn, ycn, sound_n, control_n, 2)):
                for start, sink in ((before, out), (initial, ctrl)):
                    if start is None:
                        continue
                    w, _ = self.task.train(start, _flat(X_), y_, epochs=self.config.local_epochs,
                                           seed=derive_seed(self.seed, c, rnd, tag))
                    sink.append(update_vector(w, start))
        return sound_m, sound_n, control_m, control_n

    def round_attack_rows(self, record, embeddings, updates, sound, clients, rnd: int) -> list[dict]:
        """RLA, FLA, GLA (paper) and GLA (sound, and its untrained-model control when ``sound`` carries one; when
        two or more clients were sampled) after round ``rnd``. The round's sound updates are kept for the test
        pooled over rounds (:meth:`pooled_gla_rows`)."""
        from eegprivacy.studies.federated import gla_sound as gs

        member, nonmember, control_m, control_n = (list(sound) + [[], []])[:4]
        has_control = len(control_m) == len(clients) and len(clients) > 0
        self.sound_rounds.append(gs.SoundRound(rnd, np.asarray(clients), np.stack(member), np.stack(nonmember),
                                               np.stack(control_m) if has_control else None,
                                               np.stack(control_n) if has_control else None))
        rows = []
        for attacker, kw in self.attackers(rnd, 11):
            rows += self.record_and_feature_rows(record, embeddings, rnd, attacker, kw)
            gla = SyntheticGradientAttack(**kw)  # real vs Gaussian vectors: no per-client reading
            rows += self._scored(gla, *gla.attack_data(updates), None, "gla_paper", attacker, rnd)
            if len(clients) >= 2:
                groups = np.concatenate([clients, clients])
                pairs = [(gs.ATTACK, member, nonmember)] + ([(gs.CONTROL, control_m, control_n)] if has_control else [])
                for attack, m_, n_ in pairs:  # the same attacker seed: the same client split for both
                    gla_sound = GradientLevelAttack(**kw)
                    X_, y_ = gla_sound.attack_data(np.stack(m_), np.stack(n_))
                    rows += self._scored(gla_sound, X_, y_, groups, attack, attacker, rnd, groups=groups)
        return rows

    def pooled_gla_rows(self) -> list[dict]:
        """The sound GLA (and its control, where computed) pooled over every attacked round of this cell: one test
        per seed, split by client, with its minimum detectable AUROC (:mod:`~eegprivacy.studies.federated.
        gla_sound`)."""
        from eegprivacy.studies.federated import gla_sound as gs

        rounds, rows = self.sound_rounds, []
        if not rounds:
            return rows
        with_control = all(r.control_member is not None for r in rounds)
        for attacker, kw in self.attackers(19):
            for attack, control in [(gs.POOLED, False)] + ([(gs.POOLED_CONTROL, True)] if with_control else []):
                X, y, groups = gs.pooled_data(rounds, control)
                if np.unique(groups).size < 2:  # fewer than two clients took part: no client split
                    continue
                # What gs.pooled_scores computes, with the fitted attack kept for the replicates.
                scores = self._evaluate(GradientLevelAttack(**kw), X, y, groups, attack, attacker, groups=groups)
                rows += _attack_rows(scores, attack, attacker, float("nan"))
                rows += gs.power_rows(scores, attack, attacker)
        return rows + [gs.rounds_row(rounds)]

    def grad_norms(self, weights, record, locals_: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample gradient norms of the global model, members and non-members (each client's model in eval
        mode with its own local state; experimenter-side, not what a client sends)."""
        import torch

        from eegprivacy.models.gradients import per_sample_grad_norms

        task, ce = self.task, torch.nn.CrossEntropyLoss()

        def norms(X, y, local):
            return per_sample_grad_norms(task.model(weights, local), task._inputs(X),
                                         task._targets(y), ce)

        if locals_ is None or all(local is None for local in locals_):
            net, (_, ym_i, _, yn_i, _, _) = task.model(weights), record
            gm = per_sample_grad_norms(net, task._inputs(_flat(self.Xm)), torch.from_numpy(ym_i), ce)
            gn = per_sample_grad_norms(net, task._inputs(_flat(self.Xn)), torch.from_numpy(yn_i), ce)
            return gm, gn
        return per_client(norms, self._members(True), locals_), per_client(norms, self._members(False), locals_)

    def client_level_rows(self, X_all: np.ndarray, y_all: np.ndarray) -> list[dict]:
        """CLA on every round's updates, labelled by client; clients seen fewer than twice cannot be split."""
        ids, counts = np.unique(y_all, return_counts=True)
        keep = np.isin(y_all, ids[counts >= 2])
        rows = []
        if np.unique(y_all[keep]).size < 2:
            return rows
        for attacker, kw in self.attackers(13):
            cla = ClientLevelAttack(n_components=self.config.cla_components, **kw)
            with warnings.catch_warnings():  # many clients, few updates each: sklearn's "regression?" hint
                warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
                scores = cla.evaluate(X_all[keep], y_all[keep], test_size=self.config.attack_test_size)
            rows += _attack_rows(scores, "cla", attacker, float("nan"))
        return rows


def client_train_loss(result, rnd: int) -> float:
    """The sampled clients' mean last-epoch train loss in round ``rnd`` (train mode): the server's FedAvg-weighted
    figure where clients send it (no DP), else the experimenter-side diagnostics the clients kept (a DP client
    never sends its loss), weighted the same way."""
    history = {h["round"]: h for h in result.history}
    sent = history.get(rnd, {}).get("train_loss")
    if sent is not None:
        return float(sent)
    kept = (result.diagnostics or {}).get(rnd, {})
    if not kept:
        return float("nan")
    n = np.array([result.n_examples[c] for c in kept], dtype=float)
    return float(n @ np.array([kept[c].get("train_loss", np.nan) for c in kept]) / n.sum())


def loss_rows(record, history: dict, rnd: int, client_loss: float | None = None) -> list[dict]:
    """Mean member (train) and non-member (test) loss of the global model, their gap, and the sampled clients'
    weighted last-epoch loss (train mode; ``client_loss``, else FedAvg's from ``history``). With DP that last one
    is an experimenter-side diagnostic (``sent_to_server`` False), not something the server received."""
    lm, ln = record[4], record[5]
    if client_loss is None:
        client_loss = float(history.get(rnd, {}).get("train_loss", float("nan")))
    sent = "train_loss" in history.get(rnd, {})
    return [{"metric": "train_loss", "value": float(lm.mean()), "round": rnd},
            {"metric": "test_loss", "value": float(ln.mean()), "round": rnd},
            {"metric": "loss_gap", "value": float(ln.mean() - lm.mean()), "round": rnd},
            {"metric": "client_train_loss", "round": rnd, "value": float(client_loss), "sent_to_server": sent}]


def grad_norm_rows(norms: dict, rnd: int, last: bool) -> list[dict]:
    """Mean and median gradient norm of members and non-members; in the last round also 21 quantiles."""
    rows = []
    for who, g in norms.items():
        rows += [{"metric": f"grad_norm_{who}_mean", "value": float(g.mean()), "round": rnd},
                 {"metric": f"grad_norm_{who}_median", "value": float(np.median(g)), "round": rnd}]
        if last:
            rows += [{"metric": f"grad_norm_{who}_q{int(round(q * 100)):03d}", "value": float(v), "round": rnd}
                     for q, v in zip(QUANTILES, np.quantile(g, QUANTILES))]
    return rows


def cell_rows(cell: dict, seed: int, trials, config: FederatedMIAConfig,
              arrays_dir: str | Path | None = None) -> list[dict]:
    """Everything one (model, ε, seed) federation yields, as tidy rows; with ``arrays_dir``, also the raw
    per-round arrays (every sampled client's update vector, every trial's gradient norm) and the cell's
    client-bootstrap replicates (``replicate_keys``, ``replicates``: one (B,) vector per summary key, averaged over
    rounds; :mod:`~eegprivacy.studies.federated.replicates`) as ``<arrays_dir>/<cell key>.npz``."""
    from eegprivacy.models.gradients import update_vector
    from eegprivacy.signal.csp import MODEL_INPUT

    fed = Federation(trials, seed_split(trials, config, seed), MODEL_INPUT[cell["model"]], config.csp_components)
    task, result = federate(cell, seed, fed, config)
    scoring = Scoring(task, fed, config, seed, result=result)
    replicates = scoring.replicates = Replicates(len(fed.clients), config.subject_bootstrap)
    rounds = sorted(result.sent)
    history = {h["round"]: h for h in result.history}
    rows, cla_X, cla_y, norms_m, norms_n = [], [], [], [], []
    rows += scoring.untrained_control_rows(result.sent[rounds[0]])
    for i, rnd in enumerate(rounds):
        after = result.sent[rounds[i + 1]] if i + 1 < len(rounds) else result.weights
        before = result.sent[rnd]
        locals_ = scoring.client_locals(rnd)
        rows += utility_rows(task, after, fed, rnd, locals_, replicates)
        record = scoring.record(after, locals_)
        rows += loss_rows(record, history, rnd, client_train_loss(result, rnd))
        replicates.losses(record[4], scoring.cm, record[5], scoring.cn)
        kept = (result.diagnostics or {}).get(rnd, {})
        replicates.client_train_loss(client_train_loss(result, rnd),
                                     {c: kept[c].get("train_loss", np.nan) for c in kept}, result.n_examples)
        embeddings = scoring.embeddings(after, locals_)
        clients = sorted(result.updates[rnd])
        updates = np.stack([update_vector(result.updates[rnd][c], before) for c in clients])
        cla_X.append(updates)
        cla_y.append(np.array(clients))
        if config.attacked(rnd):
            sound = scoring.sound_updates(clients, before, rnd, initial=result.sent[rounds[0]])
            rows += scoring.round_attack_rows(record, embeddings, updates, sound, clients, rnd)
        gm, gn = scoring.grad_norms(after, record, locals_)
        norms_m.append(gm)
        norms_n.append(gn)
        rows += grad_norm_rows({"member": gm, "nonmember": gn}, rnd, last=i + 1 == len(rounds))
        replicates.grad_norms({"member": gm, "nonmember": gn}, {"member": scoring.cm, "nonmember": scoring.cn},
                              QUANTILES if i + 1 == len(rounds) else None)
    X_all, y_all = np.concatenate(cla_X), np.concatenate(cla_y)
    rows += scoring.pooled_gla_rows()
    rows += scoring.client_level_rows(X_all, y_all)
    if arrays_dir is not None:
        save_arrays(Path(arrays_dir) / f"{config_key({**cell, 'seed': seed})}.npz",
                    rounds=np.repeat(rounds, [len(c) for c in cla_y]), clients=y_all,
                    updates=X_all.astype(np.float32), grad_norm_member=np.stack(norms_m).astype(np.float32),
                    grad_norm_nonmember=np.stack(norms_n).astype(np.float32), **replicates.arrays())
    rows.append({"metric": "noise_scale", "value": task.dp.noise_scale if task.dp else 0.0})
    # 1 where something data-dependent travels un-noised beside the DP weights (shared BatchNorm statistics).
    rows.append({"metric": "unnoised_channels", "value": float(len(task.unnoised_channels) if task.private else 0),
                 "detail": ",".join(task.unnoised_channels) if task.private else ""})
    rows.append({"metric": "n_clients", "value": float(len(fed.clients))})
    return rows


def save_arrays(path: str | Path, **arrays) -> None:
    """Atomically write a cell's raw arrays: client indices (never subject ids), rounds, update vectors (new −
    previous global weights, the rows the server saw) and per-trial gradient norms of the global model after
    each round (members and non-members, in the federation's order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)
