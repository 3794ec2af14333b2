"""Stage ``csp_exploration`` (study B): what the federated models are fed, before any training.

For one dataset under the ``federated_mia`` params: every client's own CSP (fitted on its members, as in the
federation), a 2-D PCA of the pooled CSP log-variance features (fitted on members; non-members projected), and the
ten features most correlated with the label (per-channel log-variance and the CSP components, members pooled,
Pearson r with its p-value). Subjects are never named: clients are indices.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402

from eegprivacy.atomic import atomic_path  # noqa: E402
from eegprivacy.evaluation.figures import titled  # noqa: E402
from eegprivacy.federated.splits import member_split  # noqa: E402
from eegprivacy.params import load_params  # noqa: E402
from eegprivacy.tracking import required_tags  # noqa: E402
from eegprivacy.tracking.runs import log_artifact, log_metrics, start_run  # noqa: E402

from experiments.federated_mia import Federation, load_trials  # noqa: E402

NAME = "csp-exploration"
HELP = ("Study B: PCA scatter of each client's CSP features (members vs non-members, by label) and the top-10 "
        "feature-label correlations, for one dataset under params/federated_mia.yaml.")
TOP = 10


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="a dataset under federated_mia.datasets")
    parser.add_argument("--params", default="params/federated_mia.yaml")
    parser.add_argument("--correlations", help="default metrics/csp_correlations_<dataset>.csv")
    parser.add_argument("--figure", help="default reports/figures/csp_pca_<dataset>.png")


def correlations(X_channels: np.ndarray, channels, X_csp: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    """Pearson r (point-biserial) of each feature with the label, strongest |r| first."""
    names = [f"logvar:{c}" for c in channels] + [f"csp_{k}" for k in range(X_csp.shape[1])]
    features = np.column_stack([X_channels, X_csp])
    rows = []
    for name, column in zip(names, features.T):
        r, p = stats.pearsonr(column, y) if np.std(column) > 0 else (math.nan, math.nan)
        rows.append({"feature": name, "r": float(r), "abs_r": abs(float(r)), "p_value": float(p), "n": len(y)})
    return pd.DataFrame(rows).sort_values("abs_r", ascending=False, ignore_index=True)


def run(args) -> int:
    params = load_params(args.params, "federated_mia")
    spec = params["datasets"][args.dataset]
    dataset, trials = load_trials(args.dataset, spec)
    subjects = trials.metadata["subject"].to_numpy()
    member = member_split(trials.y, subjects, test_size=params["test_size"], seed=params["split_seed"])
    federation = Federation(trials, member, "logvar", params["csp_components"])
    X_mem, y_mem, client_mem = federation.pooled(members=True)
    X_non, y_non, _ = federation.pooled(members=False)

    pca = PCA(n_components=2, random_state=0).fit(X_mem)
    fig, ax = plt.subplots(figsize=(6.4, 4.8), layout="constrained")
    for label, colour in ((0, "#0072B2"), (1, "#D55E00")):
        for points, ys, marker, what in ((X_mem, y_mem, "o", "member"), (X_non, y_non, "x", "non-member")):
            proj = pca.transform(points[ys == label])
            ax.scatter(proj[:, 0], proj[:, 1], s=12, marker=marker, color=colour, alpha=0.6,
                       label=f"class {label}, {what}")
    ratio = pca.explained_variance_ratio_
    ax.set_xlabel(f"PC1 ({ratio[0]:.0%})")
    ax.set_ylabel(f"PC2 ({ratio[1]:.0%})")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.set_title(titled(f"{args.dataset}: per-client CSP log-variance, PCA on members\n"
                        f"({len(federation.clients)} clients, each with its own CSP)", trials.synthetic), fontsize=9)

    log_var = np.log(np.var(trials.X[member], axis=-1) + 1e-30)
    table = correlations(log_var, trials.channels, X_mem, y_mem)
    table.insert(0, "dataset", args.dataset)
    table.insert(1, "synthetic", bool(trials.synthetic))
    table["rank"] = np.arange(1, len(table) + 1)

    figure = Path(args.figure or f"reports/figures/csp_pca_{args.dataset}.png")
    out = Path(args.correlations or f"metrics/csp_correlations_{args.dataset}.csv")
    for path in (figure, out):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(figure) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    with atomic_path(out) as tmp:
        table.head(TOP).to_csv(tmp, index=False)
    tags = required_tags(study="b", stage="csp_exploration", dataset=args.dataset,
                         dataset_version=dataset.version(), synthetic=bool(trials.synthetic),
                         seed=int(params["split_seed"]), dvc_stage=f"csp_exploration@{args.dataset}",
                         split="per_subject_80_20")
    run_params = {"csp_components": params["csp_components"], "test_size": params["test_size"],
                  "split_seed": params["split_seed"], "paradigm": repr(sorted(spec.items()))}
    with start_run(study="b", tags=tags, params=run_params, run_name=f"csp-exploration-{args.dataset}"):
        log_metrics({"pca_explained_variance_1": float(ratio[0]), "pca_explained_variance_2": float(ratio[1]),
                     "n_member_trials": float(len(y_mem)), "n_clients": float(len(federation.clients)),
                     "top_abs_r": float(table["abs_r"].iloc[0])})
        log_artifact(out)
        log_artifact(figure, "figures")
    top = table.iloc[0]
    print(f"{args.dataset}: {len(y_mem)} member trials, {len(federation.clients)} clients; strongest feature "
          f"{top['feature']} (r = {top['r']:.2f}) -> {out}, {figure}")
    return 0
