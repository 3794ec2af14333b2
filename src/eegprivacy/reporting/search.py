"""The Pareto figure of study A's Optuna search (``optuna_study_a``), drawn from its trial rows and front summary
(:mod:`eegprivacy.studies.release.search`) with :func:`eegprivacy.pipeline.search.pareto_figure`."""

from __future__ import annotations

import pandas as pd

from eegprivacy.pipeline import search
from eegprivacy.reporting.figures import titled


def release_pareto_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    """All complete trials by mechanism, the front as a step line, chance levels and the no-release point
    (the objectives, maximised then minimised, as the summary names them)."""
    search.pareto_figure(
        tidy, tuple(summary["objectives"]), "mechanism", path, xlabel="re-identification top-1 accuracy (nearest neighbour) ↓",
        ylabel=f"LOSO balanced accuracy ({summary['protocol']} threshold) ↑",
        title=titled(f"{summary['dataset']}: privacy–utility search, {summary['n_trials']} trials, "
                     f"mean of {summary['noise_seeds']} noise seeds", summary["synthetic"]),
        chance=summary["chance"], chance_point="no release",
        chance_labels={"balanced_accuracy": "chance balanced accuracy (0.5)",
                       "top1_accuracy": f"re-identification chance (1/K = 1/{summary['n_subjects']})"})
