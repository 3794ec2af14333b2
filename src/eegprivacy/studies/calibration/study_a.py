"""Calibration cases of study A's tests and intervals (``reports/study-a.md``) and of ``eegprivacy audit-cohort``'s
verdict (the report's first sentence, :func:`eegprivacy.reporting.cohort.verdict_text`).

Every case writes simulated per-patient LOSO predictions with study A's own writer
(:func:`eegprivacy.studies.release.utility.keeping_predictions`, the ``_predictions`` item a ``dp_utility`` cell
hands it) into a scratch folder and runs the summary the stage runs on that folder — so the patient × seed
bootstrap, the pairing of release and null, the p-value, the Bonferroni split and the fixed-sequence horizon are the
project's code, not a copy:

* ``study_a.matched_null_difference`` — :func:`eegprivacy.studies.release.utility.summarise`: release − matched
  null LOSO AUROC, its 95 % interval over ``subjects+seeds`` and its bootstrap p-value, at one (mechanism, ε) cell;
* ``study_a.matched_null_difference_ba`` — the same row for the nested balanced accuracy (two nested seeds);
* ``study_a.horizon`` — the same summary over the whole (mechanism × ε) grid: "some mechanism keeps utility at some
  ε" (the fixed-sequence horizon test, α/m per mechanism) under the global null, the family-wise error of the
  ``dp_utility`` table;
* ``study_a.end_to_end_horizon`` — :func:`eegprivacy.studies.release.end_to_end.summarise` (the lead table: five
  designs, α/5 each, on the private patients) and the lead design's release − null interval at its largest ε;
* ``study_a.end_to_end_mde`` — the same summary at one lead-table cell with the minimum detectable effect its
  formula gives on the model's data planted: the power there should be the stated 80 % (a check of the normal
  approximation the MDE column uses, at the bootstrap SD the data give);
* ``audit_cohort.verdict`` — ``audit-cohort``'s chain (:func:`~eegprivacy.studies.cohort.summary.summarise`, which
  calls study A's summary through :func:`~eegprivacy.studies.cohort.summary.utility_summary`, then
  :func:`~eegprivacy.studies.cohort.verdict.summary_document` and :func:`~eegprivacy.studies.cohort.verdict.headline`)
  on the audit's own grid: the "keeps utility" decision of the verdict's first sentence, and the release AUROC
  interval it prints at the chosen ε (chosen *by* the test: a post-selection interval);
* ``audit_cohort.reidentification`` and ``audit_cohort.membership`` — the re-identification top-1 (Wilson over the K
  subjects) and membership AUROC (t over noise seeds) intervals of the same sentence, through the audit's own
  attack cells (:func:`~eegprivacy.studies.cohort.cells.reidentification_cell`,
  :func:`~eegprivacy.studies.cohort.cells.membership_cell`) and :func:`~eegprivacy.studies.cohort.summary.summarise`,
  which computes them (``summary_document`` copies the row and ``headline`` picks it at the verdict's ε, which
  these cases fix to one ε; the document costs 50–100 ms a data set and changes no number).

**The null model of the utility cases** (per-patient scores, one per (arm, seed, patient)). A score is a label
shift plus unit-variance noise, ``s = (y − ½)(δ − k_s) + noise``; the noise has a patient random effect shared
across seeds (share ``π``; each arm its own), a part shared by release and matched null within a seed (share ``ρ``:
the null uses the release's noise draw), and the rest independent; ``k_s`` is a per-seed shift of the whole seed
(LOSO's anti-learning on noise: a matched null's AUROC is below 0.5 and varies from seed to seed more than patient
sampling alone explains), correlated ``ρ`` between the arms, mean ``κ`` and spread ``τ``. The release has ``δ`` (0
under the null), the null none, so under the null the two arms' predictions come from the same distribution but
are not exchangeable patient by patient. Probabilities are ``Φ(s)``; nested 0/1 predictions ``s > 0``.
Every parameter is read per (mechanism, ε) from the stage's committed outputs
(``metrics/dp_utility/dp_utility_<dataset>.csv``, its per-seed rows, and ``..._summary_<dataset>.csv``; the
end-to-end case from ``metrics/dp_end_to_end_summary_<dataset>.csv``), as are the patients, the class balance
(the baseline's confusion counts), the seeds, the ε grid and the mechanisms (:func:`dp_utility_shape`,
:func:`end_to_end_shape`): ``ρ`` is the across-seed correlation of the two arms' AUROCs (or, without per-seed rows,
the one their interval widths imply), ``π`` solves "bootstrap variance = patient part + seed part" for the arm's
interval width, ``τ`` is what the per-seed spread has beyond patient sampling, ``κ`` is the null's mean AUROC on the
probit scale. The truth is closed form: the population AUROC of an arm is ``Φ((δ − κ)/√(2 + τ²))`` and its
balanced accuracy ``Φ((δ − κ)/√(4 + τ²))``, so a planted effect is a ``δ`` solved for the AUROC (or balanced
accuracy) difference the report gives.

The test of release − null is **one-sided by design** (``sided``): "release − null ≤ 0" against "the release keeps
utility"; utility can only grow with ε and a release below its null is not a finding the fixed sequence acts on.
Its size is measured as the stage applies it (one-sided, rejection at p < α).

**Bootstrap counts.** The stage resamples 10,000 times (``params/dp_release.yaml``); the cases use fewer (given
in each ``test``): the count moves only the Monte-Carlo error of a p-value, not its null distribution, and 10,000
costs 1.2 s per data set at the cohort's shape.

Found and not covered here (each printed one is an entry of :mod:`.not_measured`, which
``reports/calibration.md`` lists with its mark):

* ``baseline_minus_permuted`` (the ``none − control`` row) and ``baseline_minus_clipped`` (``none − scaled +
  clipped``): descriptive contrasts of the non-private table (no decision in the report reads them); the same
  :func:`~eegprivacy.evaluation.cluster_bootstrap.combine_seeds` / ``percentile_interval`` code as the cases here,
  but the permuted control's own-label resamples are not exercised;
* the balanced-accuracy horizon (the ``BA (nested)`` column of "Utility horizons"): its per-cell p-value is
  ``study_a.matched_null_difference_ba`` and its sequence is the AUROC horizon's code
  (:func:`~eegprivacy.evaluation.cluster_bootstrap.fixed_sequence_horizon`); the table-level FWER is measured for
  AUROC only;
* single-arm intervals of the study A tables (release, matched null, noise-free, the k sweep's effect sizes, which
  are "not tested"): the same percentile interval; one is measured (``audit_cohort.verdict``'s release AUROC);
* ``dp_scaling``'s summary (release − null horizon per scaling source, and ``cost_vs_private`` with Holm) and the
  Optuna front's re-evaluation (:func:`eegprivacy.studies.release.search.reevaluated_values`, Holm over the front):
  written to ``metrics/dp_scaling.json`` / ``metrics/optuna_study_a.json``, printed by no study A report; the same
  bootstrap functions;
* the membership case has no planted effect (the truth of a conditional-on-cohort AUROC at a finite ε is not
  known in closed form; its null is ε = 10⁻³, where the truth is 0.5 to within ~10⁻⁴).

What the null model cannot see (a finding for the report, not a calibration): the zero-signal table's LOSO bias
need not be the release's. In the end-to-end table the matched nulls of the projected designs sit far below 0.5
(public_pls, ε = 10: null 0.378 against a release at 0.497, release − null 0.119, p = 0.022; the k sweep's
public_pca k = 1: releases at 0.408 and 0.418, below chance, "above" nulls at 0.316 and 0.329), so a release with
no label information can beat its null when the zero table's isotropic noise makes LOSO anti-learn harder than the
release's structure does. Here both arms share one ``κ`` by construction; a null that can show it has to run the
LOSO model on a label-free table with the release's structure.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr
from scipy.stats import norm

from eegprivacy.evaluation.calibration import ALPHA, CalibrationCase, Trial, register

DATASET = "msu_schizophrenia"
REPORT = "reports/study-a.md"
AUDIT_REPORT = "eegprivacy audit-cohort: report.html verdict (reporting.cohort.verdict_text)"
CONFIDENCE_Z = norm.ppf(0.975)
#: (dA/dk)² at k = 0 for A = Φ(−k/√2): how a per-seed shift k of the scores moves the seed's AUROC.
_DAUC_DK2 = 1.0 / (4.0 * math.pi)
#: Bootstrap resamples of the calibration's data sets (the stage's 10,000 cost 1.2 s per data set; module docstring).
BOOTSTRAP = {"difference": 1000, "family": 250, "tiny": 100}
#: The tiny data sets of the seconds-long version in ``tests/``: patients (class balance as the cohort's), seeds.
TINY = {"patients": 12, "seeds": 3, "family_seeds": 2, "features": 8, "membership_trials": 2}
#: The effect sizes the reports give: study A's release − null AUROC at ε = 100 / 200 (0.08 … 0.18) and the
#: end-to-end designs' 0.12; the planted effects of the utility cases (AUROC or balanced-accuracy difference).
UTILITY_EFFECTS = (0.05, 0.12)
#: The re-identification case's planted effects: the share of a feature vector's variance that is the subject's
#: own (shared by the released half and the attacker's half); 0 is the null (the attacker's half says nothing).
REID_EFFECTS = (0.5, 0.95)
#: The membership case's null: at this ε membership moves the attack's AUROC by ≲ 1e-4 (noise SD ~2·10⁴ per
#: coordinate against rows clipped to norm 2).
MEMBERSHIP_NULL_EPSILON = 1e-3
#: Independent data sets behind the re-identification truth (its Monte-Carlo error: ~0.003 at the cohort size,
#: ~0.02 at the tiny one, against Wilson half-widths of ~0.08 and ~0.25).
REID_TRUTH_REPLICATES = {"cohort": 300, "tiny": 60}


# ---------------------------------------------------------------------------------------------------------------
# The cohort's shape, from the committed outputs
# ---------------------------------------------------------------------------------------------------------------
def _metrics(relative: str) -> Path:
    from eegprivacy.paths import repo_root

    path = repo_root() / "metrics" / relative
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: study A's calibration reads the cohort's shape (patients, class balance, seeds, "
            f"ε grid, the arms' correlation) from the stage's committed outputs; restore it with `git checkout "
            f"metrics/` or rerun the stage (`dvc repro dp_utility@{DATASET} dp_end_to_end`)")
    return path


@dataclass(frozen=True)
class CellStructure:
    """The null model's parameters at one (mechanism, ε) cell (module docstring)."""

    rho: float  # share of the seed-level score noise release and null share within a seed
    pi_release: float  # share of the release's score variance that is the patient's own, shared across seeds
    pi_null: float
    tau: float  # SD of the per-seed shift (probit units)
    kappa: float  # mean per-seed shift: the matched null's mean AUROC is Φ(−κ / √(2 + τ²))

    def auroc(self, delta: float) -> float:
        """Population LOSO AUROC of an arm with label shift ``delta``."""
        return float(norm.cdf((delta - self.kappa) / math.sqrt(2.0 + self.tau ** 2)))

    def balanced_accuracy(self, delta: float) -> float:
        """Population balanced accuracy of the arm's ``s > 0`` predictions."""
        return float(norm.cdf((delta - self.kappa) / math.sqrt(4.0 + self.tau ** 2)))

    def delta_for(self, effect: float, metric: str = "auroc") -> float:
        """The release's shift whose population ``metric`` exceeds the null's by ``effect``."""
        if effect == 0:
            return 0.0
        scale = math.sqrt((2.0 if metric == "auroc" else 4.0) + self.tau ** 2)
        target = float(norm.cdf(-self.kappa / scale)) + float(effect)
        if not 0.0 < target < 1.0:
            raise ValueError(f"a planted {metric} difference of {effect} is out of reach of this cell's null "
                             f"({target - effect:.3f})")
        return self.kappa + scale * float(norm.ppf(target))


@dataclass(frozen=True)
class UtilityShape:
    """What a study A utility table is computed over: patients, balance, seeds, the grid and each cell's
    structure."""

    source: str
    n_patients: int
    n_positive: int
    n_seeds: int
    nested_seeds: int
    mechanisms: tuple[str, ...]
    epsilons: tuple[float, ...]
    cells: dict
    components: dict  # design -> k (end to end); {} for dp_utility

    def cell(self, mechanism: str, epsilon: float) -> CellStructure:
        try:
            return self.cells[(mechanism, float(epsilon))]
        except KeyError:
            raise KeyError(f"{self.source} has no ({mechanism}, ε = {epsilon:g}) cell; its cells: "
                           f"{sorted(self.cells)}") from None


def _v0(n: int, n_positive: int) -> float:
    """Variance of a LOSO AUROC on n independent patients with no signal (Mann–Whitney)."""
    n0, n1 = n - n_positive, n_positive
    return (n + 1) / (12.0 * n0 * n1)


def _se(row) -> float:
    return (float(row["ci_high"]) - float(row["ci_low"])) / (2.0 * CONFIDENCE_Z)


def _pi(se: float, sd: float, v0: float, seeds: int) -> float:
    """Patient share π from "bootstrap variance ≈ V0·(π + (1 − π)/S) + sd²/S" (clipped to [0, 0.9])."""
    value = ((se ** 2 - sd ** 2 / seeds) / v0 - 1.0 / seeds) / (1.0 - 1.0 / seeds)
    return float(np.clip(value, 0.0, 0.9)) if np.isfinite(value) else 0.0


def _kappa(null_auroc: float, tau: float) -> float:
    return float(-math.sqrt(2.0 + tau ** 2) * norm.ppf(np.clip(null_auroc, 0.02, 0.98)))


@functools.lru_cache(maxsize=None)
def dp_utility_shape(dataset: str = DATASET) -> UtilityShape:
    """The ``dp_utility`` table's shape on ``dataset`` from ``metrics/dp_utility/``: patients and class balance
    (the baseline's confusion counts), AUROC and nested seeds, mechanisms, ε grid and each cell's null-model
    parameters (module docstring)."""
    import pandas as pd

    per_seed = pd.read_csv(_metrics(f"dp_utility/dp_utility_{dataset}.csv"))
    summary = pd.read_csv(_metrics(f"dp_utility/dp_utility_summary_{dataset}.csv"))
    counts = per_seed[(per_seed["arm"] == "baseline") & (per_seed["protocol"] == "nested")]
    counts = counts[counts["seed"] == counts["seed"].min()].set_index("metric")["value"]
    if not {"tp", "fn", "tn", "fp"} <= set(counts.index):
        raise ValueError(f"metrics/dp_utility/dp_utility_{dataset}.csv has no baseline confusion counts")
    n_positive = int(counts["tp"] + counts["fn"])
    n = int(n_positive + counts["tn"] + counts["fp"])
    diffs = summary[(summary["arm"] == "release_minus_null") & (summary["metric"] == "auroc")]
    ba = summary[(summary["arm"] == "release_minus_null") & (summary["metric"] == "balanced_accuracy")]
    seeds = int(diffs["n_seeds"].max())
    auroc = per_seed[(per_seed["metric"] == "auroc") & per_seed["arm"].isin(["release", "matched_null"])]
    v0 = _v0(n, n_positive)
    cells = {}
    for (mechanism, epsilon), part in auroc.groupby(["mechanism", "epsilon"]):
        wide = part.pivot_table(index="seed", columns="arm", values="value")
        pis, extra = {}, []
        for arm in ("release", "matched_null"):
            row = summary[(summary["arm"] == arm) & (summary["mechanism"] == mechanism)
                          & (summary["epsilon"] == epsilon) & (summary["metric"] == "auroc")].iloc[0]
            sd = float(wide[arm].std())
            pis[arm] = _pi(_se(row), sd, v0, len(wide))
            extra.append(max(0.0, sd ** 2 - v0 * (1.0 - pis[arm])))
        tau = math.sqrt(float(np.mean(extra)) / _DAUC_DK2)
        rho = wide["release"].corr(wide["matched_null"])
        cells[(str(mechanism), float(epsilon))] = CellStructure(
            rho=float(np.clip(rho if np.isfinite(rho) else 0.0, 0.0, 0.99)), pi_release=pis["release"],
            pi_null=pis["matched_null"], tau=tau, kappa=_kappa(float(wide["matched_null"].mean()), tau))
    return UtilityShape(source=f"metrics/dp_utility/dp_utility_{dataset}.csv", n_patients=n, n_positive=n_positive,
                        n_seeds=seeds, nested_seeds=int(ba["n_seeds"].max()) if len(ba) else 0,
                        mechanisms=tuple(dict.fromkeys(diffs["mechanism"])),
                        epsilons=tuple(sorted({float(e) for e in diffs["epsilon"]})), cells=cells, components={})


@functools.lru_cache(maxsize=None)
def end_to_end_shape(dataset: str = DATASET) -> UtilityShape:
    """The end-to-end table's shape from ``metrics/dp_end_to_end_summary_<dataset>.csv``: private patients, the
    headline designs (those with a horizon row), their k, ε grid and seeds; the class balance of the private
    patients from ``metrics/dp_scaling/`` (the same split); ``ρ`` per cell from the interval widths (no per-seed
    rows are committed), ``π`` and ``τ`` the ``dp_utility`` cells' medians (the same patients and LOSO protocol),
    ``κ`` from each cell's null AUROC."""
    import pandas as pd

    summary = pd.read_csv(_metrics(f"dp_end_to_end_summary_{dataset}.csv"))
    if "protocol" in summary:  # the LOSO rows the tests read (the stratified k-fold readings are not tested)
        summary = summary[summary["protocol"] == "threshold_free"]
    scaling = pd.read_csv(_metrics(f"dp_scaling/dp_scaling_{dataset}.csv"))
    n = int(summary["n"].iloc[0])
    counts = scaling[(scaling["arm"] == "baseline") & (scaling["protocol"] == "optimistic")]
    counts = counts[counts["seed"] == counts["seed"].min()].drop_duplicates("metric").set_index("metric")["value"]
    n_positive = int(counts["tp"] + counts["fn"])
    if n_positive + int(counts["tn"] + counts["fp"]) != n:
        raise ValueError(f"metrics/dp_scaling/dp_scaling_{dataset}.csv and the end-to-end summary disagree on the "
                         f"private patients ({n})")
    designs = tuple(dict.fromkeys(summary.loc[summary["arm"] == "horizon", "mechanism"]))
    base = dp_utility_shape(dataset)
    pi = float(np.median([c.pi_release for c in base.cells.values()] + [c.pi_null for c in base.cells.values()]))
    tau = float(np.median([c.tau for c in base.cells.values()]))
    cells, components, epsilons, seeds = {}, {}, set(), 0
    diffs = summary[summary["arm"] == "release_minus_null"]
    for design in designs:
        k = int(summary.loc[(summary["arm"] == "horizon") & (summary["mechanism"] == design), "n_components"].iloc[0])
        components[design] = k
        for r in diffs[(diffs["mechanism"] == design) & (diffs["n_components"] == k)].itertuples():
            rel, null = (_row(summary, arm=arm, mechanism=design, epsilon=r.epsilon, n_components=k)
                         for arm in ("release", "matched_null"))
            se_r, se_n, se_d = _se(rel), _se(null), (r.ci_high - r.ci_low) / (2.0 * CONFIDENCE_Z)
            rho = (se_r ** 2 + se_n ** 2 - se_d ** 2) / (2.0 * se_r * se_n)
            cells[(design, float(r.epsilon))] = CellStructure(
                rho=float(np.clip(rho, 0.0, 0.99)), pi_release=pi, pi_null=pi, tau=tau,
                kappa=_kappa(float(null["value"]), tau))
            epsilons.add(float(r.epsilon))
            seeds = max(seeds, int(r.n_seeds))
    return UtilityShape(source=f"metrics/dp_end_to_end_summary_{dataset}.csv", n_patients=n, n_positive=n_positive,
                        n_seeds=seeds, nested_seeds=0, mechanisms=designs, epsilons=tuple(sorted(epsilons)),
                        cells=cells, components=components)


def _tiny_balance(shape: UtilityShape, patients: int) -> int:
    return int(np.clip(round(patients * shape.n_positive / shape.n_patients), 2, patients - 2))


@dataclass(frozen=True)
class _Dims:
    n: int
    n_positive: int
    seeds: int
    nested_seeds: int
    bootstrap: int


def _dims(shape: UtilityShape, size: str, *, family: bool, seeds: int | None = None,
          nested_seeds: int | None = None) -> _Dims:
    """Patients, positives, seeds, nested seeds and bootstrap count of one data set at ``size``."""
    nested = shape.nested_seeds if nested_seeds is None else int(nested_seeds)
    if size == "tiny":  # a family's tiny tables hold no nested protocol (its rows would double the summary's cost)
        s = TINY["family_seeds"] if family else TINY["seeds"]
        return _Dims(TINY["patients"], _tiny_balance(shape, TINY["patients"]), s, 0 if family else min(s, nested),
                     BOOTSTRAP["tiny"])
    if size != "cohort":
        raise ValueError(f"size must be 'cohort' or 'tiny', got {size!r}")
    s = shape.n_seeds if seeds is None else int(seeds)
    return _Dims(shape.n_patients, shape.n_positive, s, min(s, nested), BOOTSTRAP["family" if family else "difference"])


def _labels(n: int, n_positive: int) -> np.ndarray:
    return np.r_[np.ones(n_positive, dtype=int), np.zeros(n - n_positive, dtype=int)]


# ---------------------------------------------------------------------------------------------------------------
# Scratch folders and the stage's own writer
# ---------------------------------------------------------------------------------------------------------------
_SCRATCH: dict[tuple[int, int], Path] = {}


def _scratch(case: str) -> Path:
    """A folder of this process and thread (in RAM where /dev/shm exists), reused by every data set of ``case``:
    each data set overwrites the same cell files (atomically, with the stage's writer) and lists exactly its cells,
    so nothing stale is read; removed at exit."""
    key = (os.getpid(), threading.get_ident())
    if key not in _SCRATCH:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        path = Path(tempfile.mkdtemp(prefix="eegprivacy-calibration-", dir=base))
        _SCRATCH[key] = path
        atexit.register(shutil.rmtree, path, True)
    folder = _SCRATCH[key] / case
    folder.mkdir(exist_ok=True)
    return folder


def _keep(folder: Path, config: dict, seed: int, scores: np.ndarray, y: np.ndarray, nested: bool):
    """Hand one simulated cell's per-patient predictions to the stage's writer, as a ``dp_utility`` cell does."""
    from eegprivacy.pipeline.sweep import Cell
    from eegprivacy.studies.release.utility import PREDICTIONS, keeping_predictions

    proba = ndtr(scores)  # Φ, without scipy.stats' per-call overhead
    pred = (scores > 0).astype(float)
    item = {"metric": PREDICTIONS, "proba": proba, "pred_optimistic": pred,
            "pred_nested": pred if nested else np.full(len(y), np.nan), "y": np.asarray(y, dtype=int)}
    keeping_predictions(lambda _config, _seed: [item], folder)(config, seed)
    return Cell(config, int(seed))


def _arm_scores(rng: np.random.Generator, y: np.ndarray, seeds: int, cell: CellStructure,
                delta: float) -> tuple[np.ndarray, np.ndarray]:
    """(release, matched null) scores, (seeds, patients) each, of one (mechanism, ε) cell (module docstring)."""
    n = len(y)
    rho, (pr, pn) = cell.rho, (cell.pi_release, cell.pi_null)
    shared = rng.standard_normal((seeds, n))
    own_r, own_n = rng.standard_normal((seeds, n)), rng.standard_normal((seeds, n))
    patient_r, patient_n = rng.standard_normal(n), rng.standard_normal(n)
    g, h_r, h_n = rng.standard_normal(seeds), rng.standard_normal(seeds), rng.standard_normal(seeds)
    k_r = cell.kappa + cell.tau * (math.sqrt(rho) * g + math.sqrt(1 - rho) * h_r)
    k_n = cell.kappa + cell.tau * (math.sqrt(rho) * g + math.sqrt(1 - rho) * h_n)
    seed_r = math.sqrt(rho) * shared + math.sqrt(1 - rho) * own_r
    seed_n = math.sqrt(rho) * shared + math.sqrt(1 - rho) * own_n
    centred = (np.asarray(y, dtype=float) - 0.5)[None, :]
    release = centred * (delta - k_r[:, None]) + math.sqrt(pr) * patient_r + math.sqrt(1 - pr) * seed_r
    null = centred * (-k_n[:, None]) + math.sqrt(pn) * patient_n + math.sqrt(1 - pn) * seed_n
    return release, null


def _write_grid(folder: Path, rng: np.random.Generator, y: np.ndarray, dims: _Dims, shape: UtilityShape,
                grid: list[tuple[str, float]], deltas: dict, extra=None, pooled: bool = False) -> list:
    """Simulate and keep every (mechanism, ε) cell of ``grid``: release and matched null for each seed.

    ``pooled`` is the deliberately broken variant of the tests: every seed's predictions stacked as if they were
    other patients, one seed (windows as units: the patient effect shared across seeds is pseudo-replicated)."""
    cells = []
    for mechanism, epsilon in grid:
        release, null = _arm_scores(rng, y, dims.seeds, shape.cell(mechanism, epsilon),
                                    deltas.get((mechanism, epsilon), 0.0))
        config = {"mechanism": mechanism, "epsilon": float(epsilon), **((extra or {}).get(mechanism, {}))}
        for arm, scores in (("release", release), ("matched_null", null)):
            if pooled:
                cells.append(_keep(folder, {**config, "arm": arm}, 0, scores.ravel(), np.tile(y, dims.seeds),
                                   dims.nested_seeds > 0))
                continue
            for s in range(dims.seeds):
                cells.append(_keep(folder, {**config, "arm": arm}, s, scores[s], y, s < dims.nested_seeds))
    return cells


def _row(frame, **where):
    part = frame
    for column, value in where.items():
        part = part[part[column] == value]
    if len(part) != 1:
        raise RuntimeError(f"expected one summary row for {where}, found {len(part)}")
    return part.iloc[0]


def _adjusted(p_values_by_eps: dict[float, float], m: int) -> float:
    """The smallest fixed-sequence adjusted p of one sequence: m × the largest p at this or any larger ε."""
    running, best = 0.0, 1.0
    for eps in sorted(p_values_by_eps, reverse=True):
        p = p_values_by_eps[eps]
        running = max(running, p if np.isfinite(p) else 1.0)
        best = min(best, min(1.0, m * running))
    return best


# ---------------------------------------------------------------------------------------------------------------
# study_a.matched_null_difference (AUROC and balanced accuracy)
# ---------------------------------------------------------------------------------------------------------------
def _difference_cell(shape: UtilityShape) -> tuple[str, float]:
    """The cell of the difference cases: the first mechanism at the largest ε (where the fixed sequence starts and
    where the report's differences are decided)."""
    return shape.mechanisms[0], max(shape.epsilons)


def matched_null_trial(seed: int, effect: float, size: str, metric: str = "auroc", pooled: bool = False) -> Trial:
    """One data set of the difference cases through :func:`eegprivacy.studies.release.utility.summarise`."""
    from eegprivacy.studies.release.utility import summarise

    shape = dp_utility_shape()
    mechanism, epsilon = _difference_cell(shape)
    cell = shape.cell(mechanism, epsilon)
    dims = _dims(shape, size, family=False)
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    delta = cell.delta_for(effect, metric)
    folder = _scratch(f"difference-{metric}{'-pooled' if pooled else ''}")
    cells = _write_grid(folder, rng, y, dims, shape, [(mechanism, epsilon)], {(mechanism, epsilon): delta},
                        pooled=pooled)
    labels = np.tile(y, dims.seeds) if pooled else y
    frame = summarise([(None, cells)], folder, labels, n_resamples=dims.bootstrap, confidence=0.95,
                      epsilons=[epsilon])
    row = _row(frame, arm="release_minus_null", metric=metric)
    truth = (cell.auroc(delta) - cell.auroc(0.0) if metric == "auroc"
             else cell.balanced_accuracy(delta) - cell.balanced_accuracy(0.0))
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]), truth=truth,
                 estimate=float(row["value"]))


def _simulate_difference(seed: int, effect: float, size: str) -> Trial:
    return matched_null_trial(seed, effect, size, "auroc")


def _simulate_difference_ba(seed: int, effect: float, size: str) -> Trial:
    return matched_null_trial(seed, effect, size, "balanced_accuracy")


# ---------------------------------------------------------------------------------------------------------------
# study_a.horizon: the dp_utility table's fixed-sequence horizons
# ---------------------------------------------------------------------------------------------------------------
def _family_grid(shape: UtilityShape, size: str, mechanisms=None, epsilons=None,
                 tiny_mechanisms: int = 2) -> tuple[list, list, list]:
    """(mechanisms, ε, grid) of a family case: the table's at the cohort size, the top two ε of the first
    ``tiny_mechanisms`` mechanisms at the tiny one."""
    mechanisms = list(mechanisms or shape.mechanisms)
    epsilons = sorted(float(e) for e in (epsilons or shape.epsilons))
    if size == "tiny":
        mechanisms, epsilons = mechanisms[:tiny_mechanisms], epsilons[-2:]
    return mechanisms, epsilons, [(m, e) for m in mechanisms for e in epsilons]


def deciding_grid(mechanisms: list, epsilons: list, effect: float) -> tuple[list, list]:
    """(ε, grid) a family data set needs. Under the global null (``effect`` 0) only each sequence's largest ε:
    a fixed sequence stops at its first non-rejection, so every adjusted p of a sequence is at least m × its
    largest ε's p, and the table rejects exactly when some mechanism's largest-ε cell has p < α/m — the other
    cells never change the decision (``tests/test_calibration_study_a.py`` runs the summary both ways).
    With a planted effect the whole grid (the false horizon extension is read below the largest ε)."""
    if effect:
        return epsilons, [(m, e) for m in mechanisms for e in epsilons]
    top = max(epsilons)
    return [top], [(m, top) for m in mechanisms]


def horizon_trial(seed: int, effect: float, size: str) -> Trial:
    """One ``dp_utility`` table (AUROC) under the global null, or with ``effect`` planted at every mechanism's
    largest ε only. ``p_value``: the smallest fixed-sequence adjusted p of the table (``p_adjusted`` of the
    summary), < α exactly when some mechanism keeps utility at some ε; ``estimate``: how many ε below the largest
    were declared kept (a false horizon extension when the effect sits at the largest ε only). Null data sets
    hold the cells that decide the table (:func:`deciding_grid`)."""
    from eegprivacy.studies.release.utility import summarise

    shape = dp_utility_shape()
    mechanisms, epsilons, _ = _family_grid(shape, size)
    epsilons, grid = deciding_grid(mechanisms, epsilons, effect)
    dims = _dims(shape, size, family=True)
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    top = max(epsilons)
    deltas = {(m, top): shape.cell(m, top).delta_for(effect) for m in mechanisms}
    folder = _scratch("horizon")
    cells = _write_grid(folder, rng, y, dims, shape, grid, deltas)
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, epsilons=epsilons)
    rows = frame[(frame["arm"] == "release_minus_null") & (frame["metric"] == "auroc")]
    p = float(rows["p_adjusted"].min())
    kept = rows["keeps_utility"].astype(bool)
    if (p < ALPHA) != bool(kept.any()):
        raise AssertionError(f"the summary's p_adjusted ({p}) and keeps_utility ({kept.any()}) disagree")
    return Trial(p_value=p, estimate=float((kept & (rows["epsilon"] < top)).sum()))


# ---------------------------------------------------------------------------------------------------------------
# study_a.end_to_end_horizon: the lead table (five designs, α/5)
# ---------------------------------------------------------------------------------------------------------------
def end_to_end_trial(seed: int, effect: float, size: str) -> Trial:
    """One end-to-end table through :func:`eegprivacy.studies.release.end_to_end.summarise`: ``effect`` planted
    at every design's largest ε. ``p_value``: the smallest adjusted p over the designs (number of designs × the
    largest p at this or any larger ε; < α exactly when some design keeps utility); the interval: the lead
    design's release − null at its largest ε, whose truth is ``effect``. Null data sets hold the cells that decide
    the table (:func:`deciding_grid`), the lead design's largest ε among them."""
    from eegprivacy.studies.release.end_to_end import summarise

    shape = end_to_end_shape()
    designs, epsilons, _ = _family_grid(shape, size)
    epsilons, grid = deciding_grid(designs, epsilons, effect)
    grid = [cell for cell in grid if cell in shape.cells]  # a design may run a subset of the ε (design_epsilons)
    dims = _dims(shape, size, family=True)
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    top = max(epsilons)
    deltas = {(d, top): shape.cell(d, top).delta_for(effect) for d in designs}
    extra = {d: {"n_components": shape.components[d], "headline": True} for d in designs}
    folder = _scratch("end-to-end")
    cells = _write_grid(folder, rng, y, dims, shape, grid, deltas, extra=extra)
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, headline=designs)
    rows = frame[frame["arm"] == "release_minus_null"]
    p = min(_adjusted(dict(zip(part["epsilon"], part["p_value"])), len(designs))
            for _, part in rows.groupby("mechanism"))
    kept = bool(rows["keeps_utility"].astype(bool).any())
    if (p < ALPHA) != kept:
        raise AssertionError(f"adjusted p {p} and keeps_utility {kept} disagree")
    lead = _row(rows, mechanism=designs[0], epsilon=top)
    return Trial(p_value=p, low=float(lead["ci_low"]), high=float(lead["ci_high"]), truth=float(effect),
                 estimate=float(lead["value"]))


# ---------------------------------------------------------------------------------------------------------------
# study_a.end_to_end_mde: the minimum detectable effect the lead table prints beside every cell
# ---------------------------------------------------------------------------------------------------------------
#: The cell whose printed MDE is checked: the design and ε the issue that asked for the MDE was about.
MDE_CELL = ("public_pls", 10.0)
#: Null data sets whose median bootstrap SD sets the unit of the planted effects: the formula is checked at the SD
#: the model's own data give, not at the real cell's (the model's variance is the dp_utility cells' median, not
#: this cell's), so a mismatch of the two variances cannot pass for a wrong formula, nor hide one.
MDE_PILOT = 20


def _stated_power() -> float:
    """The power the lead table's MDE column is stated at (``params/dp_end_to_end.yaml``: ``power``)."""
    from eegprivacy.paths import repo_root
    from eegprivacy.studies.release.config import DPEndToEndConfig

    return float(DPEndToEndConfig.load(repo_root() / "params" / "dp_end_to_end.yaml", "dp_end_to_end").power)


def _mde_cell_summary(seed: int, target: float, size: str):
    """The release − null row :func:`eegprivacy.studies.release.end_to_end.summarise` prints at ``MDE_CELL`` on
    one data set of the null model with an AUROC difference of ``target`` planted, and the planted truth."""
    from eegprivacy.studies.release.end_to_end import summarise

    shape = end_to_end_shape()
    design, epsilon = MDE_CELL
    dims = _dims(shape, size, family=False)
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    cell = shape.cell(design, epsilon)
    delta = cell.delta_for(target)
    folder = _scratch("end-to-end-mde")
    cells = _write_grid(folder, rng, y, dims, shape, [(design, epsilon)], {(design, epsilon): delta},
                        extra={design: {"n_components": shape.components[design], "headline": True}})
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, headline=[design])
    return _row(frame[frame["protocol"] == "threshold_free"], arm="release_minus_null"), \
        cell.auroc(delta) - cell.auroc(0.0)


@functools.lru_cache(maxsize=None)
def model_mde(size: str) -> float:
    """The MDE the lead table would print at ``MDE_CELL`` on the null model's data: the stage's own formula
    (:func:`~eegprivacy.studies.release.end_to_end.minimum_detectable_effect`) at the table's α/designs on the
    median bootstrap SD (``se``) the summary prints over ``MDE_PILOT`` null data sets of their own seeds (a
    SeedSequence of their own, so no trial's data set is among them)."""
    from eegprivacy.evaluation.calibration import trial_seeds
    from eegprivacy.studies.release.end_to_end import minimum_detectable_effect

    seeds = trial_seeds("study_a.end_to_end_mde:pilot", 0, 0.0, MDE_PILOT)
    se = float(np.median([float(_mde_cell_summary(s, 0.0, size)[0]["se"]) for s in seeds]))
    return minimum_detectable_effect(se, alpha=ALPHA / len(end_to_end_shape().mechanisms), power=_stated_power())


def mde_trial(seed: int, effect: float, size: str) -> Trial:
    """One (design, ε) cell of the lead table through :func:`eegprivacy.studies.release.end_to_end.summarise`
    with ``effect`` × the MDE the table's formula gives on the null model's data planted (:func:`model_mde`; 1.0:
    where the power should be the stated 80 %). ``p_value`` is the cell's one-sided p, tested at α/designs as the table
    tests it (the summary's ``alpha`` column; the trial reports p × designs, < 0.05 exactly when that test
    rejects); the interval is the cell's release − null interval, whose truth is the planted AUROC difference."""
    target = float(effect) * model_mde(size) if effect else 0.0
    row, truth = _mde_cell_summary(seed, target, size)
    designs = len(end_to_end_shape().mechanisms)
    return Trial(p_value=min(1.0, designs * float(row["p_value"])), low=float(row["ci_low"]),
                 high=float(row["ci_high"]), truth=truth, estimate=float(row["value"]))


# ---------------------------------------------------------------------------------------------------------------
# audit-cohort: the verdict's first sentence
# ---------------------------------------------------------------------------------------------------------------
def _audit_cohort(X: np.ndarray, y: np.ndarray, reid: tuple | None = None):
    from eegprivacy.studies.cohort.loading import Cohort

    n1 = int(np.sum(y))
    summary = {"n_patients": int(len(y)), "n_label_1": n1, "n_label_0": int(len(y) - n1),
               "n_features": int(X.shape[1])}
    return Cohort(dataset="calibration", dataset_version="calibration", features_hash="calibration",
                  synthetic=True, X=X, y=np.asarray(y, dtype=int), feature_names=[f"f{j}" for j in range(X.shape[1])],
                  summary=summary, reid_release=None if reid is None else reid[0],
                  reid_auxiliary=None if reid is None else reid[1],
                  reid_kind="same-session halves" if reid is not None else "none",
                  reid_reason="" if reid is not None else "one recording per subject")


def _audit_rows(cohort, config, utility_cells: list, attack_frames: dict, folder: Path):
    """The audit's summary rows (:func:`eegprivacy.studies.cohort.summary.summarise`, as ``run_audit`` calls it) of
    the utility cells kept in ``folder`` and the attack cells' tidy rows."""
    from eegprivacy.studies.cohort.summary import summarise
    from eegprivacy.studies.cohort.sweeps import Sweep

    sweeps = [Sweep("utility", None, utility_cells, "utility")]
    frames = [None]
    for kind, frame in attack_frames.items():
        sweeps.append(Sweep(kind, None, [], kind))
        frames.append(frame)
    return summarise(cohort, config, sweeps, frames, folder)


def _audit_chain(cohort, config, utility_cells: list, attack_frames: dict, folder: Path) -> dict:
    """summarise -> summary_document (whose ``headline`` is the verdict's lead), as ``run_audit`` calls them."""
    from eegprivacy.studies.cohort.verdict import summary_document

    return summary_document(cohort, config, _audit_rows(cohort, config, utility_cells, attack_frames, folder))


def _audit_shape(size: str, family: bool = True):
    """(audit config, study A shape, dims): the audit's own defaults (mechanisms, ε grid, seeds, nested seeds) on
    a cohort shaped like study A's (the audit runs on a user's cohort; MSU is the cohort the project audits)."""
    from eegprivacy.studies.cohort.config import AuditConfig

    config = AuditConfig()
    shape = dp_utility_shape()
    return config, shape, _dims(shape, size, family=family, seeds=config.noise_seeds,
                                nested_seeds=config.nested_seeds)


def verdict_trial(seed: int, effect: float, size: str) -> Trial:
    """The audit's utility decision (``effect`` planted at every mechanism's largest ε of the audit's grid) and the
    release AUROC interval its first sentence prints at the chosen ε (the horizon, else the largest ε). Null data
    sets hold the cells that decide the verdict (:func:`deciding_grid`; the chosen ε is then the largest, as it is
    on the whole grid unless the verdict is a false claim)."""
    import dataclasses

    config, shape, dims = _audit_shape(size)
    # tiny: one mechanism (the summary document's cost grows with the grid; the cohort size has both)
    mechanisms, epsilons, _ = _family_grid(shape, size, config.mechanisms, config.epsilons, tiny_mechanisms=1)
    epsilons, grid = deciding_grid(mechanisms, epsilons, effect)
    config = dataclasses.replace(config, mechanisms=tuple(mechanisms), epsilons=tuple(epsilons),
                                 bootstrap=dims.bootstrap)
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    top = max(epsilons)
    deltas = {(m, top): shape.cell(m, top).delta_for(effect) for m in mechanisms}
    folder = _scratch("audit-verdict")
    cells = _write_grid(folder, rng, y, dims, shape, grid, deltas)
    cohort = _audit_cohort(np.zeros((dims.n, 1)), y)
    document = _audit_chain(cohort, config, cells, {}, folder)
    points = document["headline"]
    p = min(_adjusted({float(e): (document["utility"][m][f"{e:g}"].get("release_minus_null_auroc") or {})
                       .get("p_value", math.nan) for e in epsilons}, len(mechanisms)) for m in mechanisms)
    if (p < ALPHA) != any(point["why"] == "horizon" for point in points):
        raise AssertionError(f"adjusted p {p} and the verdict's horizons {[pt['why'] for pt in points]} disagree")
    lead = points[0]
    release = lead["release_auroc"]
    cell = shape.cell(lead["mechanism"], lead["epsilon"])
    truth = cell.auroc(deltas.get((lead["mechanism"], lead["epsilon"]), 0.0))
    return Trial(p_value=p, low=float(release["ci_low"]), high=float(release["ci_high"]), truth=truth,
                 estimate=float(release["value"]))


def _attack_config(size: str, epsilon: float):
    """The audit's config for the attack cases: its first mechanism at one ε (the verdict's ε is then that one),
    its seeds, trials and member fraction."""
    import dataclasses

    config, shape, dims = _audit_shape(size, family=False)
    config = dataclasses.replace(config, mechanisms=config.mechanisms[:1], epsilons=(float(epsilon),),
                                 bootstrap=BOOTSTRAP["tiny"])
    if size == "tiny":
        config = dataclasses.replace(config, membership_trials=TINY["membership_trials"])
    return config, shape, dims


def _n_features(size: str) -> int:
    import json

    if size == "tiny":
        return TINY["features"]
    meta = json.loads(_metrics(f"features_{DATASET}.json").read_text())
    return int(meta["n_feature_columns"])


def _halves(rng: np.random.Generator, K: int, d: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(released half, attacker's half) of K subjects: a subject's own vector (``share`` of the variance) plus
    independent noise in each half."""
    own = rng.standard_normal((K, d))
    first = math.sqrt(share) * own + math.sqrt(1.0 - share) * rng.standard_normal((K, d))
    second = math.sqrt(share) * own + math.sqrt(1.0 - share) * rng.standard_normal((K, d))
    return first, second


def _cell_frame(rows: list[dict], mechanism: str, epsilon: float, seed: int):
    import pandas as pd

    return pd.DataFrame([{**r, "mechanism": mechanism, "epsilon": float(epsilon), "seed": seed} for r in rows])


def _attack_trial(seed: int, effect: float, size: str, kind: str):
    """One audit with an attack sweep of ``kind`` at the audit's first mechanism and one ε (the largest of its
    grid for re-identification, :data:`MEMBERSHIP_NULL_EPSILON` for membership); returns the summary row of the
    attack at that (mechanism, ε). The verdict prints that row as it is: ``summary_document`` copies it
    (``_entry``) and ``headline`` picks it at the verdict's ε, which is this one ε."""
    import dataclasses

    import pandas as pd

    from eegprivacy.studies.cohort import cells as audit
    from eegprivacy.studies.cohort.config import AuditConfig

    epsilon = (max(AuditConfig().epsilons) if kind == "reidentification" else MEMBERSHIP_NULL_EPSILON)
    config, shape, dims = _attack_config(size, epsilon)
    mechanism = config.mechanisms[0]
    rng = np.random.default_rng(seed)
    y = _labels(dims.n, dims.n_positive)
    d = _n_features(size)
    folder = _scratch(f"audit-{kind}")
    # the utility cells the audit's summary needs beside its attacks (they change no attack row): two seeds, the
    # fewest its horizon test reads, no nested protocol
    utility_dims = dataclasses.replace(dims, seeds=2, nested_seeds=0)
    cells = _write_grid(folder, rng, y, utility_dims, _with_cell(shape, mechanism, epsilon), [(mechanism, epsilon)],
                        {})
    cell = {"mechanism": mechanism, "epsilon": epsilon, "clip_norm": config.clip_norm, "delta": config.delta}
    frames = []
    if kind == "reidentification":
        first, second = _halves(rng, dims.n, d, effect)
        X, reid = first, (first, second)
        for s in range(dims.seeds):
            frames.append(_cell_frame(audit.reidentification_cell(cell, s, release_base=first, auxiliary=second),
                                      mechanism, epsilon, s))
    else:
        X, reid = rng.standard_normal((dims.n, d)), None
        for s in range(dims.seeds):
            frames.append(_cell_frame(audit.membership_cell(cell, s, population=X, trials=config.membership_trials,
                                                            member_fraction=config.member_fraction),
                                      mechanism, epsilon, s))
    cohort = _audit_cohort(X, y, reid)
    rows = _audit_rows(cohort, config, cells, {kind: pd.concat(frames, ignore_index=True)}, folder)
    metric = "top1_accuracy" if kind == "reidentification" else "auroc_likelihood"
    return _row(rows, arm=kind, mechanism=mechanism, epsilon=float(epsilon), metric=metric)


def _with_cell(shape: UtilityShape, mechanism: str, epsilon: float) -> UtilityShape:
    """``shape`` with a cell at (mechanism, ε) (the membership null's ε is below the grid: it borrows the smallest
    ε's structure, which only fills the utility part the chain needs)."""
    import dataclasses

    if (mechanism, float(epsilon)) in shape.cells:
        return shape
    nearest = min((e for m, e in shape.cells if m == mechanism), key=lambda e: abs(e - float(epsilon)))
    return dataclasses.replace(shape, cells={**shape.cells, (mechanism, float(epsilon)): shape.cell(mechanism,
                                                                                                     nearest)})


@functools.lru_cache(maxsize=None)
def reidentification_truth(size: str, share: float) -> float:
    """The expected top-1 accuracy of the audit's re-identification cell at ``size`` and ``share`` (module
    docstring): 1/K under the null (the attacker's half independent of the released one), else the mean over
    :data:`REID_TRUTH_REPLICATES` independent cohorts, one noise seed each."""
    from eegprivacy.studies.cohort import cells as audit
    from eegprivacy.studies.cohort.config import AuditConfig

    config, _, dims = _attack_config(size, max(AuditConfig().epsilons))
    if share == 0:
        return 1.0 / dims.n
    d = _n_features(size)
    cell = {"mechanism": config.mechanisms[0], "epsilon": max(config.epsilons), "clip_norm": config.clip_norm,
            "delta": config.delta}
    rng = np.random.default_rng([0x52454944, int(round(share * 1e6)), dims.n, d])
    hits = []
    for r in range(REID_TRUTH_REPLICATES[size]):
        first, second = _halves(rng, dims.n, d, share)
        hits.append(audit.reidentification_cell(cell, 10_000 + r, release_base=first, auxiliary=second)[0]["value"])
    return float(np.mean(hits))


def reidentification_trial(seed: int, effect: float, size: str) -> Trial:
    entry = _attack_trial(seed, effect, size, "reidentification")
    return Trial(low=float(entry["ci_low"]), high=float(entry["ci_high"]), truth=reidentification_truth(size, effect),
                 estimate=float(entry["value"]))


def membership_trial(seed: int, effect: float, size: str) -> Trial:
    if effect != 0:
        raise ValueError("the membership case has no planted effect (module docstring)")
    entry = _attack_trial(seed, effect, size, "membership")
    return Trial(low=float(entry["ci_low"]), high=float(entry["ci_high"]), truth=0.5, estimate=float(entry["value"]))


# ---------------------------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------------------------
ONE_SIDED = ("one-sided (release − null ≤ 0 against the release keeping utility: utility only grows with ε, and "
             "the fixed-sequence horizon acts on rejections in that direction only; a release below its null is "
             "printed as an interval)")
UTILITY_NULL = ("per-patient LOSO scores for every seed of a release and its matched null from the same "
                "distribution (no label shift in either): a patient effect shared across seeds, a noise part the "
                "arms share within a seed, a per-seed LOSO shift; patients, class balance, seeds and every share "
                "read per (mechanism, ε) from the stage's committed outputs (module docstring)")

MATCHED_NULL_DIFFERENCE = register(CalibrationCase(
    name="study_a.matched_null_difference", cohort=DATASET,
    test=("eegprivacy.studies.release.utility.summarise on predictions kept by its own writer (keeping_predictions): "
          "release − matched-null LOSO AUROC, paired patient cluster bootstrap crossed with a seed bootstrap, "
          "one-sided add-one p-value (bootstrap_p_value) and 95 % percentile interval; first mechanism at the "
          "largest ε of the table, 1,000 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: The paper's mechanisms (− null AUROC, p_adj)", f"{REPORT}: End-to-end private releases",
             AUDIT_REPORT),
    null_model=UTILITY_NULL,
    simulate=_simulate_difference,
    effects=UTILITY_EFFECTS,
    effect_unit="release − null LOSO AUROC (population)",
    n_null=1000, n_power=100,
    sided=ONE_SIDED,
))

MATCHED_NULL_DIFFERENCE_BA = register(CalibrationCase(
    name="study_a.matched_null_difference_ba", cohort=DATASET,
    test=("eegprivacy.studies.release.utility.summarise: release − matched-null nested balanced accuracy over the "
          "nested seeds (the first two), the same paired bootstrap, one-sided p-value and 95 % interval; first "
          "mechanism at the largest ε, 1,000 resamples"),
    used_in=(f"{REPORT}: The paper's mechanisms (− null BA (nested), p_adj)", f"{REPORT}: Utility horizons (BA)"),
    null_model=UTILITY_NULL + "; 0/1 predictions are scores > 0",
    simulate=_simulate_difference_ba,
    effects=UTILITY_EFFECTS,
    effect_unit="release − null balanced accuracy (population)",
    n_null=500, n_power=100,
    why_fewer="0.16 s per data set (the AUROC case's files and resamples): 700 data sets take about 2 minutes",
    sided=ONE_SIDED,
))

HORIZON = register(CalibrationCase(
    name="study_a.horizon", cohort=DATASET,
    test=("eegprivacy.studies.release.utility.summarise over the whole (mechanism × ε) grid: each mechanism's "
          "fixed sequence from the largest ε down at α/m (fixed_sequence_horizon); the data set rejects when any "
          "mechanism keeps utility at any ε (its p: the smallest p_adjusted); 250 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: Utility horizons (AUROC)", f"{REPORT}: The paper's mechanisms (p_adj)"),
    null_model=UTILITY_NULL + "; the global null (each data set holds the cells that decide the table, every "
                              "mechanism's largest ε: deciding_grid), or the effect at every mechanism's largest ε "
                              "only (the whole grid)",
    simulate=horizon_trial,
    effects=(0.12,),
    effect_unit="release − null AUROC planted at each mechanism's largest ε only",
    n_null=1000, n_power=30,
    sided=ONE_SIDED,
))

END_TO_END_HORIZON = register(CalibrationCase(
    name="study_a.end_to_end_horizon", cohort=DATASET,
    test=("eegprivacy.studies.release.end_to_end.summarise: the five designs' fixed sequences at α/5 (rejects when "
          "any design keeps utility at any ε; its p: designs × the largest p at or above an ε), and the lead "
          "design's release − null 95 % interval at its largest ε; 250 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: End-to-end private releases (horizon, release − null, p)",),
    null_model=UTILITY_NULL + "; the private patients of the end-to-end split; ρ from the committed interval "
                              "widths, π and τ the dp_utility cells' medians; null data sets hold the cells that "
                              "decide the table (every design's largest ε: deciding_grid)",
    simulate=end_to_end_trial,
    effects=(0.12,),
    effect_unit="release − null AUROC planted at every design's largest ε only",
    n_null=200, n_power=30,
    why_fewer="a null data set is the five designs' deciding cells (each design's largest ε: its seeds × 2 arms of "
              "prediction files and their resamples, 0.25 s); 200 put the coverage within about ±0.03 and resolve "
              "the size, which the designs' α/5 split keeps far below 0.05 (the calibration stage's 600 s budget)",
    sided=ONE_SIDED,
))

END_TO_END_MDE = register(CalibrationCase(
    name="study_a.end_to_end_mde", cohort=DATASET,
    test=("eegprivacy.studies.release.end_to_end.summarise at one lead-table cell (public PLS, ε = 10): release − "
          "matched-null LOSO AUROC, its one-sided bootstrap p at α/designs (p × designs < 0.05) and 95 % interval; "
          "power at the minimum detectable effect the table's formula gives on the null model's data (effect 1.0 = "
          "that MDE; the column states 0.80) and at half of it; 1,000 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: End-to-end private releases (MDE (80 %), power)",),
    null_model=UTILITY_NULL + "; the lead table's cell (ρ from its committed interval widths, π and τ the "
                              "dp_utility cells' medians), its seeds and private patients",
    simulate=mde_trial,
    effects=(0.5, 1.0),
    effect_unit=(f"multiples of the MDE the table's formula (minimum_detectable_effect at α/designs) gives at the "
                 f"cell on the model's own bootstrap SD (median of {MDE_PILOT} null data sets; the model's variance "
                 f"is the dp_utility cells' median, so its MDE is not the real cell's)"),
    n_null=200, n_power=100,
    why_fewer="0.3 s per data set (one cell, 40 seeds × 2 arms of prediction files and their resamples); the size "
              "sits near α/designs = 0.01, far from 0.05, and 100 data sets per effect put the power within ±0.08",
    sided=ONE_SIDED,
))

AUDIT_VERDICT = register(CalibrationCase(
    name="audit_cohort.verdict", cohort=DATASET,
    test=("eegprivacy.studies.cohort_audit.summarise (study A's summary through utility_summary) -> summary_document "
          "-> headline on the audit's own grid (AuditConfig: mechanisms, ε, 10 seeds): 'keeps utility' at some ε "
          "(the verdict's 'still tells … better than its matched null … by a test'), and the release AUROC "
          "interval the first sentence prints at the chosen ε; 250 resamples (the audit: 10,000)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (AUROC, matched null, test)",),
    null_model=UTILITY_NULL + "; shaped like study A's cohort (the audit runs on a user's cohort); null data sets "
                              "hold the cells that decide the verdict (every mechanism's largest ε: deciding_grid)",
    simulate=verdict_trial,
    effects=(0.12,),
    effect_unit="release − null AUROC planted at every mechanism's largest ε of the audit's grid",
    n_null=1000, n_power=30,
    sided=ONE_SIDED,
))

AUDIT_REIDENTIFICATION = register(CalibrationCase(
    name="audit_cohort.reidentification", cohort=DATASET,
    test=("eegprivacy.studies.cohort_audit.reidentification_cell (nearest-neighbour linkage of the released first "
          "halves to the attacker's second halves) at the audit's first mechanism and largest ε, 10 seeds, through "
          "cohort_audit.summarise: the Wilson 95 % interval over the K subjects of the mean top-1 (the row "
          "summary_document copies and headline picks for the first sentence)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (re-identifies x% of the patients [interval])",),
    null_model=("K subjects (the cohort's patients) with one vector per half in the cohort's feature dimension; "
                "under the null the two halves are independent (truth 1/K), a planted effect shares a subject's own "
                "vector between them (truth: the mean top-1 over 300 independent cohorts)"),
    simulate=reidentification_trial,
    effects=REID_EFFECTS,
    effect_unit="share of a half's variance that is the subject's own",
    n_null=300, n_power=60,
    why_fewer="10 linkage cells and the audit's summary per data set (0.25 s): 420 data sets take about 2 minutes",
))

AUDIT_MEMBERSHIP = register(CalibrationCase(
    name="audit_cohort.membership", cohort=DATASET,
    test=("eegprivacy.studies.cohort_audit.membership_cell (20 member draws per seed, distance and likelihood "
          "attackers) at the audit's first mechanism, 10 seeds, through cohort_audit.summarise: the t interval over "
          "seeds (clipped to [0, 1]) of the likelihood attacker's AUROC (the row the first sentence prints)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (membership AUROC, 95% interval)",),
    null_model=(f"the cohort's patients, Gaussian feature vectors, released at ε = {MEMBERSHIP_NULL_EPSILON:g} (the "
                "signal removed: membership moves the attack's AUROC by ≲ 1e-4, a tenth of the interval's "
                "half-width; truth 0.5)"),
    simulate=membership_trial,
    effects=(),
    effect_unit="",
    n_null=40, n_power=0,
    why_fewer="a data set is 10 membership cells of 20 releases and attacks each on the cohort's patients (3 s): "
              "40 data sets take 2 minutes",
))
