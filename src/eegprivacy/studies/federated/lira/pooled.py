"""Scores pooled over models (:func:`pooled_rows`): the AUROC and the resolvable TPRs with the two-way bootstrap
over models and clusters of trials (:func:`cluster_bootstrap`), LiRA − control as a paired difference with its
two-sided p-value (:func:`control_difference_rows`) and Holm over the table's cells (:func:`holm_control_cells`),
and the summary table of every scope (:func:`summarise`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.attacks.metrics import auroc, roc
from eegprivacy.evaluation.client_bootstrap import auroc_replicates
from eegprivacy.evaluation.cluster_bootstrap import bootstrap_p_value_two_sided, holm, p_value_mc_error
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.evaluation.weighted_replicates import tpr_at_threshold_weighted, two_way_cells
from eegprivacy.studies.federated.lira.config import (
    ALPHA,
    AUROC_CI,
    CONTROL_SUFFIX,
    CONTROLLED,
    DIFF_CI,
    DIFF_METRIC,
    LOWEST_FPR,
    LOWEST_TPR,
    METRICS,
    POOLED_METRICS,
    TPR_CI,
    UNTRAINED,
)
from eegprivacy.studies.federated.lira.scoring import (
    ZERO_FPR_NOTE,
    chance_of,
    independent_nonmembers,
    not_resolvable_note,
    resolvable,
    resolvable_fpr,
    tpr_at_threshold,
)


def _pooled_metrics(members: np.ndarray, scores: np.ndarray, fprs: dict, with_auroc: bool = True) -> dict:
    """AUROC (if ``with_auroc``) and the TPR at each {metric: fpr} of ``fprs``, the threshold set on these
    (n_models, n_trials) scores' own non-members (:func:`tpr_at_threshold`), pooled."""
    member, score = members.ravel().astype(int), scores.ravel()
    names = (["auroc"] if with_auroc else []) + list(fprs)
    if member.min() == member.max():  # a resample without members or without non-members
        return {m: float("nan") for m in names}
    out = {"auroc": auroc(member, score)} if with_auroc else {}
    out.update({metric: tpr_at_threshold(member, score, fpr) for metric, fpr in fprs.items()})
    return out


def _stack(groups: list) -> tuple[np.ndarray, np.ndarray]:
    """(n_models, n_trials) member masks and scores from [(member, scores) per model]."""
    members = np.stack([np.asarray(g[0]).astype(int).ravel() for g in groups])
    scores = np.stack([np.asarray(g[1], dtype=float).ravel() for g in groups])
    if members.shape != scores.shape:
        raise ValueError(f"every model needs one member flag per score: {members.shape} vs {scores.shape}")
    return members, scores


def _resample_cells(members, resamples, cluster_of) -> tuple[np.ndarray, np.ndarray]:
    """The (models, clusters) resamples as (model, cluster) cells: each row's cell and the (B, cells) counts."""
    n_models, n_clusters = members.shape[0], int(cluster_of.max()) + 1
    model_counts = np.stack([np.bincount(models, minlength=n_models) for models, _ in resamples])
    cluster_counts = np.stack([np.bincount(clusters, minlength=n_clusters) for _, clusters in resamples])
    return two_way_cells(model_counts, cluster_counts, cluster_of)


def _resampled_metrics(members, scores, cluster_of, resamples, fprs: dict, with_auroc: bool) -> list[dict]:
    """:func:`_pooled_metrics` of every resample from its multiplicities, the values the materialised resample
    gives without building it (:func:`~eegprivacy.evaluation.client_bootstrap.auroc_replicates` over the
    resample's (model, cluster) cells; :func:`~eegprivacy.evaluation.weighted_replicates.
    tpr_at_threshold_weighted`)."""
    cells, counts = _resample_cells(members, resamples, cluster_of)
    member, score = members.ravel(), scores.ravel()
    values = {"auroc": auroc_replicates(score, member, cells, counts)} if with_auroc else {}
    weights = counts[:, cells] if fprs else None
    values.update({metric: tpr_at_threshold_weighted(score, member, weights, fpr) for metric, fpr in fprs.items()})
    return [{metric: float(v[b]) for metric, v in values.items()} for b in range(len(resamples))]


def two_way_resamples(n_models: int, n_clusters: int, n_boot: int, seed: int) -> list[tuple]:
    """The two-way bootstrap's resamples, in order: (models, clusters) drawn with replacement, independently, n − 1
    of each n (all n where n ≤ 2: a pool of one model or one cluster is another statistic, not a resample of this
    one). :func:`cluster_bootstrap` and :func:`paired_difference` draw the same ones from the same seed.

    Why n − 1 of n: a resample of all n units has the variance of a mean with divisor n, (n − 1)/n of the
    unbiased one, and with 10 target models and 16 subjects that bias is the interval's: drawn n of n, the paired
    LiRA − control test rejected 0.057 [0.049, 0.066] of 3,000 null pools at α = 0.05 and its interval covered
    0.937 (the calibration stage, ``study_b.lira_minus_control``). Drawing n − 1 of n (the rescaling bootstrap of
    Rao & Wu 1988 at its unbiased size) makes the resampled mean's variance the unbiased s²/n."""
    rng = np.random.default_rng(seed)
    m, k = (n - 1 if n > 2 else n for n in (n_models, n_clusters))
    return [(rng.integers(0, n_models, m), rng.integers(0, n_clusters, k)) for _ in range(n_boot)]


def _cluster_codes(clusters, n_trials: int) -> np.ndarray:
    """The cluster index (0..k − 1) of every trial; every trial its own cluster when ``clusters`` is None."""
    codes = np.arange(n_trials) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    if codes.size != n_trials:
        raise ValueError(f"{codes.size} cluster codes for {n_trials} trials")
    return codes.ravel()


def _over_resamples(function, n_models: int, cluster_of, n_boot: int, seed: int, n_jobs: int, *arrays,
                    **options) -> list:
    """``function(*arrays, cluster_of, chunk, **options)`` over the two-way resamples (:func:`two_way_resamples`,
    drawn here in order) in ``n_jobs`` chunks, one result per chunk in order: ``n_jobs`` moves no interval."""
    resamples = two_way_resamples(n_models, int(cluster_of.max()) + 1, n_boot, seed)
    chunks = [[resamples[i] for i in part] for part in np.array_split(np.arange(n_boot), max(1, n_jobs))]
    if n_jobs > 1:
        from joblib import Parallel, delayed

        return Parallel(n_jobs=n_jobs)(delayed(function)(*arrays, cluster_of, c, **options) for c in chunks)
    return [function(*arrays, cluster_of, c, **options) for c in chunks]


def cluster_bootstrap(members, scores, clusters, fprs: dict, n_boot: int, seed: int, n_jobs: int = 1,
                      with_auroc: bool = True) -> dict[str, tuple[float, float]]:
    """Percentile 95 % intervals from a two-way bootstrap: each resample draws n − 1 of the n models with
    replacement and, independently, n − 1 of the n clusters of trials (``clusters``: one code per trial, e.g. its
    subject; ``None`` = every trial its own cluster; :func:`two_way_resamples` says why n − 1), and pools every
    drawn model's scores on every drawn cluster's trials. Each resample's metrics are computed from its
    multiplicities, exactly as on the materialised resample (:func:`_resampled_metrics`).

    - ``auroc`` (:data:`AUROC_CI`): the AUROC of each resample.
    - each TPR of ``fprs`` ({metric: fpr}; :data:`TPR_CI`, the blocked threshold bootstrap): the threshold is
      re-estimated in every resample, at the same FPR, on the resampled non-members, and the TPR read off the
      resampled members (:func:`tpr_at_threshold`). The interval thus carries the threshold's own sampling error,
      which a binomial interval at a fixed threshold (Clopper–Pearson) leaves out, and resamples whole subjects,
      whose trials share a CSP and a client model, where a binomial interval would count correlated trials as
      independent. Only used where ≥ 10 independent non-members lie beyond the threshold (:func:`resolvable`):
      the percentile interval of a tail quantile is not trusted below that.

    Resampling the models alone would treat the trials as fixed and so ignore the uncertainty that matters most
    when few distinct trials are held out. NaN when fewer than half the resamples give a finite value; the
    resamples are drawn here, in order, so ``n_jobs`` does not move the intervals."""
    names = (["auroc"] if with_auroc else []) + list(fprs)
    out = {m: (float("nan"), float("nan")) for m in names}
    n_models, n_trials = members.shape
    cluster_of = _cluster_codes(clusters, n_trials)
    if n_boot < 1 or n_models * (cluster_of.max() + 1) < 2:
        return out
    parts = _over_resamples(_resampled_metrics, n_models, cluster_of, n_boot, seed, n_jobs, members, scores,
                            fprs=fprs, with_auroc=with_auroc)
    draws = [d for part in parts for d in part]
    for metric in names:
        values = np.array([d[metric] for d in draws], dtype=float)
        values = values[np.isfinite(values)]
        if values.size >= n_boot / 2:
            out[metric] = (float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975)))
    return out


def _n_clusters(n_trials: int, clusters, subjects) -> float:
    """Subject clusters the pool spans (``subjects`` if given, else the bootstrap's clusters, else trials)."""
    codes = subjects if subjects is not None else clusters
    return float(n_trials if codes is None else np.unique(np.asarray(codes)).size)


def pooled_rows(per_model: dict, n_boot: int, seed: int, scope: str, n_jobs: int = 1,
                clusters=None, subjects=None) -> tuple[list[dict], dict]:
    """Metrics of scores pooled over models (each a (member, scores) pair over the same trials, a split of its
    own) and each attack's pooled ROC for the figure.

    Per attack, one row per :data:`POOLED_METRICS`: the AUROC with its two-way bootstrap interval; the TPR at
    :data:`LOWEST_FPR` and at the lowest FPR the pool resolves on the 1-2-5 grid (:func:`resolvable_fpr`, its FPR
    in ``fpr``), each a number with its blocked threshold-bootstrap interval only where ≥ 10 independent
    non-members lie beyond its threshold (``resolvable``), else NaN with ``note`` saying what it needs and has;
    the TPR at zero false positives never resolvable (:data:`ZERO_FPR_NOTE`). Every row names its interval
    (``ci_method``), what it resamples (``ci_over``) and the subject clusters of the pool (``n_clusters``:
    distinct ``subjects``, else ``clusters``)."""
    rows, curves = [], {}
    ci_over = ("trials" if clusters is None else "subjects") + "+seeds"
    for key, groups in per_model.items():
        members, scores = _stack(groups)
        n_independent = independent_nonmembers(members)
        supported = resolvable_fpr(LOWEST_FPR, n_independent) if n_independent else float("nan")
        fprs = {m: f for m, f in ((LOWEST_TPR, LOWEST_FPR), ("tpr_at_resolvable_fpr", supported))
                if np.isfinite(f) and resolvable(f, n_independent)}
        curves[key] = roc(members.ravel(), scores.ravel())
        values = _pooled_metrics(members, scores, fprs)
        intervals = cluster_bootstrap(members, scores, clusters, fprs, n_boot, seed, n_jobs)
        common = {"ci_over": ci_over, "attack": key[0], "attacker": key[1], "scope": scope,
                  "n": float(members.size), "n_nonmembers": float((members == 0).sum()),
                  "n_independent_nonmembers": float(n_independent), "n_models": len(groups),
                  "n_clusters": _n_clusters(members.shape[1], clusters, subjects)}
        for metric in POOLED_METRICS:
            fpr = {LOWEST_TPR: LOWEST_FPR, "tpr_at_resolvable_fpr": supported, "tpr_at_zero_fpr": 0.0}.get(metric,
                                                                                                    np.nan)
            ok = metric == "auroc" or metric in fprs
            note = ("" if ok else ZERO_FPR_NOTE if metric == "tpr_at_zero_fpr"
                    else not_resolvable_note(LOWEST_FPR, n_independent))
            low, high = intervals.get(metric, (np.nan, np.nan)) if ok else (np.nan, np.nan)
            method = "none" if not ok or n_boot < 1 else AUROC_CI if metric == "auroc" else TPR_CI
            chance = chance_of(metric) if metric in ("auroc", "tpr_at_zero_fpr") else fpr
            rows.append({"metric": metric, "value": values[metric] if ok else np.nan, "ci_low": low,
                         "ci_high": high, "ci_method": method, "chance": chance,
                         "fpr": fpr if metric != "auroc" else np.nan, "resolvable": ok, "note": note, **common})
    return rows, curves


def _resampled_differences(members, attack, control_scores, cluster_of, resamples) -> np.ndarray:
    cells, counts = _resample_cells(members, resamples, cluster_of)
    member = members.ravel()
    return (auroc_replicates(attack.ravel(), member, cells, counts)
            - auroc_replicates(control_scores.ravel(), member, cells, counts))


def paired_difference(members, attack, control_scores, clusters, n_boot: int, seed: int, n_jobs: int = 1,
                      confidence: float = 0.95) -> dict:
    """The pooled AUROC of ``attack`` minus that of ``control_scores`` ((n_models, n_trials) scores of the same
    trials and member masks), paired: each of the two-way bootstrap's resamples (:func:`two_way_resamples`, the
    resamples :func:`cluster_bootstrap` draws from the same seed: target models and clusters of trials, e.g.
    subjects) pools both arms on the same models and trials. Returns ``value``, ``ci_low``/``ci_high`` (percentile),
    ``p_value`` (two-sided, "difference = 0",
    :func:`~eegprivacy.evaluation.cluster_bootstrap.bootstrap_p_value_two_sided`: a control above its attack is a
    finding too),
    its Monte-Carlo error ``p_mc_error`` and ``n_resamples`` (finite ones); NaN interval and p without resamples."""
    members = np.asarray(members).astype(int)
    attack, control_scores = np.asarray(attack, dtype=float), np.asarray(control_scores, dtype=float)
    if not members.shape == attack.shape == control_scores.shape:
        raise ValueError(f"members, attack and control must share one shape: {members.shape}, {attack.shape}, "
                         f"{control_scores.shape}")
    n_models, n_trials = members.shape
    value = auroc(members.ravel(), attack.ravel()) - auroc(members.ravel(), control_scores.ravel())
    out = {"value": float(value), "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan, "p_mc_error": np.nan,
           "n_resamples": 0}
    cluster_of = _cluster_codes(clusters, n_trials)
    if n_boot < 1 or n_models * (cluster_of.max() + 1) < 2:
        return out
    parts = _over_resamples(_resampled_differences, n_models, cluster_of, n_boot, seed, n_jobs, members, attack,
                            control_scores)
    draws = np.concatenate(parts)
    draws = draws[np.isfinite(draws)]
    if draws.size < n_boot / 2:
        return out
    alpha = 1.0 - float(confidence)
    p = bootstrap_p_value_two_sided(draws)
    out.update(ci_low=float(np.quantile(draws, alpha / 2)), ci_high=float(np.quantile(draws, 1 - alpha / 2)),
               p_value=p, p_mc_error=p_value_mc_error(p, draws.size), n_resamples=int(draws.size))
    return out


def control_share(attack_auroc: float, control_auroc: float) -> float:
    """How much of the attack's AUROC excess over chance its control reaches: (control − 0.5) / (attack − 0.5);
    NaN where the attack has no excess."""
    excess = float(attack_auroc) - 0.5
    return (float(control_auroc) - 0.5) / excess if excess > 0 else float("nan")


def control_difference_rows(per_model: dict, n_boot: int, seed: int, scope: str = "target_pooled", n_jobs: int = 1,
                            clusters=None, subjects=None) -> list[dict]:
    """One :data:`DIFF_METRIC` row per attack whose control (``<attack>_control``) is in ``per_model`` ({(attack,
    attacker): [(member, scores) per model]}): attack − control of the AUROC pooled over models, with the paired
    two-way bootstrap's interval and two-sided p-value (:func:`paired_difference`), the attack's, the control's and
    (online) the untrained model's pooled AUROC beside, and ``control_share``. Only the attacks of
    :data:`CONTROLLED` (every reference attack on all references) are tested: the others (on k references) keep
    their interval and carry no p-value, so no Holm family holds them. Holm is applied over a table's cells
    afterwards (:func:`holm_control_cells`)."""
    rows = []
    ci_over = ("trials" if clusters is None else "subjects") + "+seeds"
    untrained = per_model.get((UNTRAINED, ""))
    attacks = [a for a, b in per_model if b == "" and (a + CONTROL_SUFFIX, "") in per_model]
    for attack in sorted(attacks, key=lambda a: (a not in CONTROLLED, a)):
        members, scores = _stack(per_model[(attack, "")])
        control_members, control_scores = _stack(per_model[(attack + CONTROL_SUFFIX, "")])
        if not np.array_equal(members, control_members):
            raise ValueError(f"{attack} and its control must score the same members of the same models")
        diff = paired_difference(members, scores, control_scores, clusters, n_boot, seed, n_jobs)
        a, c = auroc(members.ravel(), scores.ravel()), auroc(members.ravel(), control_scores.ravel())
        u = (auroc(*(x.ravel() for x in _stack(untrained))) if untrained is not None and attack == "lira_online"
             else np.nan)
        n_independent = independent_nonmembers(members)
        rows.append({"metric": DIFF_METRIC, "value": diff["value"], "ci_low": diff["ci_low"],
                     "ci_high": diff["ci_high"], "ci_method": DIFF_CI if diff["n_resamples"] else "none",
                     "chance": 0.0, "fpr": np.nan, "resolvable": True, "note": "", "ci_over": ci_over,
                     "attack": attack, "attacker": "", "scope": scope, "n": float(members.size),
                     "n_nonmembers": float((members == 0).sum()), "n_independent_nonmembers": float(n_independent),
                     "n_models": len(per_model[(attack, "")]),
                     "n_clusters": _n_clusters(members.shape[1], clusters, subjects),
                     "p_value": diff["p_value"] if attack in CONTROLLED else np.nan,
                     "p_mc_error": diff["p_mc_error"] if attack in CONTROLLED else np.nan,
                     "n_resamples": float(diff["n_resamples"]), "attack_auroc": a, "control_auroc": c,
                     "untrained_auroc": u, "control_share": control_share(a, c)})
    return rows


def holm_control_cells(tidy: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Holm over the table's attack − control cells (:data:`DIFF_METRIC` rows with a p-value: every ε and attack
    of the stage, one model): ``p_holm``, ``significant`` (p_holm < ``alpha``) and ``family`` on those rows, NaN /
    empty on every other row (controls, attacks and the rest are not hypotheses of the family)."""
    tidy = tidy.copy()
    for column in ("p_value", "p_holm"):
        if column not in tidy:
            tidy[column] = np.nan
    tidy["p_holm"] = np.nan
    tidy["significant"] = pd.Series([pd.NA] * len(tidy), index=tidy.index, dtype="boolean")
    tidy["family"] = ""
    cells = (tidy["metric"] == DIFF_METRIC) & tidy["p_value"].notna()
    if cells.any():
        tidy.loc[cells, "p_holm"] = holm(tidy.loc[cells, "p_value"].to_numpy(dtype=float))
        tidy.loc[cells, "significant"] = tidy.loc[cells, "p_holm"] < alpha
        tidy.loc[cells, "family"] = f"attack − preprocessing-only control, Holm over {int(cells.sum())} cells"
    return tidy


def _model_nonmembers(tidy: pd.DataFrame, part: pd.DataFrame, epsilon) -> float:
    """The fewest non-members one model of a per-model scope had: the rows' own ``n_nonmembers`` (shadow
    targets), else the cells' ``n_nonmembers`` rows at that ε (target seeds)."""
    if "n_nonmembers" in part and part["n_nonmembers"].notna().any():
        return float(part["n_nonmembers"].min())
    hit = tidy[(tidy["metric"] == "n_nonmembers") & (tidy["epsilon"] == epsilon)]
    return float(hit["value"].min()) if len(hit) else float("nan")


DIFF_COLUMNS = ("p_value", "p_mc_error", "p_holm", "significant", "family", "n_resamples", "attack_auroc",
                "control_auroc", "untrained_auroc", "control_share")


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per (ε, scope, attack, attacker, metric): per-seed/per-shadow scopes as mean and t-interval over
    models (``ci_over = seeds``, ``ci_method = t_interval``), a per-model TPR not resolvable by one model's
    non-members NaN with its ``note``; pooled scopes as their value, interval, ``ci_method``, ``n_clusters``,
    FPR, independent non-members and ``resolvable``/``note`` beside, and the attack − control cells
    (:data:`DIFF_METRIC`) their p-value, Holm p-value, family and the AUROCs beside (:data:`DIFF_COLUMNS`)."""
    rows = []
    keys = ["epsilon", "scope", "attack", "attacker", "metric"]
    frame = tidy[tidy["metric"].isin(set(METRICS) | set(POOLED_METRICS) | {DIFF_METRIC})]
    for key, part in frame.groupby(keys, dropna=False, sort=True):
        record = dict(zip(keys, key))
        if str(record["scope"]).endswith("pooled"):
            r = part.iloc[0]
            ok = bool(r.get("resolvable", True)) if pd.notna(r.get("resolvable", True)) else True
            note = r.get("note")
            record.update(value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
                          n_nonmembers=r.get("n_nonmembers"), chance=r["chance"], ci_over=r.get("ci_over"),
                          fpr=r.get("fpr", np.nan), n_independent_nonmembers=r.get("n_independent_nonmembers"),
                          ci_method=r.get("ci_method"), n_clusters=r.get("n_clusters", np.nan), resolvable=ok,
                          note=note if isinstance(note, str) else "")
            for column in DIFF_COLUMNS:  # the attack − control cells' test (NaN / empty elsewhere)
                record[column] = r.get(column, "" if column == "family" else np.nan)
        else:
            metric = record["metric"]
            fpr = float(metric.rsplit("_", 1)[1]) if metric.startswith("tpr_at_fpr_") else np.nan
            n_model = _model_nonmembers(tidy, part, record["epsilon"]) if np.isfinite(fpr) else np.nan
            ok = not np.isfinite(fpr) or (np.isfinite(n_model) and resolvable(fpr, int(n_model)))
            mean, low, high = mean_ci(part["value"].to_numpy(dtype=float)) if ok else (np.nan,) * 3
            low, high = max(low, 0.0), min(high, 1.0)  # every metric here is a rate in [0, 1]
            record.update(value=mean, ci_low=low, ci_high=high, n=float(part["value"].notna().sum()),
                          n_nonmembers=n_model, chance=float(part["chance"].iloc[0]), ci_over="seeds", fpr=fpr,
                          n_independent_nonmembers=n_model, ci_method="t_interval" if ok else "none",
                          n_clusters=np.nan, resolvable=ok,
                          note="" if ok else not_resolvable_note(fpr, int(n_model) if np.isfinite(n_model) else 0,
                                                                 what=" per model"))
        rows.append(record)
    return pd.DataFrame(rows)

