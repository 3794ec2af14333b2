"""Study B's one-run privacy audit and its deployable-ε federation (stage ``federated_audit``).

**The audit** (Steinke, Nasr and Jagielski 2023; the bound is :mod:`eegprivacy.attacks.one_run_audit`). Every
DP setting of study B trains once more per seed with canaries planted: ``canaries_per_client`` out-of-distribution
records in each client's training set (:func:`~eegprivacy.attacks.canaries.outlier_canaries`: synthetic feature
vectors after the client's preprocessing, labels at random), each included with probability ½. The attacker is
the server, which sees every update a client returns (FedAvg without secure aggregation); a canary's score is
the sum, over the rounds its client trained in, of how much that client's returned model raised the canary's
logit margin over the model it was sent (:func:`update_scores`). The k highest scores of a run are guessed "in",
the k lowest "out" (k = ``guesses``, fixed in advance), and the runs' guesses are pooled: the runs together are
one algorithm in which each canary enters one run, so the theorem holds for all m canaries at once. The bound is
on ε at the certificate's δ and the stated confidence.

What the bound is compared with. The canaries never pass through the preprocessing, so they audit the training
mechanism and its certificate (``certified_epsilon_rdp``/``_pld``: ε per record over every step of every round,
the client counted in all rounds): for the paper's per-step Laplace step, the certified calibration (2·sqrt(d)·ε
per step) composed over the steps whose batch holds the record; for DP-SGD, the Poisson-subsampled Gaussian over
all its steps. Neither covers the preprocessing: the paper's member-fitted CSP travels un-noised (so the paper
protocol's end-to-end guarantee is "none", as ``federated_accounting`` says), and the pooled CSP's class
covariances reach the server un-noised. ``epsilon_excludes`` says so on every row.

**The deployable-ε federation.** Record-level DP-SGD inside each client
(:class:`~eegprivacy.federated.dp_sgd.GaussianExampleDP`) with σ calibrated by RDP so that the total per-record
ε over all rounds is the row's ε at δ (PLD printed beside it), on the best member-free preprocessing of the
controlled table (``dp_sgd_preprocessing``). Its utility and attack − control come from the controlled table's
own code (:func:`~eegprivacy.studies.federated.control.cell_rows`: the same arms, attackers, subjects+seeds
bootstrap and Holm family), so the rows read like ``federated_control``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.federated.preprocessing import PREPROCESSING
from eegprivacy.params import Config, param
from eegprivacy.validation import CLIP_NORM, DELTA, EPSILONS_OR_INF, FRACTION_OPEN, POSITIVE, TEXT, count, options

__all__ = ["FederatedAuditConfig", "settings", "plant_canaries", "update_scores", "canary_arrays", "audit_arrays",
           "audit_cell_rows", "audit_summary", "certified_epsilons"]


@dataclass(frozen=True)
class FederatedAuditConfig(Config):
    """``federated_audit``: the canaries, the guesses, and the two protocols' grids. Training knobs come from
    ``federated_mia``, the controlled table's (calibration block, control folds, attackers) from
    ``federated_control``."""

    dataset: str = param(TEXT, doc="a key of federated_mia.datasets")
    seeds: int = param(count(1, "seeds"), doc="seeds 0..n-1: one audited run per setting each (guesses pooled) "
                                              "and, for DP-SGD, the controlled table's federations")
    canaries_per_client: int = param(count(1, "canaries"), doc="canaries planted in every client, each included "
                                                                "with probability 1/2")
    canary_radius: float = param(POSITIVE, doc="distance of a canary from the data's mean, in per-feature SDs "
                                               "times sqrt(d)")
    guesses: int = param(count(1, "guesses"), doc="per run: the k highest scores guessed in, the k lowest out")
    confidence: float = param(FRACTION_OPEN, default=0.95, doc="of the ε lower bound")
    delta: float = param(DELTA, default=1e-5, doc="the certificates' δ, and the bound's")
    paper_preprocessing: str = param(options(tuple(PREPROCESSING)), default="pooled_csp",
                                     doc="the real trials beside the canaries (which skip it)")
    paper_epsilons: list = param(EPSILONS_OR_INF, default=[math.inf, 10.0, 5.0, 1.0],
                                 doc="per-step ε of the paper's Laplace step (.inf: no DP)")
    dp_sgd_preprocessing: str = param(options(tuple(PREPROCESSING)), default="pooled_csp",
                                      doc="the deployable row's client preprocessing (member-free)")
    dp_sgd_epsilons: list = param(EPSILONS_OR_INF, default=[math.inf, 8.0, 4.0, 1.0],
                                  doc="total per-record ε of DP-SGD at delta (.inf: no DP)")
    dp_sgd_num_rounds: int = param(count(1, "rounds"), default=20)
    dp_sgd_local_epochs: int = param(count(1, "epochs"), default=1, doc="1/q Poisson steps each")
    dp_sgd_sample_rate: float = param(FRACTION_OPEN, default=0.5, doc="Poisson sampling rate q of a record")
    dp_sgd_learning_rate: float = param(POSITIVE, default=0.01, doc="the clients' Adam step size under DP-SGD")
    dp_sgd_clip_norm: float = param(CLIP_NORM, default=1.0, doc="per-example L2 clip C")
    bootstrap: int = param(count(1, "resamples"), default=2000, doc="subjects+seeds resamples of those rows")


def dp_sgd_steps(config: FederatedAuditConfig) -> int:
    """DP-SGD steps a record can be sampled in: every local step of every round (its client counted in all)."""
    from eegprivacy.federated.dp_sgd import GaussianExampleDP

    per_epoch = GaussianExampleDP(config.dp_sgd_clip_norm, 0.0, config.dp_sgd_sample_rate).steps_per_epoch
    return config.dp_sgd_num_rounds * config.dp_sgd_local_epochs * per_epoch


def settings(config: FederatedAuditConfig, training) -> list[dict]:
    """Every (protocol, ε) the stage audits, as cells: the paper's per-step ε grid on its preprocessing and the
    DP-SGD total-ε grid (σ calibrated by RDP) on the member-free one."""
    from eegprivacy.federated.dp_sgd import calibrate_noise_multiplier
    from eegprivacy.studies.federated.mia import mechanism

    cells = []
    for eps in (float(e) for e in config.paper_epsilons):
        cells.append({"protocol": "paper_laplace", "model": "simplenet", "preprocessing": config.paper_preprocessing,
                      "epsilon": eps, "epsilon_unit": "per_step", "mechanism": mechanism(eps),
                      "num_rounds": training.num_rounds, "local_epochs": training.local_epochs})
    steps = dp_sgd_steps(config)
    for eps in (float(e) for e in config.dp_sgd_epsilons):
        sigma = (calibrate_noise_multiplier(eps, config.delta, config.dp_sgd_sample_rate, steps)
                 if math.isfinite(eps) else 0.0)
        cells.append({"protocol": "dp_sgd", "model": "simplenet", "preprocessing": config.dp_sgd_preprocessing,
                      "epsilon": eps, "epsilon_unit": "total_per_record",
                      "mechanism": "gaussian_example" if math.isfinite(eps) else "none",
                      "noise_multiplier": sigma, "sample_rate": config.dp_sgd_sample_rate,
                      "clip_norm": config.dp_sgd_clip_norm, "num_rounds": config.dp_sgd_num_rounds,
                      "local_epochs": config.dp_sgd_local_epochs, "learning_rate": config.dp_sgd_learning_rate,
                      "standardise": True})
    return cells


def training_of(cell: dict, training, n_members: int):
    """federated_mia's knobs with the cell's rounds, epochs and (DP-SGD) learning rate; the no-DP DP-SGD row takes
    mini-batches of the expected Poisson batch size q·n (so its steps per epoch match DP-SGD's)."""
    fed = replace(training, num_rounds=int(cell["num_rounds"]), local_epochs=int(cell["local_epochs"]),
                  learning_rate=float(cell.get("learning_rate", training.learning_rate)))
    if cell["protocol"] == "dp_sgd" and cell["mechanism"] == "none":
        fed = replace(fed, batch_size=max(1, round(float(cell["sample_rate"]) * n_members)))
    return fed


def control_of(cell: dict, control):
    """The controlled table's config run with this cell's rounds and epochs (no per-model override)."""
    return replace(control, models=["simplenet"], preprocessing=[cell["preprocessing"]], epsilons=[cell["epsilon"]],
                   num_rounds=int(cell["num_rounds"]), local_epochs=int(cell["local_epochs"]), per_model={})


def _margin(task, weights, X, y) -> np.ndarray:
    """Logit of the canary's label minus the largest other logit."""
    logits = task.logits(weights, X.reshape(len(X), -1))
    idx = task._targets(y).numpy()
    own = logits[np.arange(len(idx)), idx]
    logits[np.arange(len(idx)), idx] = -np.inf
    return own - logits.max(axis=1)


def update_scores(task, result, canaries) -> np.ndarray:
    """Per canary: Σ over the rounds its client trained in of (margin under the weights the client returned −
    margin under the weights it was sent). What the server can compute from the updates it receives."""
    scores = np.zeros(canaries.m)
    for rnd, updates in result.updates.items():
        before = _margin(task, result.sent[rnd], canaries.X, canaries.y)  # one pass for every client's canaries
        for client, weights in updates.items():
            rows = np.flatnonzero(canaries.owner == client)
            if rows.size:
                scores[rows] += _margin(task, weights, canaries.X[rows], canaries.y[rows]) - before[rows]
    return scores


def _clients(cell: dict, seed: int, trials, training, control):
    from eegprivacy.federated.preprocessing import calibration_split
    from eegprivacy.studies.federated.control import client_preprocessing
    from eegprivacy.studies.federated.mia import seed_split

    member = seed_split(trials, training, seed)
    calibration = calibration_split(trials.y, trials.metadata["subject"], member, control.calibration_fraction, seed)
    return client_preprocessing(trials, member, calibration, cell["preprocessing"], cell["model"], control,
                                training.csp_components, seed, standardise=bool(cell.get("standardise", False)))


def mean_members(clients) -> int:
    """A client's mean number of member trials (what sets the no-DP row's batch size)."""
    return max(1, int(round(np.mean([len(c[1]) for c in clients.clients]))))


def plant_canaries(seed: int, clients, classes, config: FederatedAuditConfig, plant: bool = True) -> tuple:
    """(canaries, the clients' training sets): ``config.canaries_per_client`` canaries per client drawn around
    the members (seeded from ``seed``), each included with probability ½, the included ones appended to their
    client's members. ``plant=False`` is the audit's null: the same canaries drawn, none in any training set, so
    their coins cannot reach the model (the calibration case ``study_b.one_run_bound`` runs it)."""
    from eegprivacy.attacks.canaries import outlier_canaries
    from eegprivacy.federated.task import derive_seed
    from eegprivacy.studies.federated.control import ClientSet

    members = np.concatenate([c[0].reshape(len(c[0]), -1) for c in clients.clients])
    canaries = outlier_canaries(members, np.unique(classes), config.canaries_per_client, len(clients.clients),
                                config.canary_radius, derive_seed(seed, 43))
    if not plant:
        return canaries, clients
    planted = []
    for k, (Xm, ym, Xn, yn) in enumerate(clients.clients):
        Xc, yc = canaries.planted(k)
        planted.append((np.concatenate([Xm.reshape(len(Xm), -1), Xc]), np.concatenate([ym, yc]), Xn, yn))
    return canaries, ClientSet(planted, clients.calibration)


def canary_arrays(task, result, canaries) -> dict:
    """Every canary's score (:func:`update_scores`), coin and owner: what :func:`audit_summary` reads."""
    return {"canary/score": update_scores(task, result, canaries), "canary/coin": canaries.included,
            "canary/owner": canaries.owner}


def audit_arrays(cell: dict, seed: int, clients, classes, training, config: FederatedAuditConfig,
                 plant: bool = True) -> dict:
    """One audited run: the cell's federation (``training``: its knobs) trained once on ``clients`` with the
    canaries planted (:func:`plant_canaries`; ``classes``: the labels a canary may take); every canary's score,
    coin and owner."""
    from eegprivacy.studies.federated.mia import federate

    canaries, trained = plant_canaries(seed, clients, classes, config, plant)
    return canary_arrays(*federate(cell, seed, trained, training), canaries)


def audit_cell_rows(cell: dict, seed: int, trials, training, control, config: FederatedAuditConfig,
                    arrays_dir: str | Path) -> list[dict]:
    """One (protocol, ε, seed): the audited run's guesses (rows ``canary_guesses``, ``canary_right``) and, for a
    DP-SGD cell, the controlled table's rows (its arms' utility and attack AUROCs). Arrays go to
    ``<arrays_dir>/<cell key>.npz`` (what :func:`audit_summary` and the controlled summary read)."""
    from eegprivacy.attacks.one_run_audit import guesses
    from eegprivacy.pipeline.keys import config_key
    from eegprivacy.studies.federated.control import arm_rows, cell_arrays, pooled_auroc

    clients = _clients(cell, seed, trials, training, control)
    fed = training_of(cell, training, mean_members(clients))
    arrays = audit_arrays(cell, seed, clients, trials.y, fed, config)
    r, v = guesses(arrays["canary/score"], arrays["canary/coin"], config.guesses, config.guesses)
    rows = [{"metric": "canary_guesses", "value": float(r), "chance": float("nan")},
            {"metric": "canary_right", "value": float(v), "chance": 0.5 * r},
            {"metric": "canary_auroc", "value": pooled_auroc(arrays["canary/score"], arrays["canary/coin"]),
             "chance": 0.5}]
    if cell["protocol"] == "dp_sgd":
        arm_table, arm_arrays = arm_rows(cell_arrays(cell, seed, trials, fed, control_of(cell, control)))
        rows += arm_table
        arrays.update(arm_arrays)
    path = Path(arrays_dir) / f"{config_key({**cell, 'seed': seed})}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)
    return rows


def certified_epsilons(cell: dict, *, delta: float, dim: int, n_members: int, batch_size: int, clip_norm: float,
                       steps: int) -> dict:
    """ε per record of the training at ``delta`` by RDP and by PLD (∞ without DP): what the canaries audit."""
    from eegprivacy.privacy.accounting import FederatedSchedule, federated_event, make_accountant

    if not math.isfinite(float(cell["epsilon"])):
        return {"certified_epsilon_rdp": math.inf, "certified_epsilon_pld": math.inf}
    if cell["protocol"] == "dp_sgd":
        from eegprivacy.federated.dp_sgd import total_epsilon

        return {f"certified_epsilon_{a}": total_epsilon(cell["noise_multiplier"], cell["sample_rate"], steps, delta,
                                                         accountant=a) for a in ("rdp", "pld")}
    schedule = FederatedSchedule.for_client(int(cell["num_rounds"]), int(cell["local_epochs"]), n_members,
                                            batch_size)
    event = federated_event(float(cell["epsilon"]), calibration="certified", unit="example", dim=dim,
                            schedule=schedule, clip_norm=clip_norm)
    return {f"certified_epsilon_{a}": float(make_accountant(a).epsilon(event, delta).epsilon) for a in ("rdp", "pld")}


def audit_summary(cells: list[tuple[dict, int, dict]], config: FederatedAuditConfig, certified: dict) -> pd.DataFrame:
    """One row per (protocol, ε): the pooled guesses of its runs, the ε lower bound at ``confidence`` and δ,
    what the canaries could certify at most, the certified ε (RDP, PLD) and the bound's ratio to the smaller."""
    from eegprivacy.attacks.one_run_audit import epsilon_lower_bound, guesses

    groups: dict = {}
    for cell, seed, arrays in cells:
        groups.setdefault((cell["protocol"], float(cell["epsilon"])), []).append((cell, seed, arrays))
    rows = []
    for (protocol, eps), runs in groups.items():
        cell = runs[0][0]
        r = v = m = 0
        for _, _, arrays in runs:
            ri, vi = guesses(arrays["canary/score"], arrays["canary/coin"], config.guesses, config.guesses)
            r, v, m = r + ri, v + vi, m + len(arrays["canary/score"])
        bound = epsilon_lower_bound(m, r, v, delta=config.delta, confidence=config.confidence)
        cert = certified[(protocol, eps)]
        smallest = min(cert.values())
        rows.append({"protocol": protocol, "preprocessing": cell["preprocessing"], "epsilon": eps,
                     "epsilon_unit": cell["epsilon_unit"], "mechanism": cell["mechanism"],
                     "noise_multiplier": cell.get("noise_multiplier", float("nan")),
                     "num_rounds": cell["num_rounds"], "local_epochs": cell["local_epochs"], "runs": len(runs),
                     "canaries": m, "guesses": r, "right": v, "confidence": config.confidence, "delta": config.delta,
                     "empirical_epsilon": bound,
                     "max_certifiable_epsilon": epsilon_lower_bound(m, r, r, config.delta, config.confidence),
                     **cert, "empirical_over_certified": bound / smallest if math.isfinite(smallest) else float("nan"),
                     "exceeds_certified": bool(bound > smallest),
                     "epsilon_excludes": PREPROCESSING[cell["preprocessing"]].outside_training
                     + ("; each client's calibration-block feature mean and SD" if cell.get("standardise") else "")
                     + ("; the member count a client reports for FedAvg's weights (public by the protocol, but "
                        "adding or removing a record changes it)" if cell["protocol"] == "dp_sgd" else "")})
    return pd.DataFrame(rows)
