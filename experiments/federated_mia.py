"""Stage ``federated_mia`` (study B): per-subject FedAvg with per-step Laplace gradient DP, attacked per round.

One invocation per dataset. Per cell (model, ε, seed): every subject is a client, its trials split 80/20 into
members and non-members (``member_split``, a new split per seed); each client fits its own CSP on its members only; FedAvg runs
in-process through Flower's strategy code with ``clients_per_round`` clients sampled per round (seeded, so a
cell is reproducible). After every round the global model is scored on every client's non-members (utility)
and attacked: RLA, FLA, GLA as the paper ran it (real vs matched Gaussian updates) and GLA sound (same global
model, member vs non-member batches of equal size, split by client); CLA once per cell on the updates of all
rounds. ε is per mechanism application (one local step), not a cumulative guarantee.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.attacks.membership import (
    ATTACKERS,
    ClientLevelAttack,
    FeatureLevelAttack,
    GradientLevelAttack,
    RecordLevelAttack,
    SyntheticGradientAttack,
)
from eegprivacy.atomic import atomic_path
from eegprivacy.attacks.metrics import auroc
from eegprivacy.evaluation.metrics import classification_metrics, confusion_counts
from eegprivacy.params import ParamsError, load_params
from eegprivacy.tracking import required_tags
from eegprivacy.tracking.sweep import PrefetchedCells, SweepRunner, config_key, expand_grid

NAME = "federated-mia"
HELP = ("Study B: per-subject FedAvg (SimpleNet/EEGNet on per-client CSP) with per-step Laplace gradient DP, "
        "record/feature/gradient/client-level membership attacks per round; one dataset per call.")

STAGE = "federated_mia"
UTILITY = ("accuracy", "precision", "recall", "f1", "auroc", "loss")
ATTACK_KEEP = ("accuracy", "balanced_accuracy", "auroc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001")
QUANTILES = np.linspace(0.0, 1.0, 21)
NOTE = ("epsilon is per mechanism application (one local optimiser step on one batch gradient), not a "
        "cumulative guarantee over steps, epochs or rounds")


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", default="eegmat", help="eegmat (real) or synthetic_mi (SYNTHETIC)")
    parser.add_argument("--params", default="params/federated_mia.yaml")
    parser.add_argument("--out", help="tidy rows (default metrics/federated_mia_<dataset>.csv)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--arrays", help="folder for every cell's raw per-round arrays: client update vectors and "
                                         "per-trial gradient norms (default data/federated_mia/<dataset>)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing cells ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it: each cell is a pure function of its config and seed")


def validate(params: dict, source) -> None:
    """Range checks the generic validator cannot express (ε = ∞ is allowed here: the no-DP baseline)."""
    def bad(key, must):
        raise ParamsError(f"{source}: federated_mia.{key} = {params.get(key)!r} is invalid; it must be {must}. "
                          f"Fix it in {source} and run the stage again (nothing was computed or written)")
    eps = params.get("epsilons")
    if not isinstance(eps, list) or not eps or not all(isinstance(e, (int, float)) and e > 0 for e in eps):
        bad("epsilons", "a non-empty list of ε > 0 (.inf for no DP)")
    for key in ("num_rounds", "local_epochs", "clients_per_round", "batch_size", "seeds", "csp_components"):
        if not isinstance(params.get(key), int) or params[key] < 1:
            bad(key, "a whole number ≥ 1")
    if not 0 < float(params.get("test_size", 0)) < 1:
        bad("test_size", "a fraction in (0, 1)")
    if not float(params.get("clip_norm", 0)) > 0 or not float(params.get("learning_rate", 0)) > 0:
        bad("clip_norm/learning_rate", "positive")
    if not set(params.get("models") or ["?"]) <= {"simplenet", "eegnet"}:
        bad("models", "a non-empty subset of [simplenet, eegnet]")
    if not set(params.get("attackers") or ["?"]) <= set(ATTACKERS):
        bad("attackers", f"a non-empty subset of [{', '.join(ATTACKERS)}]")
    rounds = params.get("attack_rounds", "all")
    if rounds != "all" and not (isinstance(rounds, list) and rounds and all(
            isinstance(r, int) and 1 <= r <= params["num_rounds"] for r in rounds)):
        bad("attack_rounds", f"'all' or a non-empty list of rounds in 1..num_rounds ({params['num_rounds']})")


def attacked(rnd: int, params: dict) -> bool:
    """Whether the per-round attacks (RLA, FLA, GLA) run after round ``rnd``. The rest of a round's rows
    (utility, losses, gradient norms) and the CLA, which pools every round's updates, never skip a round; the
    numbers of an attacked round do not depend on which other rounds are attacked (every seed derives from
    the cell seed and the round)."""
    rounds = params.get("attack_rounds", "all")
    return rounds == "all" or int(rnd) in rounds


def load_trials(name: str, spec: dict):
    """The dataset's trials under the paradigm the params name (shared with the SuperNode's ClientApp)."""
    from eegprivacy.federated.cohort import load_trials as load

    return load(name, spec)


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


def utility_rows(task, weights, fed: Federation, rnd: int) -> list[dict]:
    """Global model on every client's non-members: pooled metrics, client means, per-client accuracy."""
    rows, per_client = [], []
    for k, (_, _, Xn, yn) in enumerate(fed.clients):
        proba = task.predict_proba(weights, Xn.reshape(len(Xn), -1))
        loss = float(task.losses(weights, Xn.reshape(len(Xn), -1), yn).mean())
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
    return rows


def federate(config: dict, seed: int, fed: Federation, params: dict):
    """One seeded FedAvg run of the cell's model at its ε, keeping every round's client updates."""
    import torch

    from eegprivacy.federated import run_fedavg
    from eegprivacy.federated.dp import LaplaceGradientDP
    from eegprivacy.federated.torch_task import TorchTask

    torch.set_num_threads(1)
    eps = float(config["epsilon"])
    dp = LaplaceGradientDP(float(params["clip_norm"]), eps) if math.isfinite(eps) else None
    task = TorchTask(config["model"], fed.input_shape, learning_rate=float(params["learning_rate"]),
                     batch_size=int(params["batch_size"]), dp=dp)
    result = run_fedavg(task, fed.partitions(), int(params["num_rounds"]), int(params["local_epochs"]), seed,
                        "inprocess", keep_updates=True,
                        strategy_factory=sampling_strategy(params["clients_per_round"], seed))
    return task, result


def untrained_control_rows(task, initial, Xm, ym, Xn, yn, params: dict, seed: int) -> list[dict]:
    """Negative control (round 0): the record- and feature-level attacks on the untrained initial model, which
    has seen no trial. Each client's CSP and its scaling are fitted on its members only, so members and
    non-members can differ before any training; whatever these attacks find above chance comes from that
    pipeline, not from the federated model, and the trained-model scores should be read against it."""
    from eegprivacy.federated.task import derive_seed

    flat = lambda X: X.reshape(len(X), -1)  # noqa: E731
    ym_i, yn_i = task._targets(ym).numpy(), task._targets(yn).numpy()
    pm, pn = task.predict_proba(initial, flat(Xm)), task.predict_proba(initial, flat(Xn))
    lm, ln = task.losses(initial, flat(Xm), ym), task.losses(initial, flat(Xn), yn)
    em, en = task.embed(initial, flat(Xm)), task.embed(initial, flat(Xn))
    half = float(params["attack_test_size"])
    rows = []
    for attacker in params["attackers"]:
        kw = {"attacker": attacker, "n_estimators": int(params["rf_estimators"]),
              "random_state": derive_seed(seed, 0, 11)}
        rla = RecordLevelAttack(**kw)
        rows += _attack_rows(rla.evaluate(*rla.attack_data(pm, ym_i, pn, yn_i, lm, ln), test_size=half),
                             "rla_untrained_control", attacker, 0)
        fla = FeatureLevelAttack(**kw)
        rows += _attack_rows(fla.evaluate(*fla.attack_data(em, en), test_size=half), "fla_untrained_control",
                             attacker, 0)
    return rows


def seed_split(trials, params: dict, seed: int) -> np.ndarray:
    """The member mask of one seed. Each seed draws its own 80/20 split per subject (from ``split_seed`` and the
    seed), so the spread across seeds covers the split as well as initialisation, client sampling and noise."""
    from eegprivacy.federated.splits import member_split, run_split_seed

    return member_split(trials.y, trials.metadata["subject"], float(params["test_size"]),
                        run_split_seed(int(params["split_seed"]), int(seed)))


def cell_rows(config: dict, seed: int, trials, params: dict, arrays_dir: str | Path | None = None) -> list[dict]:
    """Everything one (model, ε, seed) federation yields, as tidy rows; with ``arrays_dir``, also the raw
    per-round arrays (every sampled client's update vector, every trial's gradient norm) as
    ``<arrays_dir>/<cell key>.npz``."""
    import torch

    from eegprivacy.federated.task import derive_seed
    from eegprivacy.models.gradients import per_sample_grad_norms, update_vector
    from eegprivacy.signal.csp import MODEL_INPUT

    fed = Federation(trials, seed_split(trials, params, seed), MODEL_INPUT[config["model"]],
                     int(params["csp_components"]))
    task, result = federate(config, seed, fed, params)
    dp = task.dp
    epochs = int(params["local_epochs"])
    Xm, ym, _ = fed.pooled(True)
    Xn, yn, _ = fed.pooled(False)
    flat = lambda X: X.reshape(len(X), -1)  # noqa: E731
    attackers = list(params["attackers"])
    n_trees = int(params["rf_estimators"])
    half = float(params["attack_test_size"])
    rounds = sorted(result.sent)
    history = {h["round"]: h for h in result.history}
    rows, cla_X, cla_y, norms_m, norms_n = [], [], [], [], []
    ce = torch.nn.CrossEntropyLoss()
    rows += untrained_control_rows(task, result.sent[rounds[0]], Xm, ym, Xn, yn, params, seed)
    for i, rnd in enumerate(rounds):
        after = result.sent[rounds[i + 1]] if i + 1 < len(rounds) else result.weights
        before = result.sent[rnd]
        rows += utility_rows(task, after, fed, rnd)
        # Record level: [p0, p1, loss] of members vs non-members.
        pm, pn = task.predict_proba(after, flat(Xm)), task.predict_proba(after, flat(Xn))
        lm, ln = task.losses(after, flat(Xm), ym), task.losses(after, flat(Xn), yn)
        rows += [{"metric": "train_loss", "value": float(lm.mean()), "round": rnd},
                 {"metric": "test_loss", "value": float(ln.mean()), "round": rnd},
                 {"metric": "loss_gap", "value": float(ln.mean() - lm.mean()), "round": rnd},
                 {"metric": "client_train_loss", "round": rnd,  # FedAvg's weighted last-epoch loss (train mode)
                  "value": float(history.get(rnd, {}).get("train_loss", float("nan")))}]
        ym_i, yn_i = task._targets(ym).numpy(), task._targets(yn).numpy()
        em, en = task.embed(after, flat(Xm)), task.embed(after, flat(Xn))
        clients = sorted(result.updates[rnd])
        updates = np.stack([update_vector(result.updates[rnd][c], before) for c in clients])
        cla_X.append(updates)
        cla_y.append(np.array(clients))
        # Sound GLA: the same global model trained by the same local procedure on equally many member and
        # non-member trials of each sampled client.
        sound_m, sound_n = [], []
        for c in clients if attacked(rnd, params) else ():
            Xcm, ycm, Xcn, ycn = fed.clients[c]
            pick = np.random.default_rng(derive_seed(seed, c, rnd, 7)).choice(len(ycm), len(ycn), replace=False)
            for X_, y_, out, tag in ((Xcm[pick], ycm[pick], sound_m, 1), (Xcn, ycn, sound_n, 2)):
                w, _ = task.train(before, flat(X_), y_, epochs=epochs, seed=derive_seed(seed, c, rnd, tag))
                out.append(update_vector(w, before))
        for attacker in attackers if attacked(rnd, params) else ():
            kw = {"attacker": attacker, "n_estimators": n_trees, "random_state": derive_seed(seed, rnd, 11)}
            rla = RecordLevelAttack(**kw)
            rows += _attack_rows(rla.evaluate(*rla.attack_data(pm, ym_i, pn, yn_i, lm, ln), test_size=half),
                                 "rla", attacker, rnd)
            fla = FeatureLevelAttack(**kw)
            rows += _attack_rows(fla.evaluate(*fla.attack_data(em, en), test_size=half), "fla", attacker, rnd)
            gla = SyntheticGradientAttack(**kw)
            rows += _attack_rows(gla.evaluate(*gla.attack_data(updates), test_size=half),
                                 "gla_paper", attacker, rnd)
            if len(clients) >= 2:
                sound = GradientLevelAttack(**kw)
                X_, y_ = sound.attack_data(np.stack(sound_m), np.stack(sound_n))
                rows += _attack_rows(sound.evaluate(X_, y_, test_size=half, groups=np.concatenate([clients,
                                                                                                     clients])),
                                     "gla_sound", attacker, rnd)
        # Per-sample gradient norms of the global model, members vs non-members.
        net = task.model(after)
        gm = per_sample_grad_norms(net, task._inputs(flat(Xm)), torch.from_numpy(ym_i), ce)
        gn = per_sample_grad_norms(net, task._inputs(flat(Xn)), torch.from_numpy(yn_i), ce)
        norms_m.append(gm)
        norms_n.append(gn)
        for who, g in (("member", gm), ("nonmember", gn)):
            rows += [{"metric": f"grad_norm_{who}_mean", "value": float(g.mean()), "round": rnd},
                     {"metric": f"grad_norm_{who}_median", "value": float(np.median(g)), "round": rnd}]
            if i + 1 == len(rounds):
                rows += [{"metric": f"grad_norm_{who}_q{int(round(q * 100)):03d}", "value": float(v),
                          "round": rnd} for q, v in zip(QUANTILES, np.quantile(g, QUANTILES))]
    # Client level: every round's updates, labelled by client; clients seen fewer than twice cannot be split.
    X_all, y_all = np.concatenate(cla_X), np.concatenate(cla_y)
    ids, counts = np.unique(y_all, return_counts=True)
    keep = np.isin(y_all, ids[counts >= 2])
    if np.unique(y_all[keep]).size >= 2:
        for attacker in attackers:
            cla = ClientLevelAttack(attacker=attacker, n_components=int(params["cla_components"]),
                                    n_estimators=n_trees, random_state=derive_seed(seed, 13))
            with warnings.catch_warnings():  # many clients, few updates each: sklearn's "regression?" hint
                warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
                scores = cla.evaluate(X_all[keep], y_all[keep], test_size=half)
            rows += _attack_rows(scores, "cla", attacker, float("nan"))
    if arrays_dir is not None:
        save_arrays(Path(arrays_dir) / f"{config_key({**config, 'seed': seed})}.npz", rounds=np.repeat(rounds, [len(c) for c in cla_y]), clients=y_all,
                    updates=X_all.astype(np.float32), grad_norm_member=np.stack(norms_m).astype(np.float32),
                    grad_norm_nonmember=np.stack(norms_n).astype(np.float32))
    rows.append({"metric": "noise_scale", "value": dp.noise_scale if dp else 0.0})
    rows.append({"metric": "n_clients", "value": float(len(fed.clients))})
    return rows


def save_arrays(path: str | Path, **arrays) -> None:
    """Atomically write a cell's raw arrays: client indices (never subject ids), rounds, update vectors (new −
    previous global weights, the rows the server saw) and per-trial gradient norms of the global model after
    each round (members and non-members, in the federation's order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, **arrays)


def stage_code_hash() -> str:
    """The sources a cell runs, so a cached cell is recomputed when any of them changes."""
    import eegprivacy

    package = Path(eegprivacy.__file__).parent
    files = [*sorted((package / "federated").glob("*.py")), *sorted((package / "models").glob("*.py")),
             package / "attacks" / "membership.py", package / "attacks" / "metrics.py",
             package / "signal" / "csp.py", package / "signal" / "epochs.py", package / "evaluation" / "metrics.py",
             Path(__file__)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def run(args) -> int:
    params = load_params(args.params, "federated_mia")
    validate(params, args.params)
    if args.dataset not in params["datasets"]:
        raise ParamsError(f"{args.params}: federated_mia.datasets has no entry for {args.dataset!r}")
    spec = params["datasets"][args.dataset]
    dataset, trials = load_trials(args.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    knobs = {k: params[k] for k in ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round",
                                    "num_rounds", "local_epochs", "learning_rate", "batch_size", "rf_estimators",
                                    "attack_test_size", "cla_components")}
    rounds = params.get("attack_rounds", "all")
    knobs["attack_rounds"] = rounds if rounds == "all" else ",".join(str(r) for r in rounds)
    base = {"dataset_version": version, "code_hash": stage_code_hash(), "attackers": ",".join(params["attackers"]),
            "paradigm": repr(sorted(spec.items())), **knobs}
    label = "SYNTHETIC " if synthetic else ""
    plan = []  # (model, ε, runner, cells), in the order they run
    for model in params["models"]:
        for eps in [float(e) for e in params["epsilons"]]:
            mechanism = "laplace_gradient" if math.isfinite(eps) else "none"
            cells = expand_grid({"model": [model], "epsilon": [eps], "mechanism": [mechanism]},
                                seeds=range(int(params["seeds"])), base=base)

            def tags(seed, model=model, eps=eps, mechanism=mechanism):
                return required_tags(study="b", stage=STAGE, dataset=args.dataset, dataset_version=version,
                                     synthetic=synthetic, seed=seed, dvc_stage=f"{STAGE}@{args.dataset}",
                                     model=model, epsilon="inf" if not math.isfinite(eps) else f"{eps:g}",
                                     mechanism=mechanism, split="per_subject_80_20")

            runner = SweepRunner(name=f"{STAGE}-{args.dataset}-{model}-eps{eps:g}", study="b",
                                 dataset=args.dataset,
                                 out_dir=Path(args.cells) / STAGE / args.dataset / f"{model}-eps{eps:g}",
                                 parent_tags=tags(None), tags_fn=lambda cell, t=tags: t(cell.seed),
                                 params={"federated_mia": {**knobs, "model": model, "epsilon": eps,
                                                           "epsilon_scope": NOTE}, "synthetic": synthetic},
                                 progress=not args.no_progress)
            plan.append((model, eps, runner, cells))
    arrays_dir = Path(args.cells) / STAGE / args.dataset / "arrays"
    for _, _, runner, cells in plan:  # rows without their arrays (an older cache): compute the cell again
        for cell in cells:
            if runner.cell_path(cell).exists() and not (arrays_dir / f"{cell.key}.npz").exists():
                runner.cell_path(cell).unlink()
    jobs = [(cell.config, cell.seed) for _, _, runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(functools.partial(cell_rows, trials=trials, params=params, arrays_dir=arrays_dir),
                              jobs, n_jobs=args.jobs)
    frames = []
    for model, eps, runner, cells in plan:
        frame = runner.run(cells, compute)
        frame["synthetic"] = synthetic
        frames.append(frame)
        print(f"{label}{args.dataset}: {model} eps={eps:g} done")
    tidy = pd.concat(frames, ignore_index=True)
    export = Path(getattr(args, "arrays", None) or f"data/federated_mia/{args.dataset}")
    export.mkdir(parents=True, exist_ok=True)
    for model, eps, _, cells in plan:
        for cell in cells:
            target = export / f"{model}-eps{eps:g}-seed{cell.seed}.npz"
            with atomic_path(target) as tmp:
                shutil.copyfile(arrays_dir / f"{cell.key}.npz", tmp)
    out = Path(args.out or f"metrics/federated_mia_{args.dataset}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tidy.to_csv(tmp, index=False)
    print(f"{label}{args.dataset}: {len(tidy)} rows -> {out}; per-round update vectors and gradient norms -> "
          f"{export}/ ({NOTE})")
    return 0
