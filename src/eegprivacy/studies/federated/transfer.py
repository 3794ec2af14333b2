"""Study B's transfer check: what a federation learns beyond each client's own data.

A client's non-member accuracy mixes two things: what the global model learnt from *other* subjects, and what it
learnt from this client's own member trials (the client trained on them in the rounds it was sampled). A subject
that never joined separates them. For one (model, ε, seed), leave-one-subject-out over the federation:

- **held out**: the federation runs the grid's protocol on every other subject (the seed's member split, each
  client's own CSP on its members, the same sampling, training and DP); the held-out subject fits its own CSP on
  its member trials (the calibration a new BCI user records) and the final global model is scored on its
  non-member trials. Nothing of this subject reached the federation.
- **joined**: the same global model on each participating client's non-members; per subject, the mean over the
  federations it joined (all but its own fold).
- **own data only**: the subject's member trials alone, CSP log-variances + LDA (the within-subject BCI
  baseline), on the same split.
- **untrained control**: the federation's initial global model on the held-out subject (the same CSP input,
  no training): what the protocol scores with no learnt signal at all.

Chance is the majority share of the subject's non-member trials (stratified 80/20: about one half).
:func:`summarise` gives every arm's mean with an interval over subjects + seeds (cluster bootstrap: the subject
is both the privacy unit and the unit of transfer) and the paired differences (joined − held out, held out −
untrained, held out − own), Holm-adjusted over the table's comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.evaluation import cluster_bootstrap as cb
from eegprivacy.params import Config, param
from eegprivacy.studies.federated.config import MODELS, FederatedMIAConfig
from eegprivacy.validation import EPSILONS_OR_INF, FRACTION_OPEN, TEXT, count, subset_of

# federated_mia's knobs a fold trains with (its cell key and MLflow params); the attack knobs play no part.
TRAINING_KNOBS = ("clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
                  "local_epochs", "learning_rate", "batch_size", "batchnorm_stats")
ARMS = ("held_out", "joined", "own_data_only", "untrained")
# (name, minuend, subtrahend): the paired comparisons of the summary, one-sided "minuend > subtrahend".
COMPARISONS = (("joined_minus_held_out", "joined", "held_out"),
               ("held_out_minus_untrained", "held_out", "untrained"),
               ("held_out_minus_own_data_only", "held_out", "own_data_only"))


@dataclass(frozen=True)
class FederatedTransferConfig(Config):
    """``federated_transfer``: which federations are rebuilt once per held-out subject. Every training knob (and
    the dataset's per-dataset protocol) comes from ``federated_mia``, so a fold trains as the grid's cells do."""

    dataset: str = param(TEXT, doc="a key of federated_mia.datasets")
    models: list = param(subset_of(MODELS, "models"), doc="simplenet and/or eegnet")
    epsilons: list = param(EPSILONS_OR_INF, doc="per-step ε of the federation (.inf: no DP)")
    seeds: int = param(count(1, "seeds"), doc="seeds 0..n-1, as federated_mia's (split, init, sampling, noise)")
    bootstrap: int = param(count(1, "resamples"), default=2000, doc="subjects+seeds cluster-bootstrap resamples")
    confidence: float = param(FRACTION_OPEN, default=0.95)


def _scores(task, weights, X, y, local=None) -> dict:
    """Accuracy and AUROC of `weights` on (X, y); `local`: the scored subject's own BatchNorm statistics (FedBN)."""
    from eegprivacy.attacks.metrics import auroc

    proba = task.predict_proba(weights, X.reshape(len(X), -1), local=local)
    return {"accuracy": float(np.mean(proba.argmax(1) == y)), "auroc": float(auroc(y, proba[:, 1]))}


def own_data_scores(trials, member: np.ndarray, subject, n_components: int) -> dict:
    """Within-subject reference on the same split: CSP log-variances + LDA fitted on the member trials."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    from eegprivacy.attacks.metrics import auroc
    from eegprivacy.federated.cohort import client_data

    Xm, ym, Xn, yn = client_data(trials, member, subject, "logvar", n_components)
    lda = LinearDiscriminantAnalysis().fit(Xm, ym)
    return {"accuracy": float(np.mean(lda.predict(Xn) == yn)), "auroc": float(auroc(yn, lda.decision_function(Xn)))}


def held_out_rows(cell: dict, seed: int, trials, config: FederatedMIAConfig) -> list[dict]:
    """Every fold of one (model, ε, seed): one federation without each subject in turn, as tidy rows (subjects as
    their index in the dataset's order, never their ids)."""
    from eegprivacy.federated.cohort import client_data
    from eegprivacy.signal.csp import MODEL_INPUT
    from eegprivacy.studies.federated.mia import Federation, client_locals, federate, seed_split

    member = seed_split(trials, config, seed)
    subjects = trials.subjects()
    labels = trials.metadata["subject"].to_numpy()
    output = MODEL_INPUT[cell["model"]]
    chance_of = []  # the majority share of each subject's non-member trials (the same whether joined or not)
    for subject in subjects:
        y_test = trials.y[(labels == subject) & ~member]
        chance_of.append(float(max(np.mean(y_test), 1 - np.mean(y_test))))
    rows, joined = [], {}
    for k, subject in enumerate(subjects):
        keep = labels != subject
        others = [i for i in range(len(subjects)) if i != k]
        fed = Federation(trials.select(keep), member[keep], output, config.csp_components)
        task, result = federate(cell, seed, fed, config)
        Xm, _, Xn, yn = client_data(trials, member, subject, output, config.csp_components)
        chance = chance_of[k]
        # FedBN: the held-out subject computes its own statistics from its calibration (member) trials, as it
        # fits its own CSP; a joined client uses the statistics it kept; the untrained model its initial ones.
        own = task.calibrate(result.weights, Xm.reshape(len(Xm), -1)) if result.initial_local is not None else None
        arms = {"held_out": _scores(task, result.weights, Xn, yn, own),
                "untrained": _scores(task, result.sent[min(result.sent)], Xn, yn,  # the initial weights
                                     result.initial_local),
                "own_data_only": own_data_scores(trials, member, subject, config.csp_components)}
        for arm, scores in arms.items():
            rows += [{"metric": f"{arm}_{name}", "value": value, "subject_index": k,
                      "chance": chance if name == "accuracy" else 0.5, "n": len(yn)}
                     for name, value in scores.items()]
        kept = client_locals(result, len(fed.clients))
        for j, (_, _, Xc, _yc), local in zip(others, fed.clients, kept):
            for name, value in _scores(task, result.weights, Xc, _yc, local).items():
                joined.setdefault((j, name), []).append(value)
    for (j, name), values in sorted(joined.items()):  # per subject: the mean over the folds it joined
        rows.append({"metric": f"joined_{name}", "value": float(np.nanmean(values)), "subject_index": j,
                     "chance": chance_of[j] if name == "accuracy" else 0.5, "n": len(values)})
    return rows


def per_subject(tidy: pd.DataFrame, metric: str) -> tuple[dict[str, np.ndarray], np.ndarray, list]:
    """Per arm, a (seeds, subjects) array of one metric (joined: mean over the folds a subject joined), the
    subjects' mean chance, and the seeds."""
    seeds = sorted(tidy["seed"].unique())
    subjects = sorted(tidy["subject_index"].unique())
    out = {}
    for arm in ARMS:
        rows = tidy[tidy["metric"] == f"{arm}_{metric}"]
        table = rows.groupby(["seed", "subject_index"])["value"].mean().unstack("subject_index")
        out[arm] = table.reindex(index=seeds, columns=subjects).to_numpy(dtype=float)
    chance_rows = tidy[tidy["metric"] == f"held_out_{metric}"]
    chance = chance_rows.groupby("subject_index")["chance"].mean().reindex(subjects).to_numpy(dtype=float)
    return out, chance, seeds


def summarise(tidy: pd.DataFrame, n_resamples: int = 2000, confidence: float = 0.95) -> pd.DataFrame:
    """Each (model, ε, metric, arm): mean over subjects and seeds with a subjects+seeds cluster-bootstrap
    interval; each comparison's paired difference, its one-sided bootstrap p-value and the Holm-adjusted one
    (over every comparison of the table)."""
    records = []
    for (model, eps), cell in tidy.groupby(["model", "epsilon"], sort=False):
        for metric in ("accuracy", "auroc"):
            arms, chance, seeds = per_subject(cell, metric)
            n_subjects = arms["held_out"].shape[1]
            subj = cb.bootstrap_indices(np.zeros(n_subjects, dtype=int), n_resamples, seed=0)
            seed_idx = cb.seed_indices(len(seeds), n_resamples, seed=0)

            def replicates(values: np.ndarray) -> np.ndarray:
                per_seed = np.nanmean(values[:, subj], axis=-1)  # (seeds, resamples)
                return cb.combine_seeds(per_seed, seed_idx)

            base = {"model": model, "epsilon": float(eps), "metric": metric, "n_subjects": n_subjects,
                    "n_seeds": len(seeds), "ci_over": "subjects+seeds",
                    "chance": float(np.mean(chance)) if metric == "accuracy" else 0.5}
            for arm, values in arms.items():
                low, high = cb.percentile_interval(replicates(values), confidence)
                records.append({**base, "arm": arm, "value": float(np.nanmean(values)), "ci_low": low,
                                "ci_high": high})
            for name, a, b in COMPARISONS:
                diff = arms[a] - arms[b]
                reps = replicates(diff)
                low, high = cb.percentile_interval(reps, confidence)
                records.append({**base, "arm": name, "value": float(np.nanmean(diff)), "ci_low": low,
                                "ci_high": high, "p_value": cb.bootstrap_p_value(reps)})
    out = pd.DataFrame(records)
    if "p_value" not in out:
        out["p_value"] = np.nan
    tested = out["p_value"].notna()
    out["p_holm"] = np.nan
    out.loc[tested, "p_holm"] = cb.holm(out.loc[tested, "p_value"].to_numpy())
    return out
