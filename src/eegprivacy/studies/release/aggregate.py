"""The ``dp_aggregate`` summaries: per-seed release and utility rows -> mean and 95% CI over seeds, and the
headline numbers of each dataset (baseline, permuted-label control, each mechanism at the figure's ε).

Intervals are over seeds (noise realisations and MLP initialisations), so they say how much one release's
numbers could move, not how they would generalise to other patients; the Wilson intervals of seed 0 beside the
baseline say that.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.pipeline.sweep import aggregate
from eegprivacy.reporting.format import epsilon_key

BY = ["study", "dataset", "mechanism", "epsilon", "protocol"]
PROTOCOLS = ("optimistic", "nested")
NOT_RELEASES = {"none", "permuted_labels"}


def rounded(x) -> float | None:
    """A headline number: 4 decimals, or None where there is no finite value."""
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def interval(row) -> dict:
    """Mean, CI and seed count of one aggregated row, as the headline JSON writes them."""
    return {"mean": rounded(row.value), "ci_low": rounded(row.ci_low), "ci_high": rounded(row.ci_high),
            "n": int(row.n)}


def load_rows(metrics_dir: str | Path, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The dataset's ``dp_release`` and ``dp_utility`` rows, one table, and their mean and CI over seeds."""
    per_seed = pd.concat([pd.read_csv(Path(metrics_dir) / f"dp_release_{dataset}.csv"),
                          pd.read_csv(Path(metrics_dir) / f"dp_utility_{dataset}.csv")], ignore_index=True)
    return per_seed, aggregate(per_seed, BY)


def headline(agg: pd.DataFrame, per_seed: pd.DataFrame, epsilon: float) -> dict:
    """Baseline and ε-specific balanced accuracy (mean, CI over seeds) beside chance, plus intrinsic utility."""
    def pick(mechanism, eps, protocol, metric):
        rows = agg[(agg.mechanism == mechanism) & (agg.protocol == protocol) & (agg.metric == metric)
                   & (np.isclose(agg.epsilon, eps) | (np.isinf(agg.epsilon) & np.isinf(eps)))]
        return None if rows.empty else interval(rows.iloc[0])

    base_seed0 = per_seed[(per_seed.mechanism == "none") & (per_seed.seed == 0) & (per_seed.protocol == "optimistic")]
    wilson = {m: {"value": rounded(r.value), "ci_low": rounded(r.ci_low), "ci_high": rounded(r.ci_high)}
              for m, r in base_seed0.set_index("metric").iterrows() if m in ("accuracy", "recall", "specificity")}
    at_epsilon = f"epsilon_{epsilon_key(epsilon)}"
    out = {"chance_balanced_accuracy": 0.5,
           "baseline": {p: pick("none", math.inf, p, "balanced_accuracy") for p in PROTOCOLS},
           # the same protocol on permuted labels: the score with nothing to learn (the protocol's own bias)
           "negative_control_permuted_labels": {p: pick("permuted_labels", math.inf, p, "balanced_accuracy")
                                                for p in PROTOCOLS},
           "baseline_seed0_wilson": wilson,
           at_epsilon: {}}
    for mechanism in sorted(set(agg.mechanism) - NOT_RELEASES):
        out[at_epsilon][mechanism] = {
            "balanced_accuracy": {p: pick(mechanism, epsilon, p, "balanced_accuracy") for p in PROTOCOLS},
            "correlation": pick(mechanism, epsilon, "intrinsic", "correlation"),
            "snr_db": pick(mechanism, epsilon, "intrinsic", "snr_db"),
            "noise_scale": pick(mechanism, epsilon, "intrinsic", "noise_scale"),
        }
    return out


def dataset_summary(dataset: str, agg: pd.DataFrame, per_seed: pd.DataFrame, epsilon: float) -> dict:
    """The dataset's entry of ``metrics/dp_release.json``: what it is, then :func:`headline`."""
    return {"dataset_version": str(per_seed["dataset_version"].iloc[0]), "synthetic": dataset.startswith("synthetic"),
            "n_patients": int(per_seed["n_patients"].iloc[0]), "n_features": int(per_seed["n_features"].iloc[0]),
            **headline(agg, per_seed, epsilon)}


def headline_metrics(summary: dict, epsilon: float) -> dict:
    """The dataset's headline as flat MLflow metrics (baseline, each mechanism's balanced accuracy at ε)."""
    tag = f"eps_{epsilon_key(epsilon)}"
    flat = {"baseline_balanced_accuracy_optimistic": (summary["baseline"]["optimistic"] or {}).get("mean")}
    for mechanism, values in summary[f"epsilon_{epsilon_key(epsilon)}"].items():
        for protocol, ba in values["balanced_accuracy"].items():
            if ba and ba["mean"] is not None:
                flat[f"{mechanism}/{tag}/balanced_accuracy_{protocol}_mean"] = ba["mean"]
    return {k: v for k, v in flat.items() if v is not None}
