"""Study A's mechanism audit: empirical lower bounds on ε for every mechanism × ε × d, over seeds.

No EEG data enters: the audit (:class:`~eegprivacy.attacks.mechanism_audit.MechanismAudit`) feeds each mechanism
a worst-case neighbour pair built from (C, d) alone, so the runs carry ``dataset = none`` and
``dataset_version = none`` and are not synthetic (no cohort, generated or real, is involved). The dimensions are
those of study A's tables (params ``dims``). A claim is refuted when every seed's bound exceeds it: each seed
alone then refutes it at the stated confidence.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd

from eegprivacy.attacks.mechanism_audit import MechanismAudit, max_certifiable_epsilon
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.pipeline.sweep import Cell, expand_grid
from eegprivacy.privacy import make_mechanism
from eegprivacy.studies.release.config import MechanismAuditConfig
from eegprivacy.tracking import required_tags

STAGE = "dp_audit"
DATASET = "none"  # the audit's inputs are constructed from (C, d); no dataset, so no dataset version either
PAIRS = {"gaussian": "axis: x = C·e1, x' = −x (‖x − x'‖2 = 2C = Δ2)",
         "laplace": "diagonal: x = (C/√d)·1, x' = −x (‖x − x'‖1 = 2·√d·C = Δ1)"}


def run_tags(seed: int | None, **extra) -> dict:
    return required_tags(study="a", stage=STAGE, dataset=DATASET, dataset_version="none", synthetic=False,
                         seed=seed, dvc_stage=STAGE, **extra)


def cells_for(config: MechanismAuditConfig, mechanism: str, code_hash: str) -> list[Cell]:
    """ε × d × seed cells of one mechanism; each config carries the claimed δ, the noise scale and the scope."""
    cells = []
    for epsilon in config.epsilons:
        mech = make_mechanism(mechanism, float(epsilon), config.delta)
        for dim in config.dims:
            calib = mech.calibrate(config.clip_norm, dim)
            base = {"clip_norm": float(config.clip_norm), "delta": mech.delta, "n_trials": config.n_trials,
                    "confidence": config.confidence, "noise_scale": float(calib.noise_scale),
                    "formal_guarantee": bool(calib.formal_guarantee), "sampling": calib.sampling,
                    "code_hash": code_hash}
            cells += expand_grid({"mechanism": [mechanism], "epsilon": [float(epsilon)], "dim": [dim]},
                                 seeds=range(config.seeds), base=base)
    return cells


def cell_seed(config: dict, seed: int) -> list[int]:
    """Independent noise per cell: the seed plus a stable hash of (mechanism, ε, d)."""
    key = f"{config['mechanism']}|{config['epsilon']:g}|{config['dim']}"
    return [int(seed), zlib.crc32(key.encode())]


def audit_cost(config: dict, seed: int) -> float:
    """A cell's estimated time: noise draws of ``n_trials`` vectors of ``dim`` coordinates (the longest-first
    schedule's estimate; the larger d goes first)."""
    return float(config["n_trials"]) * float(config["dim"])


def audit_cell(config: dict, seed: int, n_jobs: int = 1) -> list[dict]:
    """One audit -> tidy rows; ``epsilon_lower_bound`` carries n (evaluation trials per side) and chance 0."""
    mechanism = make_mechanism(config["mechanism"], config["epsilon"], config["delta"])  # Laplace ignores δ
    audit = MechanismAudit(n_trials=config["n_trials"], confidence=config["confidence"], n_jobs=n_jobs,
                           random_state=np.random.default_rng(cell_seed(config, seed)))
    audit.run(mechanism, config["clip_norm"], config["dim"])
    rows = [{"metric": k, "value": v} for k, v in audit.summary().items()]
    for row in rows:
        if row["metric"] == "epsilon_lower_bound":  # a mechanism that leaks nothing certifies ε = 0
            row.update(n=audit.n_negatives_, chance=0.0)
    return rows


def _rounded(value: float):
    return None if not math.isfinite(value) else round(value, 4)


def _claim_record(part: pd.DataFrame) -> dict:
    """One (mechanism, d, ε): the bound over seeds (mean, min, max, t-interval) beside the claim."""
    bounds = part["epsilon_lower_bound"].to_numpy(dtype=float)
    claimed = float(part["claimed_epsilon"].iloc[0])
    mean, low, high = mean_ci(bounds)
    return {"claimed_epsilon": claimed, "claimed_delta": float(part["claimed_delta"].iloc[0]),
            "formal_guarantee": bool(part["formal_guarantee"].iloc[0]),
            "sampling": str(part["sampling"].iloc[0]) if "sampling" in part else "idealised",
            "noise_scale": round(float(part["noise_scale"].iloc[0]), 6),
            "lower_bound_mean": round(mean, 4), "lower_bound_min": round(float(bounds.min()), 4),
            "lower_bound_max": round(float(bounds.max()), 4),
            "lower_bound_ci_low": _rounded(low), "lower_bound_ci_high": _rounded(high),
            "n_seeds": int(bounds.size), "n_seeds_exceeding": int((bounds > claimed).sum()),
            # every seed's bound above the claim: each seed alone refutes it at the stated confidence
            "exceeds_claim": bool((bounds > claimed).all())}


def headline(tidy: pd.DataFrame, config: MechanismAuditConfig) -> dict:
    """Per mechanism × d × ε: the bound's mean, min, max and t-interval over seeds, beside the claim."""
    results, refuted = {}, []
    wide = tidy.pivot_table(index=["mechanism", "dim", "epsilon", "seed"], columns="metric", values="value")
    n_eval = int(wide["n_negatives"].min())
    for (mechanism, dim, epsilon), part in wide.groupby(level=["mechanism", "dim", "epsilon"], sort=True):
        record = _claim_record(part)
        results.setdefault(mechanism, {}).setdefault(f"d_{int(dim)}", {})[f"epsilon_{epsilon:g}"] = record
        if record["exceeds_claim"]:
            refuted.append(f"{mechanism} d={int(dim)} ε={epsilon:g}")
    return {"dataset": DATASET, "synthetic": False, "clip_norm": float(config.clip_norm),
            "n_trials_per_side": config.n_trials, "n_evaluation_per_side": n_eval, "confidence": config.confidence,
            "confidence_split": "Bonferroni: one-sided Clopper–Pearson upper bounds at 1 − α/2 on FPR and on FNR",
            "max_certifiable_epsilon": round(max_certifiable_epsilon(n_eval, confidence=config.confidence), 4),
            "pairs": PAIRS, "n_claims_refuted": len(refuted), "claims_refuted": refuted, "results": results}


def headline_metrics(summary: dict) -> dict[str, float]:
    """Each bound's mean over seeds, the certifiable ceiling and the refuted count, as flat MLflow metrics."""
    flat = {f"{m}/d_{d.removeprefix('d_')}/eps_{e.removeprefix('epsilon_')}/epsilon_lower_bound_mean":
            r["lower_bound_mean"]
            for m, by_d in summary["results"].items() for d, by_e in by_d.items() for e, r in by_e.items()}
    return {**flat, "max_certifiable_epsilon": summary["max_certifiable_epsilon"],
            "claims_refuted": len(summary["claims_refuted"])}


def bound_stats(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (d, mechanism, ε): the lower bound's mean, min and max over seeds and the seed count (what the
    figure draws: line = mean, shade = min–max)."""
    bounds = tidy[tidy.metric == "epsilon_lower_bound"]
    return (bounds.groupby(["dim", "mechanism", "epsilon"], sort=True)["value"]
            .agg(["mean", "min", "max", "count"]).reset_index())
