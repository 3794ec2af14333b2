"""Study A's null model and its data sets: the cohort's shape read from the stages' committed outputs, per-patient
scores simulated from it and kept with the stage's own writer (the calibration cases are :mod:`.study_a`'s).

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

**Bootstrap counts.** The stage resamples 10,000 times (``params/dp_release.yaml``); the cases use fewer (given
in each ``test``): the count moves only the Monte-Carlo error of a p-value, not its null distribution, and 10,000
costs 1.2 s per data set at the cohort's shape.

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


DATASET = "msu_schizophrenia"
CONFIDENCE_Z = norm.ppf(0.975)
#: (dA/dk)² at k = 0 for A = Φ(−k/√2): how a per-seed shift k of the scores moves the seed's AUROC.
_DAUC_DK2 = 1.0 / (4.0 * math.pi)
#: Bootstrap resamples of the calibration's data sets (the stage's 10,000 cost 1.2 s per data set; module docstring).
BOOTSTRAP = {"difference": 1000, "family": 250, "tiny": 100}
#: The tiny data sets of the seconds-long version in ``tests/``: patients (class balance as the cohort's), seeds.
TINY = {"patients": 12, "seeds": 3, "family_seeds": 2, "features": 8, "membership_trials": 2}


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


def _data_set(rng: np.random.Generator, dims: _Dims, shape: UtilityShape, grid: list[tuple[str, float]],
              deltas: dict, case: str, extra=None, pooled: bool = False) -> tuple[np.ndarray, Path, list]:
    """One data set of ``case``: (labels, the case's scratch folder, the cells of ``grid`` simulated from ``rng``
    with ``deltas`` planted and kept there by :func:`_write_grid`)."""
    y = _labels(dims.n, dims.n_positive)
    folder = _scratch(case)
    return y, folder, _write_grid(folder, rng, y, dims, shape, grid, deltas, extra=extra, pooled=pooled)


def _row(frame, **where):
    part = frame
    for column, value in where.items():
        part = part[part[column] == value]
    if len(part) != 1:
        raise RuntimeError(f"expected one summary row for {where}, found {len(part)}")
    return part.iloc[0]
