"""Study B's per-round rows summarised: what ``federated_mia_report`` tabulates and draws.

Two spreads, named apart. ``std`` (the paper's ±) is the standard deviation across federated rounds of one run,
averaged over seeds: how a score moves during training, not uncertainty. ``ci_low``/``ci_high`` is the 95 %
Student-t interval across seeds (split, initialisation, client sampling and DP noise all change with the seed) of
each seed's mean over rounds: the uncertainty of the number. Chance levels stand beside every attack score.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.attacks.membership import loss_gap_regression
from eegprivacy.evaluation.intervals import mean_ci

EPSILON_SCOPE = ("ε is per mechanism application (one local optimiser step on one batch gradient), not a "
                 "cumulative guarantee over steps, epochs or rounds.")
KEYS = ["dataset", "synthetic", "model", "epsilon", "attack", "attacker", "metric"]
# (attacker, RLA metric) pairs regressed on the loss gap: RF accuracy, because LR's accuracy mostly sits at the
# majority guess (members are 80 %) and has nothing to regress; LR AUROC, which does not move with the ratio.
REGRESSIONS = (("rf", "accuracy"), ("lr", "auroc"))


def read_rows(paths) -> pd.DataFrame:
    """Every dataset's tidy rows of ``federated_mia``, concatenated (an error naming a missing file)."""
    frames = []
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run `eegprivacy federated-mia --dataset ...` first")
        frames.append(pd.read_csv(path, float_precision="round_trip"))
    return pd.concat(frames, ignore_index=True)


def across_rounds(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per seed: mean and std (ddof 1) over rounds. Across seeds: the mean, the round-std averaged, and the 95 %
    t-interval of the per-seed means (nan with one seed); chance beside."""
    frame = tidy.copy()
    for column in ("attack", "attacker"):
        frame[column] = frame[column].fillna("")
    per_seed = frame.groupby([*KEYS, "seed"], dropna=False).agg(
        mean=("value", "mean"), std=("value", lambda v: v.std(ddof=1) if v.notna().sum() > 1 else np.nan),
        n_rounds=("value", "count"), chance=("chance", "first")).reset_index()
    out = per_seed.groupby(KEYS, dropna=False).agg(
        mean=("mean", "mean"), std=("std", "mean"), n_rounds=("n_rounds", "mean"), chance=("chance", "first"),
        n_seeds=("seed", "nunique")).reset_index()
    intervals = per_seed.groupby(KEYS, dropna=False)["mean"].apply(
        lambda v: mean_ci(v.dropna())[1:] if v.notna().any() else (np.nan, np.nan))
    bounds = pd.DataFrame(intervals.tolist(), index=intervals.index, columns=["ci_low", "ci_high"]).reset_index()
    out = out.merge(bounds, on=KEYS, how="left")
    # A t-interval knows nothing of a score's range: clip scores (not losses, norms or counts) to [0, 1].
    scores = ~out["metric"].str.contains("loss|grad_norm|noise_scale|n_clients", regex=True)
    out.loc[scores, ["ci_low", "ci_high"]] = out.loc[scores, ["ci_low", "ci_high"]].clip(0.0, 1.0)
    return out


def regressions_by_dataset(tidy: pd.DataFrame) -> dict:
    """OLS of RLA scores on the loss gap over every (model, ε, seed, round) of a dataset; each entry keeps its
    ``points`` for the figure, or says why there is no regression (``error``)."""
    out = {}
    for dataset, part in tidy.groupby("dataset"):
        gap = part[part["metric"] == "loss_gap"].set_index(["model", "epsilon", "seed", "round"])["value"]
        for attacker, metric in REGRESSIONS:
            rla = part[(part["attack"] == "rla") & (part["attacker"] == attacker) & (part["metric"] == metric)]
            rla = rla.set_index(["model", "epsilon", "seed", "round"])["value"]
            joined = pd.concat([gap.rename("gap"), rla.rename("rla")], axis=1).dropna()
            key = f"{dataset}/rla_{metric}_{attacker}"
            if len(joined) and np.ptp(joined["rla"].to_numpy()) == 0:
                out[key] = {"error": f"RLA {metric} ({attacker}) is the same in every round: nothing to regress"}
                continue
            try:
                out[key] = {**loss_gap_regression(joined["gap"], joined["rla"]),
                            "points": joined.reset_index().to_dict("list")}
            except ValueError as err:  # too few rounds or a constant gap: say so instead of failing the report
                out[key] = {"error": str(err)}
    return out


def without_points(regressions: dict) -> dict:
    """The regressions as the JSON and the tables give them (the scatter points left out)."""
    return {d: {k: v for k, v in r.items() if k != "points"} for d, r in regressions.items()}
