"""The Pareto figure of study A's Optuna search (``optuna_study_a``), drawn from its trial rows and front summary
(:mod:`eegprivacy.studies.release.search`): the search as it saw itself and its front re-evaluated on fresh seeds,
so the gap between the two (the winner's curse of picking the best of many noisy trials) is visible."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from eegprivacy.reporting.figures import titled


def release_pareto_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    """All complete trials by mechanism (search-time means), the search's front as a dashed step line, each front
    trial's re-evaluated point with its intervals and a line back to its search-time point, the matched null's
    level and re-identification chance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    up, down = tuple(summary["objectives"])
    searched = tidy[(tidy["phase"] == "search") & (tidy["state"] == "COMPLETE")]
    wide = searched.pivot_table(index=["trial", "mechanism"], columns="metric", values="value").reset_index()
    front = pd.DataFrame(summary["front"])
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    for mechanism, rows in wide.groupby("mechanism"):
        ax.scatter(rows[down], rows[up], s=20, alpha=0.45, label=f"{mechanism} (search)")
    if len(front):
        ax.step(front[f"search_{down}"], front[f"search_{up}"], where="post", color="black", lw=1, ls="--")
        ax.scatter(front[f"search_{down}"], front[f"search_{up}"], s=70, facecolors="none", edgecolors="black",
                   label=f"search front ({len(front)}), mean of {len(summary['noise_seeds'])} seeds")
        for row in front.itertuples():
            ax.plot([getattr(row, f"search_{down}"), getattr(row, down)],
                    [getattr(row, f"search_{up}"), getattr(row, up)], color="grey", lw=0.7)
        yerr = [front[up] - front[f"{up}_ci_low"], front[f"{up}_ci_high"] - front[up]]
        xerr = [front[down] - front[f"{down}_ci_low"], front[f"{down}_ci_high"] - front[down]]
        ax.errorbar(front[down], front[up], yerr=yerr, xerr=xerr, fmt="o", color="firebrick", ms=5, lw=1,
                    capsize=2, label=f"re-evaluated, {len(summary['reevaluation_seeds'])} fresh seeds "
                                     f"({summary['ci_over']['auroc']} / {summary['ci_over'][down]} intervals)")
    ax.axhline(summary["chance"][up], color="grey", ls="--", lw=1, label="matched null (no utility above it)")
    ax.axvline(summary["chance"][down], color="grey", ls=":", lw=1,
               label=f"re-identification chance (1/K = 1/{summary['n_subjects']})")
    ax.set_xlabel(f"re-identification top-1 accuracy ({summary['reidentification'].split(':')[0]}, nearest "
                  "neighbour) ↓")
    ax.set_ylabel("LOSO AUROC of the release − matched null ↑")
    ax.set_title(titled(f"{summary['dataset']}: privacy–utility search, {summary['n_trials']} trials, ε per "
                        f"{summary['eps_unit']}", summary["synthetic"]), fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)  # below: the data fill the box
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
