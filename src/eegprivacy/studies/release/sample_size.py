"""The ``dp_sample_size`` sweep (SYNTHETIC): how many private patients an end-to-end private release needs.

``dp_end_to_end`` answers "does a private release of MSU's 56 private patients keep utility?" (no design does at
ε ≤ 10) and says the tests could not have told: their minimum detectable effects are larger than anything the
noise leaves. A data steward plans with the next answer: *how many patients would it take?* This stage runs the
same end-to-end designs (:func:`eegprivacy.studies.release.end_to_end.released_table`, the same public patients,
clip norm, δ and ε split) on SYNTHETIC private cohorts of n ∈ ``n_patients`` patients drawn from a generator
calibrated to MSU, and reads off, per design and n, the smallest ε at which the end-to-end test would detect the
utility a release keeps.

**The generator** (:class:`~eegprivacy.data.feature_generator.FeatureTableGenerator`): a Gaussian copula of MSU's
patient-level feature table (every feature's empirical marginal, the Ledoit–Wolf within-class correlation of the
normal scores, and a class shift per feature: MSU's standardized effect sizes, debiased for sampling noise). It
models the table a release sees, not windows: the within-patient (window-to-window) variability is already averaged
into each patient's feature vector, as in the real table. The per-feature effects carry residual noise that adds
up over 176 features, so the overall effect strength is **calibrated**, not taken at face value: one
``effect_scale`` multiplies every effect, chosen by bisection so that the study's MLP under stratified k-fold reads
the same no-DP AUROC on synthetic cohorts of MSU's private size as on MSU's private patients
(:func:`calibrate_effect_scale`). The check against MSU (:func:`generator_check`) is what was *not* calibrated:
each design's noise-free AUROC, the marginals (two-sample Kolmogorov–Smirnov per feature) and the per-feature
effect sizes.

**A cell** is one (design, n, ε, seed): a fresh synthetic cohort of n patients (drawn from ``seed`` and n only, so
every design and ε at one (n, seed) sees the same patients), its release, scored by the study's MLP under a
stratified ``kfold_splits``-fold split (LOSO at 896 patients would cost 896 fits a cell; stratified folds also keep
a no-signal table at AUROC ≈ 0.5). Each release has its matched null, the same design and noise draw on the zero
table: paired by draw, as ``dp_end_to_end`` pairs them, so that the difference the summary averages has the
spread of the test whose standard error it borrows (an unpaired null, one draw for every ε, doubles the variance
of a small-ε difference and makes its mean over ten cohorts noise).

**The answer** (:func:`summarise`): per (design, n, ε) the expected release − null AUROC difference (mean over
seeds, each seed an independent cohort, noise draw and MLP; 95 % t-interval over seeds) and the power the
end-to-end test would have for it on a cohort of n: the test's standard error is MSU's, measured per (design, ε)
by ``dp_end_to_end`` (patients × its noise seeds), scaled by √(n_MSU / n) — an AUROC's sampling variance falls
as 1/n. The horizon at n is the smallest ε of the grid from which up every ε reaches ``power`` (the fixed
sequence's order); "patients needed for a horizon ≤ ε" is the smallest n of the grid whose horizon is at most ε.
Assumptions, stated with the table: the synthetic patients are like MSU's (the copula, calibrated as above), the
public patients are MSU's 28 (the same projections), the test's error shrinks as 1/√n, and the steward runs the
test as ``dp_end_to_end`` does (α / designs, one-sided, its seeds).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from eegprivacy.data.feature_generator import FeatureTableGenerator, marginal_comparison, standardized_effect_sizes
from eegprivacy.evaluation.cluster_bootstrap import auroc_along
from eegprivacy.evaluation.loso import stratified_kfold_proba
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, PrefetchedCells
from eegprivacy.studies.release.end_to_end import (
    DESIGNS,
    _public_parts,
    budget,
    components_of,
    noise_free_table,
    released_table,
)
from eegprivacy.studies.release.config import DPEndToEndConfig, DPSampleSizeConfig
from eegprivacy.studies.release.table import PatientTable, sweep_runner

STAGE = "dp_sample_size"
ARMS = ("baseline", "noise_free", "release", "matched_null")
_COHORT_TAG = 0x53414D50  # the synthetic cohort stream of (n, seed)


# ---------------------------------------------------------------------------------------------------------------
# The generator and its calibration
# ---------------------------------------------------------------------------------------------------------------
def synthetic_cohort(generator: FeatureTableGenerator, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The SYNTHETIC private cohort of (n, seed): n patients at the fitted label balance, from (n, seed) alone."""
    rng = np.random.default_rng([_COHORT_TAG, int(n), int(seed)])
    return generator.sample(int(n), random_state=rng)


def kfold_auroc(X: np.ndarray, y: np.ndarray, seed: int, splits: int) -> float:
    """The study's MLP under a stratified k-fold split drawn from ``seed``: AUROC of the out-of-fold scores."""
    return float(auroc_along(stratified_kfold_proba(X, y, int(splits), int(seed)), np.asarray(y, dtype=int)))


def calibrate_effect_scale(generator: FeatureTableGenerator, n: int, target: float, *, draws: int, splits: int,
                           steps: int = 12, high: float = 1.0) -> tuple[float, float]:
    """(effect_scale, the synthetic no-DP AUROC it reaches): bisection on [0, ``high``] so that the mean k-fold
    AUROC over ``draws`` synthetic cohorts of ``n`` patients equals ``target``. The same cohorts' random numbers
    at every scale (common random numbers), so the mean is a smooth, increasing function of the scale."""
    def mean_auroc(scale: float) -> float:
        g = generator.set_params(effect_scale=float(scale))
        return float(np.mean([kfold_auroc(*synthetic_cohort(g, n, 10_000 + d), 10_000 + d, splits)
                              for d in range(draws)]))

    low, top = 0.0, float(high)
    reached_top = mean_auroc(top)
    if reached_top <= target:  # the cohort's effects at full strength do not reach the target: take them whole
        generator.set_params(effect_scale=top)
        return top, reached_top
    for _ in range(steps):
        mid = (low + top) / 2.0
        if mean_auroc(mid) < target:
            low = mid
        else:
            top = mid
    scale = (low + top) / 2.0
    achieved = mean_auroc(scale)
    generator.set_params(effect_scale=scale)
    return scale, achieved


def generator_check(generator: FeatureTableGenerator, X_real: np.ndarray, y_real: np.ndarray, *,
                    n_draw: int = 2000, seed: int = 0) -> dict:
    """What was not calibrated, on one large SYNTHETIC draw: the marginals (per-feature two-sample KS statistic
    against the real table: median and largest) and the per-feature effect sizes (Pearson correlation of the
    real and synthetic Cohen's d, and their mean |d|)."""
    X_syn, y_syn = generator.sample(n_draw, random_state=np.random.default_rng([_COHORT_TAG, 0, seed]))
    table = marginal_comparison(X_real, X_syn, y_real, y_syn)
    real_d = standardized_effect_sizes(X_real, y_real)
    syn_d = standardized_effect_sizes(X_syn, y_syn)
    return {"ks_median": float(table["ks_statistic"].median()), "ks_max": float(table["ks_statistic"].max()),
            "effect_size_correlation": float(np.corrcoef(real_d, syn_d)[0, 1]),
            "effect_size_mean_abs_real": float(np.mean(np.abs(real_d))),
            "effect_size_mean_abs_synthetic": float(np.mean(np.abs(syn_d)))}


# ---------------------------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------------------------
def sample_size_cell(config: dict, seed: int, *, generator: FeatureTableGenerator, X_public: np.ndarray,
                     y_public: np.ndarray) -> list[dict]:
    """One cell (module docstring): a pure function of (config, seed) and the fitted generator."""
    X, y = synthetic_cohort(generator, int(config["n_private"]), seed)
    arm, splits = config["arm"], int(config["kfold_splits"])
    keys = {"arm": arm, "mechanism": config["mechanism"], "n_private": int(config["n_private"]),
            "epsilon": float(config["epsilon"])}
    if arm == "baseline":
        table, labels = X, y
    elif arm == "noise_free":
        table, labels = noise_free_table(config, X, X_public, y_public), y
    elif arm in ("release", "matched_null"):
        source = X if arm == "release" else np.zeros_like(X)
        table, labels, _ = released_table(config, seed, source, y, X_public, y_public)
        if DESIGNS[config["mechanism"]].evaluation == "tstr":  # train on the synthetic release, score the cohort
            from eegprivacy.studies.release.end_to_end import tstr_rows

            scaler, projection = _public_parts(config, X_public, y_public)
            rows = tstr_rows(table, labels, projection.transform(scaler.transform(X)), y, seed)
            return [{"protocol": "tstr", "metric": "auroc", "value": rows[0]["value"], **keys}]
    else:
        raise ValueError(f"unknown arm {arm!r}; one of {ARMS}")
    return [{"protocol": "kfold", "metric": "auroc", "value": kfold_auroc(table, labels, seed, splits), **keys}]


def sample_size_plan(table: PatientTable, config: DPSampleSizeConfig, designs: DPEndToEndConfig, *, n_public: int,
                     cells_dir, progress: bool, params: dict, delta: float, clip_norm: float,
                     effect_scale: float) -> list[tuple]:
    """(runner, cells) per design (and one for the no-DP baseline): releases at every (n, ε, seed), one matched
    null per (n, seed) (module docstring), the noise-free arm per (n, seed). ``designs`` is dp_end_to_end's
    config: each design's k, noise, ε split and the k-fold count come from it, so both stages release alike."""
    base = {**table.base_config, "n_public": n_public, "clip_norm": clip_norm, "kfold_splits": designs.kfold_splits,
            "effect_scale": float(effect_scale), "code_hash": code_hash(STAGE)}
    sweep = dict(cells_dir=cells_dir, params=params, progress=progress, model="mlp")
    seeds = range(config.seeds)
    plan = [(sweep_runner(table, STAGE, "none", mechanism="none", **sweep),
             [Cell({**base, "arm": "baseline", "mechanism": "none", "n_private": int(n), "epsilon": math.inf}, s)
              for n in config.n_patients for s in seeds])]
    for design in config.designs:
        k = components_of(designs, design)
        own = {**base, "mechanism": design, "n_components": int(k), "release_noise": designs.release_noise,
               "delta": delta}
        extra = ({"synthesis_bins": designs.synthesis_bins,
                  "synthesis_pairs": designs.synthesis_pairs} if design == "marginal_synthesis" else {})
        cells = []
        for n in config.n_patients:
            for s in seeds:
                if DESIGNS[design].evaluation == "loso":
                    cells.append(Cell({**own, "arm": "noise_free", "n_private": int(n), "epsilon": math.inf}, s))
                # each release's matched null: the same design and noise draw on the zero table (paired by draw)
                cells += [Cell({**own, **extra, "arm": "matched_null", "n_private": int(n), "epsilon": float(e),
                                **budget(design, e, delta, designs)}, s) for e in config.total_epsilons]
                cells += [Cell({**own, **extra, "arm": "release", "n_private": int(n), "epsilon": float(e),
                                **budget(design, e, delta, designs)}, s) for e in config.total_epsilons]
        plan.append((sweep_runner(table, STAGE, design, mechanism=design, **sweep), cells))
    return plan


def run_plan(plan: list, cell_fn, n_jobs: int) -> list[pd.DataFrame]:
    """Every (runner, cells) of ``plan``, pending cells computed ahead in ``n_jobs`` processes."""
    jobs = [(cell.config, cell.seed) for runner, cells in plan for cell in runner.pending(cells)]
    compute = PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs)
    return [runner.run(cells, compute) for runner, cells in plan]


# ---------------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------------
def _t_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return math.nan, math.nan
    half = float(student_t.ppf(0.5 + confidence / 2.0, values.size - 1)) * values.std(ddof=1) / math.sqrt(values.size)
    return float(values.mean() - half), float(values.mean() + half)


def horizon_at(epsilons: list[float], powers: list[float], target: float) -> float:
    """The smallest ε of the unbroken run, from the largest ε down, whose power reaches ``target`` (NaN when
    the largest does not): the fixed sequence's horizon at this n."""
    horizon = math.nan
    for epsilon, power in sorted(zip(epsilons, powers), reverse=True):
        if not power >= target - 1e-9:  # an effect exactly at the MDE has the target power
            break
        horizon = epsilon
    return horizon


def summarise(rows: pd.DataFrame, anchor: pd.DataFrame, *, n_anchor: int, alpha: float, power: float,
              confidence: float, targets: list[float]) -> pd.DataFrame:
    """Tidy summary (module docstring) of the cells' rows (columns arm, mechanism, n_private, epsilon, seed, value)
    and ``anchor``: ``dp_end_to_end``'s release − null rows on MSU (mechanism, epsilon, mde) at the headline k.

    Rows: ``arm`` baseline / noise_free (per n: mean k-fold AUROC, t-interval over seeds), ``release_minus_null``
    (per design, n, ε: the mean difference, its interval, ``mde`` and ``power`` of the end-to-end test at n),
    ``horizon`` (per design and n), ``patients_needed`` (per design and target ε: NaN when no n of the grid)."""
    z = float(norm.ppf(1.0 - alpha)) + float(norm.ppf(power))
    out = []
    for arm in ("baseline", "noise_free"):
        part = rows[rows.arm == arm]
        for (mechanism, n), cell in part.groupby(["mechanism", "n_private"]):
            low, high = _t_interval(cell.value.to_numpy(), confidence)
            out.append({"arm": arm, "mechanism": mechanism, "n_private": int(n), "epsilon": math.inf,
                        "value": float(cell.value.mean()), "ci_low": low, "ci_high": high, "n_seeds": len(cell)})
    nulls = {(r.mechanism, int(r.n_private), int(r.seed), float(r.epsilon)): r.value
             for r in rows[rows.arm == "matched_null"].itertuples()}
    releases = rows[rows.arm == "release"]
    mde_msu = anchor.set_index(["mechanism", "epsilon"])["mde"]
    for design, by_design in releases.groupby("mechanism", sort=False):
        for n, by_n in by_design.groupby("n_private"):
            epsilons, powers = [], []
            for epsilon, cell in by_n.groupby("epsilon"):
                null = np.array([nulls[(design, int(n), int(s), float(epsilon))] for s in cell.seed])
                diff = cell.value.to_numpy() - null
                low, high = _t_interval(diff, confidence)
                mde = float(mde_msu.get((design, float(epsilon)), math.nan)) * math.sqrt(n_anchor / int(n))
                test_power = float(norm.cdf(diff.mean() * z / mde - (z - float(norm.ppf(power))))) \
                    if math.isfinite(mde) and mde > 0 else math.nan
                out.append({"arm": "release_minus_null", "mechanism": design, "n_private": int(n),
                            "epsilon": float(epsilon), "value": float(diff.mean()), "ci_low": low, "ci_high": high,
                            "n_seeds": len(diff), "mde": mde, "power": test_power})
                epsilons.append(float(epsilon))
                powers.append(test_power)
            out.append({"arm": "horizon", "mechanism": design, "n_private": int(n), "epsilon": math.inf,
                        "value": horizon_at(epsilons, powers, power), "n_seeds": int(by_n.seed.nunique())})
    frame = pd.DataFrame(out)
    horizons = frame[frame.arm == "horizon"]
    for design, part in horizons.groupby("mechanism", sort=False):
        for target in targets:
            enough = part[part.value <= target].n_private
            out.append({"arm": "patients_needed", "mechanism": design, "n_private": -1, "epsilon": float(target),
                        "value": float(enough.min()) if len(enough) else math.nan})
    return pd.DataFrame(out)


def summary_metrics(summary: pd.DataFrame, calibration: dict) -> dict[str, float]:
    """Flat MLflow metrics of the summary (what the report reads back): ``calibration/<name>``;
    ``<arm>/<design>/n_<n>[/eps_<ε>]/auroc_kfold`` with ``_ci_low``, ``_ci_high``, ``_mde``, ``_power``;
    ``horizon/<design>/n_<n>`` and ``patients_needed/<design>/eps_<ε>`` (absent where none in the grid)."""
    out = {f"calibration/{k}": float(v) for k, v in calibration.items() if v is not None and math.isfinite(float(v))}
    for r in summary.to_dict("records"):
        value = float(r["value"])
        if r["arm"] == "horizon":
            key = f"horizon/{r['mechanism']}/n_{int(r['n_private'])}"
        elif r["arm"] == "patients_needed":
            key = f"patients_needed/{r['mechanism']}/eps_{float(r['epsilon']):g}"
        else:
            eps = "" if not math.isfinite(float(r["epsilon"])) else f"/eps_{float(r['epsilon']):g}"
            key = f"{r['arm']}/{r['mechanism']}/n_{int(r['n_private'])}{eps}/auroc_kfold"
            for suffix in ("ci_low", "ci_high", "mde", "power"):
                extra = r.get(suffix)
                if extra is not None and pd.notna(extra) and math.isfinite(float(extra)):
                    out[f"{key}_{suffix}"] = float(extra)
        if math.isfinite(value):
            out[key] = value
    return out



def log_summary(table: PatientTable, summary: pd.DataFrame, calibration: dict, noise_free_real: dict,
                config: DPSampleSizeConfig, designs: DPEndToEndConfig) -> str:
    """One MLflow run (``dp_sample_size-<dataset>-summary``, tagged ``synthetic=true``): every summary number and
    the generator's calibration as metrics (``calibration/noise_free_real/<design>`` the real cohort's noise-free
    k-fold AUROC beside the synthetic one), what was assumed as tags; returns its run id."""
    import mlflow

    from eegprivacy.studies.release.table import tags
    from eegprivacy.tracking import assert_no_identifiers, log_metrics, start_run

    with start_run(study="a", tags=tags(table, STAGE, None, model="mlp"), run_name=f"{STAGE}-{table.dataset}-summary",
                   params={STAGE: config.to_dict(), "dp_end_to_end": designs.to_dict()}) as run:
        metrics = summary_metrics(summary, calibration)
        metrics.update({f"calibration/noise_free_real/{k}": v for k, v in noise_free_real.items() if math.isfinite(v)})
        log_metrics(metrics)
        extra = {"n_real_private": str(int(calibration["n_real_private"])), "designs": ",".join(config.designs),
                 "n_patients": ",".join(str(n) for n in config.n_patients), "power": f"{designs.power:g}",
                 "kfold_splits": str(designs.kfold_splits), "seeds": str(config.seeds),
                 "horizon_targets": ",".join(f"{e:g}" for e in config.horizon_targets)}
        assert_no_identifiers(extra, "tag")
        mlflow.set_tags(extra)
        return run.info.run_id
