"""Outputs of ``table_attacks``: the headline JSON DVC tracks and the attacks-vs-ε figure (from the summary
:func:`eegprivacy.studies.release.table_attacks.summarise` computed)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.reporting.release_figures import panels_vs_epsilon

HEADLINE_FIELDS = ("value", "ci_low", "ci_high", "n_seeds", "chance", "wilson_low", "wilson_high")
# Labels kept beside the numbers where they apply (an empty label, e.g. membership's attack kind, is left out).
HEADLINE_LABELS = ("attack_kind", "ci_over", "wilson_over", "eps_unit")
PANELS = [("re-identification, top-1", "top1_accuracy", "nearest_neighbour_euclidean", "accuracy"),
          ("re-identification, top-5", "top5_accuracy", "nearest_neighbour_euclidean", "accuracy"),
          ("membership (likelihood), AUROC", "auroc", "likelihood", "AUROC"),
          ("membership (likelihood), TPR @ 1% FPR", "tpr_at_fpr_0.01", "likelihood", "TPR")]


def write_headline(summary: pd.DataFrame, path) -> None:
    """Headline numbers for DVC: one entry per attack/attacker/mechanism/ε/metric (non-finite values as null),
    with what its intervals are over, ε's unit and the re-identification attack kind."""
    out = {}
    for record in summary.to_dict("records"):
        eps = record["epsilon"]
        key = "/".join([record["attack"], record["attacker"], record["mechanism"],
                        "none" if not np.isfinite(eps) else f"eps_{eps:g}", record["metric"]])
        out[key] = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record.items()
                    if k in HEADLINE_FIELDS or (k in HEADLINE_LABELS and v)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def figure_title(dataset: str, attack_kind: str) -> str:
    """The attacks figure's title: the re-identification kind, and for same-session halves what it bounds."""
    bound = ", an upper bound on cross-session linkage" if attack_kind == "same-session halves" else ""
    return f"{dataset}: attacks on the released patient table vs ε (re-identification: {attack_kind}{bound})"


def attacks_figure(summary: pd.DataFrame, dataset: str, synthetic: bool, path) -> None:
    """Re-identification top-1/top-5 and likelihood membership AUROC / TPR at 1% FPR against ε."""
    agg = summary.rename(columns={"attacker": "protocol"})
    kinds = sorted(set(summary["attack_kind"]) - {""})
    fig = panels_vs_epsilon(agg, PANELS, figure_title(dataset, ", ".join(kinds)), synthetic)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
