"""The figure of ``linkage``: precision and recall against the Dice threshold, from the curves and summary
:mod:`eegprivacy.studies.release.linkage` computed."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.reporting.figures import titled


def precision_recall_figure(curves: pd.DataFrame, summary: dict):
    """Precision and recall against the Dice threshold, one line per typo rate (shaded 95% CI), exact linkage
    dashed, the headline threshold dotted."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharey=True, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes, ("precision", "recall")):
        for k, (typo_rate, part) in enumerate(curves[curves.metric == metric].groupby("typo_rate", sort=True)):
            color = colors[k % len(colors)]
            bloom = part[part.method == "bloom"]
            t, mean, low, high = (bloom[c].to_numpy(dtype=float) for c in ("threshold", "mean", "ci_low", "ci_high"))
            ax.plot(t, mean, marker="o", ms=3, color=color, label=f"typo rate {typo_rate:g}: Bloom")
            if np.isfinite(low).all():
                ax.fill_between(t, low, high, color=color, alpha=0.15, lw=0)
            exact = part.loc[part.method == "exact_hmac", "mean"].iloc[0]
            ax.axhline(exact, color=color, ls="--", lw=1, label=f"typo rate {typo_rate:g}: exact GlobalID")
        ax.axvline(summary["default_threshold"], color="grey", ls=":", lw=1)
        ax.set_xlabel("Dice threshold (Bloom filters)")
        ax.set_title(metric, fontsize=9)
    axes[0].set_ylabel("mean over seeds (95% CI)")
    handles, labels = axes[0].get_legend_handles_labels()
    # one legend column per typo rate: Bloom above exact
    fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(handles) // 2), fontsize=7)
    fig.suptitle(titled(f"Record linkage of SYNTHETIC identities: exact GlobalID vs Bloom filters "
                        f"(n = {summary['n_records']}, {summary['seeds']} seeds, "
                        f"format rate {summary['format_rate']:g})", True), fontsize=10)
    return fig
