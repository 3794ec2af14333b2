"""What study B's federated models are fed, before any training (stage ``csp_exploration``).

For one dataset under the ``federated_mia`` params: every client's own CSP (fitted on its members, as in the
federation), a 2-D PCA of the pooled CSP log-variance features (fitted on members; non-members projected), and
the features most correlated with the label (per-channel log-variance and the CSP components, members pooled,
Pearson r with its p-value). Subjects are never named: clients are indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.decomposition import PCA

from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.mia import Federation

TOP = 10  # correlations kept


def correlations(X_channels: np.ndarray, channels, X_csp: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    """Pearson r (point-biserial) of each feature with the label, strongest |r| first."""
    names = [f"logvar:{c}" for c in channels] + [f"csp_{k}" for k in range(X_csp.shape[1])]
    features = np.column_stack([X_channels, X_csp])
    rows = []
    for name, column in zip(names, features.T):
        r, p = stats.pearsonr(column, y) if np.std(column) > 0 else (math.nan, math.nan)
        rows.append({"feature": name, "r": float(r), "abs_r": abs(float(r)), "p_value": float(p), "n": len(y)})
    return pd.DataFrame(rows).sort_values("abs_r", ascending=False, ignore_index=True)


@dataclass
class CSPExploration:
    """The PCA projections by (class label, "member"/"non-member"), the PCA's explained-variance ratios, the
    ranked correlation table and the cohort's counts."""

    projections: dict
    explained: np.ndarray
    table: pd.DataFrame
    n_clients: int
    n_member_trials: int


def explore(trials, config: FederatedMIAConfig, dataset: str) -> CSPExploration:
    """Split each subject's trials as ``federated_mia`` does (``split_seed``), fit every client's CSP on its
    members, project both roles on the members' PCA and rank the features by their correlation with the label."""
    from eegprivacy.federated.splits import member_split

    subjects = trials.metadata["subject"].to_numpy()
    member = member_split(trials.y, subjects, test_size=config.test_size, seed=config.split_seed)
    federation = Federation(trials, member, "logvar", config.csp_components)
    X_mem, y_mem, _ = federation.pooled(members=True)
    X_non, y_non, _ = federation.pooled(members=False)
    pca = PCA(n_components=2, random_state=0).fit(X_mem)
    projections = {(label, what): pca.transform(points[ys == label]) for label in (0, 1)
                   for points, ys, what in ((X_mem, y_mem, "member"), (X_non, y_non, "non-member"))}
    log_var = np.log(np.var(trials.X[member], axis=-1) + 1e-30)
    table = correlations(log_var, trials.channels, X_mem, y_mem)
    table.insert(0, "dataset", dataset)
    table.insert(1, "synthetic", bool(trials.synthetic))
    table["rank"] = np.arange(1, len(table) + 1)
    return CSPExploration(projections, pca.explained_variance_ratio_, table, len(federation.clients), len(y_mem))
