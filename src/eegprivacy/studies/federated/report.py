"""Study B's per-round rows summarised: what ``federated_mia_report`` tabulates and draws.

Two spreads, named apart. ``std`` (the paper's ±) is the standard deviation across federated rounds of one run,
averaged over seeds: how a score moves during training, not uncertainty. ``ci_low``/``ci_high`` is the 95 %
Student-t interval across seeds (split, initialisation, client sampling and DP noise all change with the seed) of
each seed's mean over rounds: the uncertainty of the number. With 3 seeds it is a t(2) interval (quantile 4.30),
wide and marked as such (``ci_method``); scores' intervals are clipped to [0, 1] (``ci_clipped``). Chance levels
stand beside every attack score.

Each score also gets a one-sided test against its chance (one-sample t-test of the per-seed means: is the score
above chance?) and a Holm adjustment over every cell of its table (:func:`table_of`: one table per dataset for
utility, one per (dataset, attacker) for the attacks), so a table that tests ~30 cells does not call one of them
"leaky" by luck. :func:`client_utility` gives each client's own accuracy with its chance and a Holm-adjusted
binomial test, so the clients a federation leaves near chance are listed, not averaged away.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from eegprivacy.attacks.membership import loss_gap_regression
from eegprivacy.evaluation.cluster_bootstrap import holm
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
    # A t-interval knows nothing of a score's range: clip scores (not losses, norms or counts) to [0, 1], and say
    # so (``ci_clipped``); ``ci_method`` names the t quantile's degrees of freedom (3 seeds: t(2), very wide).
    scores = ~out["metric"].str.contains("loss|grad_norm|noise_scale|n_clients|unnoised", regex=True)
    bounds = out.loc[scores, ["ci_low", "ci_high"]]
    out["ci_clipped"] = False
    out.loc[scores, "ci_clipped"] = ((bounds["ci_low"] < 0.0) | (bounds["ci_high"] > 1.0)).to_numpy()
    out.loc[scores, ["ci_low", "ci_high"]] = bounds.clip(0.0, 1.0)
    out["ci_over"] = "seeds"
    out["ci_method"] = [f"t({int(n) - 1})" if n > 1 else "none" for n in out["n_seeds"]]
    tests = per_seed.groupby(KEYS, dropna=False).apply(_above_chance, include_groups=False).rename("p_value")
    out = out.merge(tests.reset_index(), on=KEYS, how="left")
    return with_holm(out)


def _above_chance(part: pd.DataFrame) -> float:
    """One-sided one-sample t-test of the per-seed means against chance (NaN without chance, two finite seeds,
    or any spread: a constant score has no t)."""
    values, chance = part["mean"].dropna().to_numpy(dtype=float), part["chance"].iloc[0]
    if not np.isfinite(chance) or values.size < 2 or np.ptp(values) == 0:
        return float("nan")
    return float(stats.ttest_1samp(values, chance, alternative="greater").pvalue)


TESTED = ("utility_accuracy", "utility_auroc", "accuracy", "auroc", "tpr_at_fpr_0.01")


def table_of(row) -> str:
    """Which table a summary row is printed in (the family its Holm adjustment runs over): the dataset's
    classification table, or its attack table for one attacker (untrained controls included)."""
    if row["attack"]:
        return f"{row['dataset']}/attacks/{row['attacker']}"
    return f"{row['dataset']}/utility"


def with_holm(summary: pd.DataFrame) -> pd.DataFrame:
    """``p_holm``: each tested score's p-value Holm-adjusted over the cells of its table (:func:`table_of`)."""
    out = summary.copy()
    out["p_holm"] = np.nan
    if "p_value" not in out:
        out["p_value"] = np.nan
    tested = out["metric"].isin(TESTED) & out["p_value"].notna()
    if tested.any():
        families = out[tested].apply(table_of, axis=1)
        for _, index in families.groupby(families).groups.items():
            out.loc[index, "p_holm"] = holm(out.loc[index, "p_value"].to_numpy())
    return out


def client_utility(tidy: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Each client's accuracy on its non-members after the last round, pooled over seeds, beside its chance.

    Per (dataset, model, ε, client): correct predictions and trials summed over seeds (each seed draws its own
    80/20 split, so a trial can be a non-member in several seeds: the pooled count is an approximation that
    overstates the independent trials), a Clopper–Pearson interval, the one-sided binomial p-value against
    chance 0.5, and ``above_chance`` after Holm over the clients of the (dataset, model, ε)."""
    rows = tidy[tidy["metric"] == "client_accuracy"]
    if rows.empty:
        return pd.DataFrame()
    last = rows.groupby(["dataset", "model", "epsilon", "seed"])["round"].transform("max")
    rows = rows[rows["round"] == last].copy()
    rows["hits"] = np.round(rows["value"] * rows["n"])
    pooled = rows.groupby(["dataset", "synthetic", "model", "epsilon", "client"], dropna=False).agg(
        hits=("hits", "sum"), n=("n", "sum"), n_seeds=("seed", "nunique")).reset_index()
    pooled["accuracy"] = pooled["hits"] / pooled["n"]
    pooled["chance"] = 0.5
    bounds = [stats.binomtest(int(h), int(n)).proportion_ci(confidence_level=1 - alpha) for h, n in
              zip(pooled["hits"], pooled["n"])]
    pooled["ci_low"] = [b.low for b in bounds]
    pooled["ci_high"] = [b.high for b in bounds]
    pooled["p_value"] = [stats.binomtest(int(h), int(n), 0.5, alternative="greater").pvalue
                         for h, n in zip(pooled["hits"], pooled["n"])]
    pooled["p_holm"] = np.nan
    for _, index in pooled.groupby(["dataset", "model", "epsilon"]).groups.items():
        pooled.loc[index, "p_holm"] = holm(pooled.loc[index, "p_value"].to_numpy())
    pooled["above_chance"] = pooled["p_holm"] < alpha
    pooled["client"] = pooled["client"].astype(int)
    return pooled


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
