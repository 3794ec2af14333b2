"""Stage ``federated_lira`` (study B): the strongest membership attack we can mount on the federated model, to
ask whether per-step DP still looks protective against it.

Shadow federations go through exactly the target's pipeline (``federated_mia``'s ``Federation`` and
``federate``, training knobs read from ``params/federated_mia.yaml``): one client per subject, each client's
CSP fitted on its own training trials, FedAvg with the same rounds, epochs, sampling, learning rate and DP.
Shadows train on ``shadow_in_fraction`` of every (subject, label) group of trials (default 0.8, the target's
member share: at 0.5, Carlini et al.'s complementary halves, each client's member-fitted CSP differs between
shadows and target and the untrained control fell below chance, AUROC 46 %; at 0.8 it sits at 50 %); CSP,
like the model, sees only the IN trials. One set of shadows per ε serves every target seed.

Targets are federations built exactly as ``federated_mia``'s, but on ONE per-subject 80/20 member split
(``split_seed`` as is) for all target seeds 0..S-1 (model init, client sampling, local training, DP noise), so
that pooling over target models scores the same trials (``federated_mia`` itself draws a new split per seed). Every trial is scored through its client's
CSP, fitted on that client's members, then the global model. Attacks on each target:

- ``lira_online`` / ``lira_offline``: :class:`~eegprivacy.attacks.lira.LiRA` on φ = logit confidence of the
  true label under the final global model, against the shadows' φ of the same trial.
- ``rla`` with ``lr``/``rf``/``mlp`` attackers: [p0, p1, loss] trained on the target's own member labels,
  cross-fitted (k folds) so that every trial is scored by an attacker that never saw its label.
- ``lira_online_untrained_control``: LiRA on the untrained initial models (target and shadows alike). Each
  client's CSP and scaling are fitted on its members; this control measures what that pipeline alone leaks.

Scores: per target seed AUROC, TPR at 1 % FPR and TPR at zero false positives (there are too few non-members
per target for 0.1 %); pooled over seeds (the same trials, S target models) the TPR at 0.1 % FPR, with a
bootstrap interval over seeds. Shadow-as-target (``scope = shadow_loo``): each shadow pair in turn is the target
of LiRA fitted on the other shadows, which gives many more non-members and a resolved TPR at 0.1 % for the
shadows' own membership game (IN share ``shadow_in_fraction``), not for the 80/20 target.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import atomic_path, write_text_atomic  # noqa: E402
from eegprivacy.attacks.lira import VARIANCES, LiRA, logit_confidence  # noqa: E402
from eegprivacy.attacks.membership import ATTACKERS, RecordLevelAttack, record_features  # noqa: E402
from eegprivacy.attacks.metrics import attack_summary, roc  # noqa: E402
from eegprivacy.evaluation.intervals import mean_ci  # noqa: E402
from eegprivacy.params import ParamsError, load_params  # noqa: E402
from eegprivacy.tracking import required_tags  # noqa: E402
from eegprivacy.tracking.runs import log_to_named_run  # noqa: E402
from eegprivacy.tracking.sweep import SweepRunner, config_key, expand_grid, run_prefetched  # noqa: E402
from experiments import federated_mia  # noqa: E402

NAME = "federated-lira"
HELP = ("Study B: LiRA (online/offline) with shadow federations trained through the same federated code, plus "
        "RLA with LR/RF/MLP attackers; TPR at 1 and 0.1 percent FPR and a log-log ROC per ε.")

STAGE = "federated_lira"
FPRS = (0.01, 0.001)
METRICS = ("auroc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "tpr_at_zero_fpr")
TRAINING_KNOBS = ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
                  "local_epochs", "learning_rate", "batch_size")
NOTE = federated_mia.NOTE


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", default="eegmat", help="eegmat (real) or synthetic_mi (SYNTHETIC)")
    parser.add_argument("--params", default="params/federated_lira.yaml")
    parser.add_argument("--training-params", default="params/federated_mia.yaml",
                        help="the target's training knobs and dataset specs (shadows must match them)")
    parser.add_argument("--out", default="metrics/federated_lira.csv", help="tidy rows")
    parser.add_argument("--json", default="metrics/federated_lira.json", help="headline summary")
    parser.add_argument("--report", default="reports/federated_lira.md", help="markdown tables")
    parser.add_argument("--figure", default="reports/figures/federated_lira_roc.png", help="log-log ROC")
    parser.add_argument("--cells", default="data/sweeps", help="resumable cache (shadows and target cells)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--accounting", default="metrics/federated_accounting.csv",
                        help="federated-accounting's rows: cumulative ε beside every per-step ε")


def validate(params: dict, source) -> None:
    """Range checks for the attack knobs (training knobs are checked by federated_mia.validate)."""
    def bad(key, must):
        raise ParamsError(f"{source}: federated_lira.{key} = {params.get(key)!r} is invalid; it must be {must}. "
                          f"Fix it in {source} and run the stage again (nothing was computed or written)")
    eps = params.get("epsilons")
    if not isinstance(eps, list) or not eps or not all(isinstance(e, (int, float)) and e > 0 for e in eps):
        bad("epsilons", "a non-empty list of ε > 0 (.inf for no DP)")
    n = params.get("n_shadows")
    if not isinstance(n, int) or n < 4 or n % 2:
        bad("n_shadows", "an even whole number ≥ 4 (the shadow-as-target check leaves pairs out)")
    if not 0.0 < float(params.get("shadow_in_fraction", 0.5)) < 1.0:
        bad("shadow_in_fraction", "a fraction strictly between 0 and 1")
    for key in ("target_seeds", "workers"):
        if not isinstance(params.get(key), int) or params[key] < 1:
            bad(key, "a whole number ≥ 1")
    for key in ("shadow_seed", "bootstrap", "rf_estimators"):
        if not isinstance(params.get(key), int) or params[key] < 0:
            bad(key, "a whole number ≥ 0")
    if not isinstance(params.get("attack_folds"), int) or params["attack_folds"] < 2:
        bad("attack_folds", "a whole number ≥ 2")
    if params.get("model") not in ("simplenet", "eegnet"):
        bad("model", "simplenet or eegnet")
    if not set(params.get("attackers") or ["?"]) <= set(ATTACKERS):
        bad("attackers", f"a non-empty subset of [{', '.join(ATTACKERS)}]")
    if params.get("lira_variance") not in VARIANCES:
        bad("lira_variance", f"one of {list(VARIANCES)}")


def _eps(e: float) -> str:
    return "inf" if not math.isfinite(float(e)) else f"{float(e):g}"


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
    n_blocks = max(2, int(round(1.0 / (1.0 - float(in_fraction)))))
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


def trial_logits(task, weights, fed, order: np.ndarray) -> np.ndarray:
    """Logits of every trial, each through its own client's CSP, in trial order."""
    flat = [X.reshape(len(X), -1) for Xm, _, Xn, _ in fed.clients for X in (Xm, Xn)]
    out = np.empty((order.size, task.classes.size))
    out[order] = task.logits(weights, np.concatenate(flat))
    return out


def _train_shadows(indices, trials, masks, params: dict, train: dict, epsilons, output: str) -> dict:
    """φ of every trial under shadows ``indices`` at every ε, and under their untrained initial models."""
    out = {}
    y = None
    for j in indices:
        fed = federated_mia.Federation(trials, masks[j], output, int(train["csp_components"]))
        order = client_index(trials, masks[j])
        seed = int(params["shadow_seed"]) + int(j)
        phis = {}
        for eps in epsilons:
            task, result = federated_mia.federate({"model": params["model"], "epsilon": eps}, seed, fed, train)
            y = task._targets(trials.y).numpy() if y is None else y
            phis[_eps(eps)] = logit_confidence(trial_logits(task, result.weights, fed, order), y)
            if "untrained" not in phis:  # the same initial weights at every ε (same seed)
                phis["untrained"] = logit_confidence(trial_logits(task, result.sent[min(result.sent)], fed, order),
                                                     y)
        out[int(j)] = phis
    return out


def shadow_phis(trials, masks, params: dict, train: dict, epsilons, output: str, cache: Path) -> dict:
    """{"inf"/"5"/…/"untrained": (n_shadows, n_trials) φ}, trained in ``workers`` processes (each shadow's
    numbers depend only on its own seed and mask, so the split over processes does not change them) and cached
    on disk under a key of everything they depend on."""
    if cache.exists():
        with np.load(cache) as saved:
            return {k: saved[k] for k in saved.files}
    n = masks.shape[0]
    workers = min(int(params["workers"]), n)
    chunks = [list(range(n))[w::workers] for w in range(workers)]
    if workers > 1:
        import os

        from joblib import Parallel, delayed

        # Worker processes unpickle this module's function by name: the folder above experiments/ must be on
        # their path too (the CLI adds it to sys.path, which fresh processes do not inherit).
        root = str(Path(__file__).resolve().parents[1])
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, paths)])

        parts = Parallel(n_jobs=workers, backend="loky")(
            delayed(_train_shadows)(c, trials, masks, params, train, epsilons, output) for c in chunks)
    else:
        parts = [_train_shadows(chunks[0], trials, masks, params, train, epsilons, output)]
    merged = {j: v for part in parts for j, v in part.items()}
    keys = list(merged[0])
    phis = {k: np.stack([merged[j][k] for j in range(n)]) for k in keys}
    cache.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(cache) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **phis)
    return phis


def zero_fpr_tpr(member, scores) -> float:
    """Share of members scored strictly above every non-member (ties count against the attacker)."""
    member = np.asarray(member).astype(bool)
    return float((scores[member] > scores[~member].max()).mean())


def score_rows(member, scores: dict, **extra) -> list[dict]:
    rows = []
    for (attack, attacker), s in scores.items():
        summary = attack_summary(member, s, FPRS)
        summary["tpr_at_zero_fpr"] = zero_fpr_tpr(member, s)
        for metric in METRICS:
            chance = 0.5 if metric == "auroc" else 0.0 if metric == "tpr_at_zero_fpr" else float(
                metric.rsplit("_", 1)[1])
            rows.append({"metric": metric, "value": summary[metric], "chance": chance, "attack": attack,
                         "attacker": attacker, "n": summary["n_members"] + summary["n_nonmembers"], **extra})
    return rows


def target_cell(config: dict, seed: int, ctx: dict) -> list[dict]:
    """One target federation at one ε: LiRA online/offline, the untrained control and the RLAs; the per-trial
    scores go beside the cell's rows for the pooled metrics and the ROC figure."""
    from eegprivacy.federated.task import derive_seed

    eps, params = float(config["epsilon"]), ctx["params"]
    fed, order, member, trials = ctx["fed"], ctx["order"], ctx["member"], ctx["trials"]
    task, result = federated_mia.federate({"model": params["model"], "epsilon": eps}, seed, fed, ctx["train"])
    y = task._targets(trials.y).numpy()
    logits = trial_logits(task, result.weights, fed, order)
    phi = logit_confidence(logits, y)
    phi0 = logit_confidence(trial_logits(task, result.sent[min(result.sent)], fed, order), y)
    shadows, masks = ctx["phis"], ctx["masks"]
    variance = params["lira_variance"]
    scores = {("lira_online", ""): LiRA("online", variance).fit(shadows[_eps(eps)], masks).score_samples(phi),
              ("lira_offline", ""): LiRA("offline", variance).fit(shadows[_eps(eps)], masks).score_samples(phi),
              ("lira_online_untrained_control", ""):
                  LiRA("online", variance).fit(shadows["untrained"], masks).score_samples(phi0)}
    proba = np.exp(logits - logits.max(1, keepdims=True))
    proba /= proba.sum(1, keepdims=True)
    loss = -np.log(np.clip(proba[np.arange(y.size), y], 1e-300, None))
    features = record_features(proba, y, loss)
    for attacker in params["attackers"]:
        rla = RecordLevelAttack(attacker=attacker, n_estimators=int(params["rf_estimators"]),
                                random_state=derive_seed(seed, 17))
        scores[("rla", attacker)] = rla.cross_fitted_scores(features, member.astype(int), int(params["attack_folds"]))
    rows = score_rows(member, scores, scope="target_seed")
    nonmember = ~member
    rows += [{"metric": "utility_accuracy_nonmembers", "value": float((logits[nonmember].argmax(1)
                                                                        == y[nonmember]).mean()), "chance": 0.5},
             {"metric": "phi_gap", "value": float(phi[member].mean() - phi[nonmember].mean())},
             {"metric": "n_members", "value": float(member.sum())},
             {"metric": "n_nonmembers", "value": float(nonmember.sum())}]
    path = ctx["scores_dir"] / f"{config_key({**config, 'seed': seed})}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **{f"{a}|{b}": s for (a, b), s in scores.items()})
    return rows


def _pooled_metrics(groups: list) -> dict[str, float]:
    members = np.concatenate([g[0] for g in groups])
    scores = np.concatenate([g[1] for g in groups])
    out = attack_summary(members, scores, FPRS)
    out["tpr_at_zero_fpr"] = zero_fpr_tpr(members, scores)
    return out


def _resampled_metrics(groups: list, resamples: list) -> list[dict[str, float]]:
    return [_pooled_metrics([groups[i] for i in picks]) for picks in resamples]


def _bootstrap(groups: list, n_boot: int, seed: int, n_jobs: int = 1) -> dict[str, tuple[float, float]]:
    """Percentile 95 % interval of every pooled metric, resampling whole groups (target models) with
    replacement; NaN when fewer than half the resamples give a finite value. The resamples are drawn here, in
    order, and scored in ``n_jobs`` processes, so the interval does not depend on ``n_jobs``."""
    out = {m: (float("nan"), float("nan")) for m in METRICS}
    if n_boot < 1 or len(groups) < 2:
        return out
    from joblib import Parallel, delayed

    rng = np.random.default_rng(seed)
    resamples = [rng.integers(0, len(groups), len(groups)) for _ in range(n_boot)]
    chunks = [[resamples[i] for i in part] for part in np.array_split(np.arange(n_boot), max(1, n_jobs))]
    draws = [d for part in Parallel(n_jobs=n_jobs)(delayed(_resampled_metrics)(groups, c) for c in chunks)
             for d in part]
    for metric in METRICS:
        values = np.array([d[metric] for d in draws], dtype=float)
        values = values[np.isfinite(values)]
        if values.size >= n_boot / 2:
            out[metric] = (float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975)))
    return out


def pooled_rows(per_model: dict, n_boot: int, seed: int, scope: str, n_jobs: int = 1) -> tuple[list[dict], dict]:
    """Metrics of scores pooled over target models (each a (member, scores) pair), with a bootstrap interval
    over models (scored in ``n_jobs`` processes); returns rows and each attack's pooled ROC for the figure."""
    rows, curves = [], {}
    for key, groups in per_model.items():
        members = np.concatenate([g[0] for g in groups])
        curves[key] = roc(members.astype(int), np.concatenate([g[1] for g in groups]))
        values, intervals = _pooled_metrics(groups), _bootstrap(groups, n_boot, seed, n_jobs)
        for metric in METRICS:
            chance = 0.5 if metric == "auroc" else 0.0 if metric == "tpr_at_zero_fpr" else float(
                metric.rsplit("_", 1)[1])
            rows.append({"metric": metric, "value": values[metric], "ci_low": intervals[metric][0],
                         "ci_high": intervals[metric][1], "chance": chance, "attack": key[0], "attacker": key[1],
                         "scope": scope, "n": float(members.size), "n_nonmembers": float((members == 0).sum()),
                         "n_models": len(groups)})
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


def stage_code_hash() -> str:
    """federated_mia's sources plus this stage and the LiRA estimator: cached shadows and cells are recomputed
    when any of them changes."""
    import eegprivacy.attacks.lira as lira_module

    digest = hashlib.sha256(federated_mia.stage_code_hash().encode())
    for path in (Path(__file__), Path(lira_module.__file__)):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# ----------------------------------------------------------------------------------------------- outputs

LABELS = {("lira_online", ""): "LiRA online", ("lira_offline", ""): "LiRA offline", ("rla", "lr"): "RLA LR",
          ("rla", "rf"): "RLA RF", ("rla", "mlp"): "RLA MLP",
          ("lira_online_untrained_control", ""): "LiRA online, untrained control"}


def roc_figure(curves: dict, path: Path, title: str, eps_label=lambda eps: f"ε={eps}") -> None:
    """Log-log ROC, one curve per (ε, attack); left: the targets pooled over seeds, right: shadow-as-target.
    ``eps_label(eps)`` names an ε in the legend (the stage adds the cumulative ε)."""
    colours = {k: f"C{i}" for i, k in enumerate(LABELS)}
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=True)
    for ax, scope, name in ((axes[0], "target_pooled", "targets (80/20 split), pooled over seeds"),
                            (axes[1], "shadow_loo", "shadow-as-target, leave one pair out")):
        lowest = 1.0
        for (sc, eps, attack, attacker), (fpr, tpr) in curves.items():
            if sc != scope:
                continue
            eps_list = sorted({e for (s, e, _, _) in curves if s == scope}, key=lambda e: -float(e))
            keep = fpr > 0
            lowest = min(lowest, fpr[keep].min()) if keep.any() else lowest
            ax.plot(fpr[keep], tpr[keep], color=colours.get((attack, attacker), "k"),
                    ls=styles[eps_list.index(eps) % len(styles)], lw=1.3,
                    label=f"{LABELS.get((attack, attacker), attack)}, {eps_label(eps)}")
        if lowest >= 1.0:
            ax.text(0.5, 0.5, "not run (needs 6 or more shadows)", ha="center", transform=ax.transAxes)
            ax.set_title(name, fontsize=10)
            continue
        grid = np.logspace(np.log10(lowest), 0, 50)
        ax.plot(grid, grid, color="grey", lw=0.8, label="chance (TPR = FPR)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lowest, 1)
        ax.set_ylim(lowest, 1.05)
        ax.axvline(0.001, color="grey", lw=0.5, ls=":")
        ax.axvline(0.01, color="grey", lw=0.5, ls=":")
        ax.set_xlabel("false positive rate")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=6.5, loc="lower right")
    axes[0].set_ylabel("true positive rate")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130, format="png")
    plt.close(fig)


def _fmt(value, low=np.nan, high=np.nan, pct=True) -> str:
    if value is None or not np.isfinite(value):
        return "–"
    k = 100.0 if pct else 1.0
    text = f"{k * value:.1f}" if pct else f"{value:.3f}"
    if np.isfinite(low) and np.isfinite(high):
        text += f" [{k * low:.1f}, {k * high:.1f}]" if pct else f" [{low:.3f}, {high:.3f}]"
    return text


def report_md(summary: pd.DataFrame, meta: dict, cum=None) -> str:
    from experiments.federated_mia_report import Cumulative

    cum = cum or Cumulative(None)
    synthetic = "SYNTHETIC " if meta["synthetic"] else ""
    lines = [f"# Study B: LiRA and RLA against {synthetic}{meta['dataset']} ({meta['model']})", "",
             f"{NOTE}. {cum.note()}", "",
             "Targets: federations built as `federated_mia`'s on one per-subject 80/20 member split for all "
             f"target seeds (split seed {meta['split_seed']}; `federated_mia` draws a new split per seed): "
             f"{meta['n_members']} members and {meta['n_nonmembers']} non-members over {meta['n_clients']} clients, "
             f"{meta['target_seeds']} training seeds. Shadows: {meta['n_shadows']} federations through the same "
             f"code and knobs ({meta['training']}), each on {100 * meta['shadow_in_fraction']:.0f} % of every "
             "client's trials of each class (the target's member share); every shadow client's "
             "CSP is fitted on its IN trials as the target's is on its members. LiRA variance: "
             f"{meta['lira_variance']}. RLA: [p0, p1, loss], {meta['attack_folds']}-fold cross-fitted on the "
             "target's own member labels (a stronger attacker knowledge than LiRA's, which uses none).", "",
             "Per-seed columns: mean [95 % t-interval over target seeds]. TPR@0.1 %FPR cannot be resolved on one "
             f"target ({meta['n_nonmembers']} non-members < 1000); the column is pooled over the "
             f"{meta['target_seeds']} target models (the same trials under each) with a bootstrap interval over "
             "models; TPR@0 FP is the share of members above every non-member. Chance: AUROC 50, TPR@x %FPR = x, "
             "TPR@0 FP = 0. All values in %.", ""]
    for scope, heading in (("target", "Targets (80/20)"), ("shadow_loo", "Shadow-as-target")):
        lines += [f"## {heading}", ""]
        if scope == "target":
            lines += ["| ε per step | ε per round | Σε nominal | Σε certified | attack | AUROC | TPR@1 %FPR | "
                      "TPR@0 FP | "
                      "TPR@0.1 %FPR (pooled) | pooled non-members |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        else:
            lines += [f"Each of the {meta['n_shadows']} shadows in turn is the target of LiRA fitted on the other "
                      f"{meta['n_shadows'] - 2} (its pair partner left out too), a membership game with IN share "
                      f"{100 * meta['shadow_in_fraction']:.0f} %. Per-model columns: mean "
                      "[t-interval over shadow targets]; pooled: bootstrap over shadow targets.", "",
                      "| ε per step | ε per round | Σε nominal | Σε certified | attack | AUROC | TPR@1 %FPR | "
                      "TPR@0 FP | "
                      "TPR@0.1 %FPR (pooled) | pooled non-members |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        per = summary[summary["scope"] == ("target_seed" if scope == "target" else "shadow_loo")]
        pooled = summary[summary["scope"] == ("target_pooled" if scope == "target" else "shadow_loo_pooled")]
        for eps in meta["epsilons"]:
            for key, label in LABELS.items():
                def get(frame, metric):
                    hit = frame[(frame["epsilon"] == eps) & (frame["attack"] == key[0])
                                & (frame["attacker"] == key[1]) & (frame["metric"] == metric)]
                    return hit.iloc[0] if len(hit) else None
                a = get(per, "auroc")
                if a is None:
                    continue
                t1, t0 = get(per, "tpr_at_fpr_0.01"), get(per, "tpr_at_zero_fpr")
                p = get(pooled, "tpr_at_fpr_0.001")
                cells = [_fmt(r["value"], r["ci_low"], r["ci_high"]) if r is not None else "–" for r in (a, t1, t0, p)]
                n_non = f"{int(p['n_nonmembers'])}" if p is not None else "–"
                where = (meta["dataset"], meta["model"], eps)
                sums = " | ".join([cum.text(*where, "nominal", "epsilon_per_round"),
                                   *(cum.text(*where, c) for c in ("nominal", "certified"))])
                lines.append(f"| {_eps(eps)} | {sums} | {label} | " + " | ".join(cells) + f" | {n_non} |")
        lines += ["| | | | | chance | 50.0 | 1.0 | 0.0 | 0.1 | |", ""]
    lines += ["Figure: `reports/figures/federated_lira_roc.png` (log-log ROC, diagonal = chance).", ""]
    return "\n".join(lines)


def headline(summary: pd.DataFrame, meta: dict) -> dict:
    out = {"epsilon_scope": NOTE, "dataset": meta["dataset"], "model": meta["model"],
           "synthetic": meta["synthetic"], "n_members": meta["n_members"], "n_nonmembers": meta["n_nonmembers"],
           "n_shadows": meta["n_shadows"], "target_seeds": meta["target_seeds"],
           "wall_time_s": meta.get("wall_time_s")}
    for r in summary.to_dict("records"):
        attack = r["attack"] + (f"_{r['attacker']}" if r["attacker"] else "")
        key = "/".join([meta["dataset"], meta["model"], f"eps_{_eps(r['epsilon'])}", r["scope"], attack, r["metric"]])
        clean = lambda v: None if v is None or not np.isfinite(v) else float(v)  # noqa: E731
        out[key] = {"mean": clean(r["value"]), "ci_low": clean(r["ci_low"]), "ci_high": clean(r["ci_high"]),
                    "chance": clean(r["chance"]), "n": clean(r["n"])}
    return out


def run(args) -> int:
    from eegprivacy.federated.splits import member_split
    from eegprivacy.signal.csp import MODEL_INPUT

    start = time.perf_counter()
    params = load_params(args.params, STAGE)
    validate(params, args.params)
    train = load_params(args.training_params, "federated_mia")
    federated_mia.validate(train, args.training_params)
    if args.dataset not in train["datasets"]:
        raise ParamsError(f"{args.training_params}: federated_mia.datasets has no entry for {args.dataset!r}")
    spec = train["datasets"][args.dataset]
    dataset, trials = federated_mia.load_trials(args.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    label = "SYNTHETIC " if synthetic else ""
    model, output = params["model"], MODEL_INPUT[params["model"]]
    epsilons = [float(e) for e in params["epsilons"]]
    subjects = trials.metadata["subject"]
    member = member_split(trials.y, subjects, float(train["test_size"]), int(train["split_seed"]))
    masks = shadow_membership(trials.y, subjects.to_numpy(), int(params["n_shadows"]), int(params["shadow_seed"]),
                              float(params.get("shadow_in_fraction", 0.5)))
    knobs = {k: train[k] for k in TRAINING_KNOBS}
    attack_knobs = {k: params[k] for k in ("n_shadows", "shadow_seed", "target_seeds", "rf_estimators",
                                           "attack_folds", "lira_variance", "bootstrap")}
    attack_knobs["shadow_in_fraction"] = float(params.get("shadow_in_fraction", 0.5))
    code = stage_code_hash()
    cells_root = Path(args.cells) / STAGE / args.dataset / model
    shadow_key = config_key({"dataset_version": version, "code_hash": code, "paradigm": repr(sorted(spec.items())),
                             "model": model, "epsilons": [_eps(e) for e in epsilons], **knobs,
                             "n_shadows": params["n_shadows"], "shadow_seed": params["shadow_seed"],
                             "shadow_in_fraction": attack_knobs["shadow_in_fraction"]})
    t0 = time.perf_counter()
    phis = shadow_phis(trials, masks, params, knobs, epsilons, output, cells_root / f"shadows-{shadow_key}.npz")
    print(f"{label}{args.dataset}: {params['n_shadows']} shadow federations x {len(epsilons)} eps in "
          f"{time.perf_counter() - t0:.0f} s")
    fed = federated_mia.Federation(trials, member, output, int(train["csp_components"]))
    order = client_index(trials, member)
    ctx = {"params": params, "train": knobs, "fed": fed, "order": order, "member": member, "trials": trials,
           "phis": phis, "masks": masks, "scores_dir": cells_root / "scores"}
    base = {"dataset_version": version, "code_hash": code, "shadow_key": shadow_key, "model": model,
            "attackers": ",".join(params["attackers"]), "paradigm": repr(sorted(spec.items())), **knobs,
            **attack_knobs}
    plan = []  # (ε, mechanism, name, runner, cells), in the order they run
    for eps in epsilons:
        mechanism = "laplace_gradient" if math.isfinite(eps) else "none"
        cells = expand_grid({"epsilon": [eps], "mechanism": [mechanism]}, seeds=range(int(params["target_seeds"])),
                            base=base)

        def tags(seed, eps=eps, mechanism=mechanism):
            return required_tags(study="b", stage=STAGE, dataset=args.dataset, dataset_version=version,
                                 synthetic=synthetic, seed=seed, dvc_stage=STAGE, model=model, epsilon=_eps(eps),
                                 mechanism=mechanism, attack="lira,rla", split="per_subject_80_20")

        name = f"{STAGE}-{args.dataset}-{model}-eps{eps:g}"
        runner = SweepRunner(name=name, study="b", dataset=args.dataset,
                             out_dir=cells_root / f"eps{eps:g}", parent_tags=tags(None),
                             tags_fn=lambda cell, t=tags: t(cell.seed),
                             params={STAGE: {**knobs, **attack_knobs, "model": model, "epsilon": eps,
                                             "attackers": params["attackers"], "epsilon_scope": NOTE},
                                     "synthetic": synthetic},
                             progress=not args.no_progress)
        plan.append((eps, mechanism, name, runner, cells))
    # The target cells of every ε in `workers` processes, like the shadows (each is a function of its seed alone).
    frames = run_prefetched([(runner, cells) for *_, runner, cells in plan],
                            functools.partial(target_cell, ctx=ctx), n_jobs=int(params["workers"]))
    pooled, curves, parent_metrics = [], {}, {}
    for eps, mechanism, name, runner, cells in plan:
        # Pooled over target seeds, from the per-trial scores each cell left beside its rows.
        per_model: dict = {}
        for cell in cells:
            path = ctx["scores_dir"] / f"{cell.key}.npz"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing while its cell's rows are cached; delete "
                                        f"{runner.out_dir} and run the stage again")
            with np.load(path) as saved:
                for k in saved.files:
                    per_model.setdefault(tuple(k.split("|")), []).append((member.astype(int), saved[k]))
        rows, roc_t = pooled_rows(per_model, int(params["bootstrap"]), int(params["shadow_seed"]), "target_pooled",
                                  int(params["workers"]))
        # Shadow-as-target needs two IN and two OUT values per trial once a pair leaves: six shadows or more.
        loo = shadow_loo(phis, masks, _eps(eps), params["lira_variance"]) if masks.shape[0] >= 6 else {}
        rows_l, roc_l = pooled_rows(loo, int(params["bootstrap"]), int(params["shadow_seed"]), "shadow_loo_pooled",
                                    int(params["workers"]))
        for key, groups in loo.items():  # per shadow target, like the per-seed rows of the real targets
            for j, (m, s) in enumerate(groups):
                for r in score_rows(m.astype(bool), {key: s}, scope="shadow_loo"):
                    rows_l.append({**r, "shadow": j})
        extra = pd.DataFrame(rows + rows_l)
        extra["epsilon"], extra["mechanism"], extra["model"] = eps, mechanism, model
        pooled.append(extra)
        for (attack, attacker), c in roc_t.items():
            if attack != "lira_online_untrained_control":
                curves[("target_pooled", _eps(eps), attack, attacker)] = c
        for (attack, attacker), c in roc_l.items():
            curves[("shadow_loo", _eps(eps), attack, attacker)] = c
        for r in rows + [r for r in rows_l if r["scope"] == "shadow_loo_pooled"]:
            parent_metrics.setdefault(name, {})[
                f"{r['scope']}/{r['attack']}{'_' + r['attacker'] if r['attacker'] else ''}/{r['metric']}"] = r["value"]
        print(f"{label}{args.dataset}: eps={_eps(eps)} done")

    tidy = pd.concat(frames, ignore_index=True)
    extra = pd.concat(pooled, ignore_index=True)
    extra["study"], extra["dataset"] = "b", args.dataset
    tidy = pd.concat([tidy, extra], ignore_index=True)
    tidy["synthetic"] = synthetic
    for column in ("attack", "attacker"):
        tidy[column] = tidy[column].fillna("")

    summary = summarise(tidy)
    meta = {"dataset": args.dataset, "model": model, "synthetic": synthetic, "split_seed": train["split_seed"],
            "n_members": int(member.sum()), "n_nonmembers": int((~member).sum()), "n_clients": len(fed.clients),
            "target_seeds": int(params["target_seeds"]), "n_shadows": int(params["n_shadows"]),
            "shadow_in_fraction": float(params.get("shadow_in_fraction", 0.5)),
            "lira_variance": params["lira_variance"], "attack_folds": int(params["attack_folds"]),
            "epsilons": epsilons,
            "training": ", ".join(f"{k} {train[k]}" for k in ("num_rounds", "local_epochs", "clients_per_round",
                                                               "batch_size", "learning_rate", "clip_norm"))}
    out, js, md, fig = Path(args.out), Path(args.json), Path(args.report), Path(args.figure)
    for path in (out, js, md, fig):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tidy.to_csv(tmp, index=False)
    from experiments.federated_mia_report import Cumulative

    cum = Cumulative(getattr(args, "accounting", None))
    roc_figure(curves, fig, f"{label}{args.dataset}, {model}: membership ROC (log-log), ε per local step",
               eps_label=lambda eps: (f"ε={eps}/step, "
                                      f"{cum.text(args.dataset, model, float(eps), 'nominal', 'epsilon_per_round')}"
                                      f"/round, Σε={cum.text(args.dataset, model, float(eps))}"))
    write_text_atomic(md, report_md(summary, meta, cum))
    meta["wall_time_s"] = round(time.perf_counter() - start, 1)
    write_text_atomic(js, json.dumps(headline(summary, meta), indent=2, sort_keys=True) + "\n")
    for name, metrics in parent_metrics.items():
        log_to_named_run("b", name, metrics, [out, js, md, fig])
    print(f"{label}{args.dataset}: {len(tidy)} rows -> {out}; {md}; {fig} ({meta['wall_time_s']} s)")
    return 0


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per (ε, scope, attack, attacker, metric): per-seed/per-shadow scopes as mean and t-interval,
    pooled scopes as their value and bootstrap interval."""
    rows = []
    keys = ["epsilon", "scope", "attack", "attacker", "metric"]
    frame = tidy[tidy["metric"].isin(METRICS)]
    for key, part in frame.groupby(keys, dropna=False, sort=True):
        record = dict(zip(keys, key))
        if str(record["scope"]).endswith("pooled"):
            r = part.iloc[0]
            record.update(value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
                          n_nonmembers=r.get("n_nonmembers"), chance=r["chance"])
        else:
            mean, low, high = mean_ci(part["value"].to_numpy(dtype=float))
            low, high = max(low, 0.0), min(high, 1.0)  # every metric here is a rate in [0, 1]
            record.update(value=mean, ci_low=low, ci_high=high, n=float(part["value"].notna().sum()),
                          n_nonmembers=np.nan, chance=float(part["chance"].iloc[0]))
        rows.append(record)
    return pd.DataFrame(rows)
