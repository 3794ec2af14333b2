"""Stage ``dp_audit`` (study A): empirical lower bounds on ε for every mechanism × ε × d, over seeds.

No EEG data enters: the audit feeds each mechanism a worst-case neighbour pair built from (C, d) alone, so the
runs carry ``dataset = none`` and ``dataset_version = none`` and are not synthetic (no cohort, generated or
real, is involved). The dimensions are those of study A's tables (params ``dims``).
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.attacks.dp_audit import MechanismAudit, max_certifiable_epsilon
from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.params import load_params
from eegprivacy.privacy import make_mechanism
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run
from eegprivacy.tracking.sweep import SweepRunner, expand_grid, run_prefetched

NAME = "dp-audit"
HELP = ("Study A: empirical DP audit — run each mechanism many times on a worst-case neighbour pair and write a "
        "Clopper–Pearson lower bound on ε per (mechanism, ε, d, seed), a headline JSON and a figure.")

STAGE = "dp_audit"
DATASET = "none"  # the audit's inputs are constructed from (C, d); no dataset, so no dataset version either
PAIRS = {"gaussian": "axis: x = C·e1, x' = −x (‖x − x'‖2 = 2C = Δ2)",
         "laplace": "diagonal: x = (C/√d)·1, x' = −x (‖x − x'‖1 = 2·√d·C = Δ1)"}


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/dp_audit.yaml", help="audit params file")
    parser.add_argument("--out", default="metrics/dp_audit.csv", help="tidy per-seed rows")
    parser.add_argument("--summary", default="metrics/dp_audit.json", help="headline bounds per mechanism × ε × d")
    parser.add_argument("--figure", default="reports/figures/dp_audit.png")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--no-progress", action="store_true")


def code_hash() -> str:
    """sha256 over the sources a cell runs, so a cached cell is never reused after they change."""
    import eegprivacy

    package = Path(eegprivacy.__file__).parent
    files = [package / "attacks" / "dp_audit.py", package / "privacy" / "mechanisms.py",
             package / "privacy" / "sensitivity.py", Path(__file__)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _tags(seed, **extra) -> dict:
    return required_tags(study="a", stage=STAGE, dataset=DATASET, dataset_version="none", synthetic=False,
                         seed=seed, dvc_stage=STAGE, **extra)


def cells_for(params: dict, mechanism: str, code: str):
    """ε × d × seed cells of one mechanism; each config carries the claimed δ, the noise scale and the scope."""
    cells = []
    for epsilon in params["epsilons"]:
        mech = make_mechanism(mechanism, float(epsilon), float(params["delta"]))
        for dim in params["dims"]:
            calib = mech.calibrate(params["clip_norm"], int(dim))
            base = {"clip_norm": float(params["clip_norm"]), "delta": mech.delta, "n_trials": int(params["n_trials"]),
                    "confidence": float(params["confidence"]), "noise_scale": float(calib.noise_scale),
                    "formal_guarantee": bool(calib.formal_guarantee), "code_hash": code}
            cells += expand_grid({"mechanism": [mechanism], "epsilon": [float(epsilon)], "dim": [int(dim)]},
                                 seeds=range(int(params["seeds"])), base=base)
    return cells


def cell_seed(config: dict, seed: int) -> list[int]:
    """Independent noise per cell: the seed plus a stable hash of (mechanism, ε, d)."""
    key = f"{config['mechanism']}|{config['epsilon']:g}|{config['dim']}"
    return [int(seed), zlib.crc32(key.encode())]


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


def headline(tidy: pd.DataFrame, params: dict) -> dict:
    """Per mechanism × d × ε: the bound's mean, min, max and t-interval over seeds, beside the claim."""
    conf = float(params["confidence"])
    results, refuted = {}, []
    wide = tidy.pivot_table(index=["mechanism", "dim", "epsilon", "seed"], columns="metric", values="value")
    n_eval = int(wide["n_negatives"].min())
    for (mechanism, dim, epsilon), part in wide.groupby(level=["mechanism", "dim", "epsilon"], sort=True):
        bounds = part["epsilon_lower_bound"].to_numpy(dtype=float)
        claimed = float(part["claimed_epsilon"].iloc[0])
        mean, low, high = mean_ci(bounds)
        record = {"claimed_epsilon": claimed, "claimed_delta": float(part["claimed_delta"].iloc[0]),
                  "formal_guarantee": bool(part["formal_guarantee"].iloc[0]),
                  "noise_scale": round(float(part["noise_scale"].iloc[0]), 6),
                  "lower_bound_mean": round(mean, 4), "lower_bound_min": round(float(bounds.min()), 4),
                  "lower_bound_max": round(float(bounds.max()), 4),
                  "lower_bound_ci_low": None if not math.isfinite(low) else round(low, 4),
                  "lower_bound_ci_high": None if not math.isfinite(high) else round(high, 4),
                  "n_seeds": int(bounds.size), "n_seeds_exceeding": int((bounds > claimed).sum()),
                  # every seed's bound above the claim: each seed alone refutes it at the stated confidence
                  "exceeds_claim": bool((bounds > claimed).all())}
        results.setdefault(mechanism, {}).setdefault(f"d_{int(dim)}", {})[f"epsilon_{epsilon:g}"] = record
        if record["exceeds_claim"]:
            refuted.append(f"{mechanism} d={int(dim)} ε={epsilon:g}")
    return {"dataset": DATASET, "synthetic": False, "clip_norm": float(params["clip_norm"]),
            "n_trials_per_side": int(params["n_trials"]), "n_evaluation_per_side": n_eval, "confidence": conf,
            "confidence_split": "Bonferroni: one-sided Clopper–Pearson upper bounds at 1 − α/2 on FPR and on FNR",
            "max_certifiable_epsilon": round(max_certifiable_epsilon(n_eval, confidence=conf), 4),
            "pairs": PAIRS, "n_claims_refuted": len(refuted), "claims_refuted": refuted, "results": results}


def figure(tidy: pd.DataFrame, summary: dict):
    """Claimed ε (x) vs the empirical lower bound (y, mean with min–max over seeds), one panel per d."""
    bounds = tidy[tidy.metric == "epsilon_lower_bound"]
    dims = sorted(bounds["dim"].unique())
    fig, axes = plt.subplots(1, len(dims), figsize=(5.2 * len(dims), 4.6), sharey=True, squeeze=False)
    ceiling = summary["max_certifiable_epsilon"]
    for ax, dim in zip(axes[0], dims):
        part = bounds[bounds.dim == dim]
        for mechanism, rows in part.groupby("mechanism", sort=True):
            stats = rows.groupby("epsilon")["value"].agg(["mean", "min", "max"])
            line, = ax.plot(stats.index, stats["mean"], marker="o", label=mechanism)
            ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.2)
        eps = np.geomspace(part["epsilon"].min(), part["epsilon"].max(), 50)
        ax.plot(eps, eps, color="black", lw=1, ls="--", label="y = x (claim)")
        ax.axhline(ceiling, color="grey", lw=1, ls=":",
                   label=f"ceiling ln(M / ln(2/α)) = {ceiling:.1f}, "
                         f"M = {summary['n_evaluation_per_side']:,} evaluation trials")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.1)  # symlog so a bound of exactly 0 still shows
        ticks = sorted(part["epsilon"].unique())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("claimed ε")
        ax.set_title(f"d = {dim}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(f"empirical ε lower bound ({summary['confidence']:.0%} CP; linear below 0.1)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    n_seeds = int(bounds.groupby(["mechanism", "dim", "epsilon"]).size().max())
    fig.suptitle(f"DP audit on a worst-case neighbour pair (no data), C = {summary['clip_norm']:g}, "
                 f"N = {summary['n_trials_per_side']:,} per side; line = mean, shade = min–max over {n_seeds} seeds",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def run(args) -> int:
    params = load_params(args.params, "dp_audit")
    code = code_hash()
    plan = []
    for mechanism in params["mechanisms"]:
        def child_tags(cell):
            return _tags(cell.seed, mechanism=cell.config["mechanism"], epsilon=cell.config["epsilon"],
                         delta=cell.config["delta"])

        runner = SweepRunner(name=f"{STAGE}-{mechanism}", study="a", dataset=DATASET,
                             out_dir=Path(args.cells) / STAGE / mechanism,
                             parent_tags=_tags(None, mechanism=mechanism), tags_fn=child_tags,
                             params={"dp_audit": params}, progress=not args.no_progress)
        plan.append((runner, cells_for(params, mechanism, code)))
    # Whole cells in n_jobs processes: the audit's own threads only overlap the noise draws, not the sorting.
    frames = run_prefetched(plan, audit_cell, n_jobs=int(params.get("n_jobs", 1)))

    tidy = pd.concat(frames, ignore_index=True)
    summary = headline(tidy, params)
    for path in (args.out, args.summary, args.figure):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(args.out, index=False)
    Path(args.summary).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    fig = figure(tidy, summary)
    fig.savefig(args.figure, dpi=110)
    plt.close(fig)

    with start_run(study="a", tags=_tags(None), run_name=f"{STAGE}-summary", params={"dp_audit": params}):
        flat = {f"{m}/d_{d.removeprefix('d_')}/eps_{e.removeprefix('epsilon_')}/epsilon_lower_bound_mean":
                r["lower_bound_mean"]
                for m, by_d in summary["results"].items() for d, by_e in by_d.items() for e, r in by_e.items()}
        log_metrics({**flat, "max_certifiable_epsilon": summary["max_certifiable_epsilon"],
                     "claims_refuted": len(summary["claims_refuted"])})
        log_artifact(args.summary, "metrics")
        log_artifact(args.figure, "figures")

    print(f"dp-audit: {len(summary['claims_refuted'])} (mechanism, d, ε) claims refuted by every seed "
          f"(ceiling {summary['max_certifiable_epsilon']:.2f}): " + "; ".join(summary["claims_refuted"]))
    return 0
