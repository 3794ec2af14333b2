"""Study B's per-round rows summarised: what ``federated_mia_report`` tabulates and draws.

Two spreads, named apart. ``std`` (the paper's ±) is the standard deviation across federated rounds of one run,
averaged over seeds: how a score moves during training, not uncertainty. ``ci_low``/``ci_high`` is the 95 %
interval of the mean over seeds of each seed's mean over rounds: the uncertainty of the number, over the privacy
unit. The subject is the unit and every subject is one client, so the interval is a cluster bootstrap over
subjects crossed with seeds (``ci_over = subjects+seeds``): every cell stores, per summary key, B replicates of its
mean over rounds on the same B client resamples (:mod:`~eegprivacy.studies.federated.replicates`, in the cell's
npz), and :func:`across_rounds` averages the per-seed replicates over a resample of the seeds
(:func:`~eegprivacy.evaluation.cluster_bootstrap.combine_seeds`) into a percentile interval. Numbers without a
per-client reading (CLA: its label is the client; GLA (paper): real vs Gaussian vectors; counts and constants)
keep the Student-t interval across seeds, labelled ``ci_over = seeds`` and ``ci_method = t(n−1)`` (3 seeds: t(2),
clipped to [0, 1] for scores, ``ci_clipped``). Chance levels stand beside every attack score.

Each tested score gets a one-sided test against its chance (the bootstrap p-value of score − chance; the
one-sample t-test of the per-seed means on ``seeds`` rows) and a Holm adjustment over its family
(:func:`family`): one family per printed table, the (dataset, attacker) attack tables and the dataset's utility
table. Controls (``*_control``: the untrained-model and sound-GLA controls) are shown beside the attacks and are
never tested (:func:`is_control`). ``reports/federated_mia_tables.md`` and ``reports/study-b.md`` both print
this ``p_holm`` (the report stage logs it per cell, :func:`run_metrics`). :func:`client_utility` gives each
client's own accuracy with its chance and a Holm-adjusted binomial test, so the clients a federation leaves near
chance are listed, not averaged away.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from eegprivacy.attacks.membership import loss_gap_regression
from eegprivacy.evaluation.cluster_bootstrap import (
    bootstrap_p_value,
    combine_seeds,
    holm,
    percentile_interval,
    seed_indices,
)
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.studies.federated.replicates import replicate_key

EPSILON_SCOPE = ("ε is per mechanism application (one local optimiser step on one batch gradient), not a "
                 "cumulative guarantee over steps, epochs or rounds.")
KEYS = ["dataset", "synthetic", "model", "epsilon", "attack", "attacker", "metric"]
# (attacker, RLA metric) pairs regressed on the loss gap: RF accuracy, because LR's accuracy mostly sits at the
# majority guess (members are 80 %) and has nothing to regress; LR AUROC, which does not move with the ratio.
REGRESSIONS = (("rf", "accuracy"), ("lr", "auroc"))
CONFIDENCE = 0.95
# A cell's npz as federated_mia exports it: data/federated_mia/<dataset>/<model>-eps<ε>-seed<seed>.npz
ARRAYS_NAME = re.compile(r"(?P<model>.+)-eps(?P<epsilon>[^-]+)-seed(?P<seed>\d+)\.npz")


def read_rows(paths) -> pd.DataFrame:
    """Every dataset's tidy rows of ``federated_mia``, concatenated (an error naming a missing file)."""
    frames = []
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run `eegprivacy federated-mia --dataset ...` first")
        frames.append(pd.read_csv(path, float_precision="round_trip"))
    return pd.concat(frames, ignore_index=True)


def _eps_text(epsilon) -> str:
    return f"{float(epsilon):g}"


def read_replicates(folders: dict) -> dict:
    """Every cell's replicates from its exported npz: ``{(dataset, model, ε text, seed): {key: (B,) vector}}``.

    Parameters
    ----------
    folders : dict
        dataset -> the folder ``federated_mia`` exported its cells' arrays to (``data/federated_mia/<dataset>``).
        A missing folder, or a cell saved before replicates were kept, contributes nothing (those rows fall back
        to the seeds interval, labelled).

    Returns
    -------
    dict
        Only the ``replicates``/``replicate_keys`` members are read (not the update vectors).
    """
    out = {}
    for dataset, folder in folders.items():
        for path in sorted(Path(folder).glob("*.npz")) if Path(folder).is_dir() else []:
            match = ARRAYS_NAME.fullmatch(path.name)
            if not match:
                continue
            with np.load(path) as arrays:
                if "replicates" not in arrays.files:
                    continue
                keys, reps = arrays["replicate_keys"], arrays["replicates"]
                out[(dataset, match["model"], _eps_text(match["epsilon"]), int(match["seed"]))] = dict(
                    zip((str(k) for k in keys), reps))
    return out


def across_rounds(tidy: pd.DataFrame, replicates: dict | None = None, confidence: float = CONFIDENCE
                  ) -> pd.DataFrame:
    """Per seed: mean and std (ddof 1) over rounds. Across seeds: the mean, the round-std averaged, chance beside,
    and the 95 % interval of the mean with what it is over.

    Parameters
    ----------
    tidy : pandas.DataFrame
        ``federated_mia``'s per-round rows of one or more datasets.
    replicates : dict, optional
        :func:`read_replicates`'s per-cell replicate vectors. A summary row whose every seed has its key gets the
        cluster-bootstrap interval over subjects+seeds (percentile of :func:`combine_seeds` of the per-seed
        replicates, seeds resampled by :func:`seed_indices`) and, where tested, the bootstrap p-value of
        score − chance; any other row the t-interval over seeds (NaN with one seed) and the one-sample t-test,
        ``ci_over = seeds``.
    confidence : float, default 0.95

    Returns
    -------
    pandas.DataFrame
        One row per (dataset, model, ε, attack, attacker, metric) with ``mean``, ``std``, ``ci_low``,
        ``ci_high``, ``ci_over``, ``ci_method``, ``ci_clipped``, ``p_value`` (NaN for controls), ``p_holm`` and
        ``holm_family`` (:func:`with_holm`).
    """
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
    out = _with_bootstrap(out, per_seed, replicates or {}, confidence)
    out.loc[out["attack"].map(is_control), "p_value"] = np.nan  # controls are shown, never tested
    return with_holm(out)


def _with_bootstrap(out: pd.DataFrame, per_seed: pd.DataFrame, replicates: dict, confidence: float
                    ) -> pd.DataFrame:
    """The subjects+seeds interval and bootstrap p-value of every row whose seeds all stored replicates."""
    if not replicates:
        return out
    seeds_of = per_seed.groupby(KEYS, dropna=False)["seed"].agg(lambda v: sorted(set(v)))
    out = out.copy()
    for i, row in out.iterrows():
        key = replicate_key(row["attack"], row["attacker"], row["metric"])
        seeds = seeds_of.get(tuple(row[k] for k in KEYS), [])
        vectors = [replicates.get((row["dataset"], row["model"], _eps_text(row["epsilon"]), int(s)), {}).get(key)
                   for s in seeds]
        if not seeds or any(v is None for v in vectors) or len({len(v) for v in vectors}) != 1:
            continue
        per_seed_reps = np.stack(vectors).astype(float)  # (seeds, B): the same client resamples in every seed
        n_resamples = per_seed_reps.shape[1]
        reps = combine_seeds(per_seed_reps, seed_indices(len(seeds), n_resamples, seed=0))
        low, high = percentile_interval(reps, confidence)
        out.loc[i, ["ci_low", "ci_high"]] = [low, high]
        out.loc[i, ["ci_over", "ci_method", "ci_clipped"]] = ["subjects+seeds",
                                                             f"cluster bootstrap ({n_resamples} resamples)", False]
        chance = float(row["chance"]) if pd.notna(row["chance"]) else float("nan")
        out.loc[i, "p_value"] = bootstrap_p_value(reps - chance) if np.isfinite(chance) else np.nan
    return out


def _above_chance(part: pd.DataFrame) -> float:
    """One-sided one-sample t-test of the per-seed means against chance (NaN without chance, two finite seeds,
    or any spread: a constant score has no t)."""
    values, chance = part["mean"].dropna().to_numpy(dtype=float), part["chance"].iloc[0]
    if not np.isfinite(chance) or values.size < 2 or np.ptp(values) == 0:
        return float("nan")
    return float(stats.ttest_1samp(values, chance, alternative="greater").pvalue)


# The hypotheses: utility above chance, and each attack's AUROC above chance (the claim "this attack leaks"). An
# attack's accuracy moves with the member/non-member ratio and its TPR at 1 % FPR rests on a few non-members of the
# attacker-test half: both are printed as estimates with their intervals, untested, so a family holds one test per
# attack cell and a bootstrap of B resamples can pass Holm's first step (1/(B+1) × m < α).
TESTED = ("utility_accuracy", "utility_auroc", "auroc")


def is_control(attack) -> bool:
    """A control row (``*_untrained_control``, ``gla_sound_control``, ``gla_sound_pooled_control``): printed
    beside the attack it controls, never a hypothesis of a family."""
    return isinstance(attack, str) and attack.endswith("_control")


def family(row) -> str:
    """The Holm family of a summary row: the one printed table it belongs to, ``<dataset>/attacks/<attacker>``
    (every attack table of that attacker in reports/federated_mia_tables.md) or ``<dataset>/utility`` (the
    dataset's classification table). The same families in reports/study-b.md (the report stage logs them)."""
    if row["attack"]:
        return f"{row['dataset']}/attacks/{row['attacker']}"
    return f"{row['dataset']}/utility"


table_of = family  # the name issue 20's tests and callers know


def tested(summary: pd.DataFrame) -> pd.Series:
    """The rows that are hypotheses: a :data:`TESTED` metric, not a control, with a p-value."""
    attack = summary["attack"] if "attack" in summary else pd.Series("", index=summary.index)
    p = summary["p_value"] if "p_value" in summary else pd.Series(np.nan, index=summary.index)
    return summary["metric"].isin(TESTED) & ~attack.map(is_control) & p.notna()


def with_holm(summary: pd.DataFrame) -> pd.DataFrame:
    """``p_holm``: each tested score's p-value (:func:`tested`) Holm-adjusted over its family (:func:`family`),
    named in ``holm_family`` with its size in ``holm_m`` (empty and NaN for untested rows)."""
    out = summary.copy()
    out["p_holm"] = np.nan
    out["holm_family"] = ""
    out["holm_m"] = np.nan
    if "p_value" not in out:
        out["p_value"] = np.nan
    mask = tested(out)
    if mask.any():
        families = out[mask].apply(family, axis=1)
        for name, index in families.groupby(families).groups.items():
            out.loc[index, "p_holm"] = holm(out.loc[index, "p_value"].to_numpy())
            out.loc[index, "holm_family"] = name
            out.loc[index, "holm_m"] = len(index)
    return out


# What reports/study-b.md prints per (dataset, model, ε): utility accuracy and every attack's AUROC.
RUN_METRICS = ("utility_accuracy", "auroc")


def run_metric_name(row) -> str:
    """The MLflow name of one summary cell in its dataset's ``federated_mia_report`` run:
    ``summary/<model>/eps_<ε>/<attack or utility>/<attacker or none>/<metric>`` (suffixes ``_mean``, ...)."""
    return "/".join(["summary", row["model"], f"eps_{epsilon_key(row['epsilon'])}", row["attack"] or "utility",
                     row["attacker"] or "none", row["metric"]])


def run_metrics(summary: pd.DataFrame, dataset: str) -> tuple[dict, dict]:
    """(metrics, tags) of one dataset's ``federated_mia_report`` run: per cell study B's report prints
    (:data:`RUN_METRICS`) its ``_mean``, ``_ci_low``, ``_ci_high``, ``_n`` (seeds), ``_p_value`` and ``_p_holm``
    (finite values only), and the tags ``_ci_over`` and ``_holm_family``: reports/study-b.md prints these, so both
    reports print one computation's p_holm."""
    metrics, tags = {}, {}
    part = summary[(summary["dataset"] == dataset) & summary["metric"].isin(RUN_METRICS)]
    for _, row in part.iterrows():
        name = run_metric_name(row)
        for suffix, column in (("mean", "mean"), ("ci_low", "ci_low"), ("ci_high", "ci_high"), ("n", "n_seeds"),
                               ("p_value", "p_value"), ("p_holm", "p_holm")):
            value = row.get(column, np.nan)
            if pd.notna(value) and np.isfinite(float(value)):
                metrics[f"{name}_{suffix}"] = float(value)
        tags[f"{name}_ci_over"] = str(row.get("ci_over", "seeds"))
        if isinstance(row.get("holm_family"), str) and row["holm_family"]:
            tags[f"{name}_holm_family"] = row["holm_family"]
    return metrics, tags


def client_utility(tidy: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Each client's accuracy on its non-members after the last round, averaged over seeds, beside its chance.

    Per (dataset, model, ε, client): the accuracy averaged over the S seeds (``accuracy``) read as a binomial
    count on ``n_effective`` trials, the trials one seed scores (``n``, their mean) divided by the design effect
    ``deff`` = 1/S + (1 − 1/S)·f, f the non-member share of a subject's trials (the rows' ``test_size``); a
    Clopper–Pearson interval and the one-sided binomial p-value against chance 0.5 on that count, and
    ``above_chance`` after Holm over the clients of the (dataset, model, ε).

    Why the design effect: each seed draws its own split of the same subject's trials, so two seeds' non-members
    share a fraction f of their trials on average, and a shared trial is scored by models that differ little.
    Pooling the seeds' predictions counted it as independent evidence each time, and on eegmmidb-shaped nulls
    that test rejected 0.065 [0.051, 0.082] of clients at chance (issue 46, ``reports/calibration.md``). Under
    the null every trial is right with probability 1/2; distinct trials are independent (the binomial's own
    premise) and one trial's correctness in two seeds correlates at most perfectly, so the variance of the mean
    over seeds is at most (1/4)·deff / n: the count on n/deff trials is the binomial with that variance. (f = 0.2
    and S = 5 give deff 0.36: 2.8 times one seed's trials, where pooling claimed 5 times.) Without ``test_size``
    (rows from elsewhere) f is taken as 1: one seed's trials, the conservative bound."""
    rows = tidy[tidy["metric"] == "client_accuracy"]
    if rows.empty:
        return pd.DataFrame()
    last = rows.groupby(["dataset", "model", "epsilon", "seed"])["round"].transform("max")
    rows = rows[rows["round"] == last].copy()
    rows["share"] = pd.to_numeric(rows["test_size"], errors="coerce").fillna(1.0) if "test_size" in rows else 1.0
    pooled = rows.groupby(["dataset", "synthetic", "model", "epsilon", "client"], dropna=False).agg(
        accuracy=("value", "mean"), n=("n", "mean"), n_seeds=("seed", "nunique"), share=("share", "max")
    ).reset_index()
    seeds = pooled["n_seeds"].astype(float)
    pooled["deff"] = 1.0 / seeds + (1.0 - 1.0 / seeds) * pooled["share"].clip(0.0, 1.0)
    pooled["n_effective"] = np.floor(pooled["n"] / pooled["deff"] + 1e-9).astype(int)
    pooled["hits"] = np.round(pooled["accuracy"] * pooled["n_effective"]).astype(int)
    pooled["chance"] = 0.5
    bounds = [stats.binomtest(int(h), int(n)).proportion_ci(confidence_level=1 - alpha) for h, n in
              zip(pooled["hits"], pooled["n_effective"])]
    pooled["ci_low"] = [b.low for b in bounds]
    pooled["ci_high"] = [b.high for b in bounds]
    pooled["p_value"] = [stats.binomtest(int(h), int(n), 0.5, alternative="greater").pvalue
                         for h, n in zip(pooled["hits"], pooled["n_effective"])]
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
