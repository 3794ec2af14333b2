"""Stage ``linkage`` (study A): exact GlobalID linkage vs Bloom-filter linkage on SYNTHETIC identity tables.

For every seed × typo rate, site A holds clean synthetic identities and site B corrupted copies of most of them
plus people A never saw (see :func:`eegprivacy.privacy.linkage.linkage_scenario`). Exact linkage joins on the
GlobalID of the national id; Bloom linkage joins on Dice similarity of keyed Bloom filters of names, date of
birth, sex and postcode, at every threshold of the grid. Rows: precision, recall and F1 (Wilson intervals per
seed for precision and recall), beside the chance level of a random one-to-one matching.

The keys are :meth:`LinkageKey.for_synthetic_evaluation` keys (public, seed-derived): this stage measures
linkage quality and protects nothing. Identities, GlobalIDs and keys stay inside the cell function; only
counts and rates leave it (CSV, JSON, figure, MLflow), and the stage prints only those.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.evaluation.figures import titled  # noqa: E402
from eegprivacy.evaluation.intervals import mean_ci, wilson_interval  # noqa: E402
from eegprivacy.params import load_params  # noqa: E402
from eegprivacy.privacy import linkage as lk  # noqa: E402
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run  # noqa: E402
from eegprivacy.tracking.sweep import SweepRunner, expand_grid, run_prefetched  # noqa: E402

NAME = "linkage"
HELP = ("Study A: record linkage on SYNTHETIC identity tables with injected typos and format variants: exact "
        "GlobalID (HMAC-SHA256) vs Bloom-filter (Dice) linkage; precision/recall per typo rate and threshold.")
DATASET = "synthetic_identities"
METHODS = ("exact_hmac", "bloom")
GENERATOR_KEYS = ("n_records", "overlap", "household_rate", "format_rate")


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/linkage.yaml", help="linkage params file (section `linkage`)")
    parser.add_argument("--out", default="metrics/linkage.csv", help="tidy per-seed rows")
    parser.add_argument("--summary", default="metrics/linkage.json", help="headline: mean and 95%% CI over seeds")
    parser.add_argument("--figure", default="reports/figures/linkage_precision_recall.png")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")
    parser.add_argument("--no-progress", action="store_true")


def dataset_version(params: dict) -> str:
    """sha256 of the generator config: the synthetic 'dataset' is fully determined by it (and the seed)."""
    config = {"generator": "eegprivacy.privacy.linkage.linkage_scenario",
              **{k: params[k] for k in GENERATOR_KEYS}}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def code_hash() -> str:
    """sha256 over the linkage module and this stage, so cached cells are recomputed when either changes."""
    digest = hashlib.sha256()
    for path in (Path(lk.__file__), Path(__file__)):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _fields(params: dict) -> list:
    return [tuple(f) if isinstance(f, (list, tuple)) else f for f in params["fields"]]


def _chance(n_a: int, n_b: int, n_true: int) -> dict[str, float]:
    """Expected scores of a random one-to-one matching of min(n_a, n_b) pairs."""
    precision = n_true / (n_a * n_b)
    recall = 1.0 / max(n_a, n_b)
    return {"precision": precision, "recall": recall, "f1": 2 * precision * recall / (precision + recall)}


def _rows(method: str, threshold: float, quality: dict, chance: dict) -> list[dict]:
    rows = []
    for metric, n in (("precision", quality["n_predicted"]), ("recall", quality["n_true"]),
                      ("f1", quality["n_true"])):
        low, high = (wilson_interval(quality["true_positives"], n) if metric != "f1" and n > 0
                     else (float("nan"), float("nan")))
        rows.append({"method": method, "threshold": threshold, "metric": metric, "value": quality[metric],
                     "ci_low": low, "ci_high": high, "n": n, "chance": chance[metric]})
    return rows


def evaluate_cell(config: dict, seed: int) -> list[dict]:
    """One seed × typo rate: exact and Bloom linkage of a fresh synthetic scenario; rates only leave here."""
    site_a, site_b, truth = lk.linkage_scenario(config["n_records"], seed, config["typo_rate"],
                                                config["format_rate"], overlap=config["overlap"],
                                                household_rate=config["household_rate"])
    key = lk.LinkageKey.for_synthetic_evaluation(seed)
    chance = _chance(len(site_a), len(site_b), len(truth))

    exact = lk.exact_link([lk.global_id(v, key) for v in site_a["national_id"]],
                          [lk.global_id(v, key) for v in site_b["national_id"]])
    rows = _rows("exact_hmac", float("nan"), lk.linkage_quality(exact, truth), chance)

    encoder = lk.BloomEncoder(_fields({"fields": json.loads(config["fields"])}), q=config["q"], num_bits=config["num_bits"],
                              num_hashes=config["num_hashes"], key=key)
    similarity = lk.dice_similarity(encoder.encode(site_a), encoder.encode(site_b))
    thresholds = [float(t) for t in json.loads(config["thresholds"])]
    # greedy matching takes pairs best first, so each threshold's matches are the lowest one's above it
    lowest = lk.greedy_one_to_one(similarity, min(thresholds))
    for threshold in thresholds:
        matches = [m for m in lowest if m[2] >= threshold]
        rows += _rows("bloom", threshold, lk.linkage_quality(matches, truth), chance)
    return rows


def _summary(tidy: pd.DataFrame, params: dict, version: str) -> dict:
    """Mean and 95% t-interval over seeds of exact and default-threshold Bloom scores, per typo rate."""
    default = float(params["default_threshold"])

    def stats(rows: pd.DataFrame) -> dict | None:
        if rows.empty:
            return None
        mean, low, high = mean_ci(rows["value"].to_numpy(dtype=float))
        fin = lambda x: None if not math.isfinite(x) else round(x, 4)  # noqa: E731
        return {"mean": fin(mean), "ci_low": fin(low), "ci_high": fin(high), "n_seeds": int(len(rows))}

    out = {"synthetic": True, "dataset": DATASET, "dataset_version": version,
           "n_records": int(params["n_records"]), "overlap": float(params["overlap"]),
           "format_rate": float(params["format_rate"]), "seeds": len(params["seeds"]),
           "default_threshold": default, "typo_rates": {}}
    for typo_rate, part in tidy.groupby("typo_rate", sort=True):
        entry = {}
        for method in METHODS:
            rows = part[part.method == method]
            if method == "bloom":
                rows = rows[np.isclose(rows.threshold.astype(float), default)]
            entry[method] = {m: stats(rows[rows.metric == m]) for m in ("precision", "recall", "f1")}
        bloom = part[(part.method == "bloom") & (part.metric == "f1")].groupby("threshold")["value"].mean()
        entry["bloom_best_f1_threshold"] = float(bloom.idxmax()) if len(bloom) else None
        chance = part.loc[part.metric == "recall", "chance"]
        entry["chance_recall"] = float(chance.mean()) if len(chance) else None
        out["typo_rates"][f"{float(typo_rate):g}"] = entry
    return out


def figure(tidy: pd.DataFrame, params: dict):
    """Precision and recall against the Dice threshold, one line per typo rate, exact linkage dashed."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharey=True, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes, ("precision", "recall")):
        for k, (typo_rate, part) in enumerate(tidy[tidy.metric == metric].groupby("typo_rate", sort=True)):
            color = colors[k % len(colors)]
            bloom = part[part.method == "bloom"]
            stats = [(t, *mean_ci(g["value"].to_numpy(dtype=float))) for t, g in bloom.groupby("threshold")]
            t, mean, low, high = (np.array(v, dtype=float) for v in zip(*stats))
            ax.plot(t, mean, marker="o", ms=3, color=color, label=f"typo rate {typo_rate:g}: Bloom")
            if np.isfinite(low).all():
                ax.fill_between(t, low, high, color=color, alpha=0.15, lw=0)
            exact = part.loc[part.method == "exact_hmac", "value"].mean()
            ax.axhline(exact, color=color, ls="--", lw=1, label=f"typo rate {typo_rate:g}: exact GlobalID")
        ax.axvline(float(params["default_threshold"]), color="grey", ls=":", lw=1)
        ax.set_xlabel("Dice threshold (Bloom filters)")
        ax.set_title(metric, fontsize=9)
    axes[0].set_ylabel("mean over seeds (95% CI)")
    handles, labels = axes[0].get_legend_handles_labels()
    # one legend column per typo rate: Bloom above exact
    fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(handles) // 2), fontsize=7)
    fig.suptitle(titled(f"Record linkage of SYNTHETIC identities: exact GlobalID vs Bloom filters "
                        f"(n = {params['n_records']}, {len(params['seeds'])} seeds, "
                        f"format rate {params['format_rate']:g})", True), fontsize=10)
    return fig


def run(args) -> int:
    params = load_params(args.params, "linkage")
    version = dataset_version(params)
    base = {**{k: params[k] for k in GENERATOR_KEYS}, "q": int(params["q"]), "num_bits": int(params["num_bits"]),
            "num_hashes": int(params["num_hashes"]),
            # lists travel as JSON text: the sweep runner copies every config value into a row column
            "fields": json.dumps(params["fields"]), "thresholds": json.dumps([float(t) for t in params["thresholds"]]),
            "dataset_version": version,
            "code_hash": code_hash()}
    if not any(np.isclose(float(params["default_threshold"]), [float(t) for t in params["thresholds"]])):
        raise ValueError("default_threshold must be one of the thresholds")
    cells = expand_grid({"typo_rate": [float(t) for t in params["typo_rates"]]}, seeds=params["seeds"], base=base)

    def tags(seed):
        return required_tags(study="a", stage="linkage", dataset=DATASET, dataset_version=version, synthetic=True,
                             seed=seed, dvc_stage="linkage")

    runner = SweepRunner(name=f"linkage-{DATASET}", study="a", dataset=DATASET,
                         out_dir=Path(args.cells) / "linkage" / DATASET, parent_tags=tags(None),
                         tags_fn=lambda cell: tags(cell.seed), params={"linkage": params, "dataset_version": version},
                         progress=not args.no_progress)
    [tidy] = run_prefetched([(runner, cells)], evaluate_cell, n_jobs=getattr(args, "jobs", 1))
    tidy = tidy.drop(columns=["fields", "thresholds"], errors="ignore")  # constant lists; the params hold them

    out, summary_path, figure_path = Path(args.out), Path(args.summary), Path(args.figure)
    for path in (out, summary_path, figure_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(out, index=False)
    summary = _summary(tidy, params, version)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    fig = figure(tidy, params)
    fig.savefig(figure_path, dpi=110)
    plt.close(fig)

    with start_run(study="a", tags=tags(None), run_name=f"linkage-{DATASET}-summary", params={"linkage": params}):
        flat = {}
        for typo_rate, entry in summary["typo_rates"].items():
            for method in METHODS:
                for metric in ("precision", "recall"):
                    value = (entry[method][metric] or {}).get("mean")
                    if value is not None:
                        flat[f"typo_{typo_rate}/{method}/{metric}_mean"] = value
        log_metrics(flat)
        for path in (out, summary_path, figure_path):
            log_artifact(path, "linkage")

    for typo_rate, entry in summary["typo_rates"].items():
        e, b = entry["exact_hmac"], entry["bloom"]
        print(f"[SYNTHETIC] typo rate {typo_rate}: exact P={e['precision']['mean']} R={e['recall']['mean']} | "
              f"Bloom@{summary['default_threshold']:g} P={b['precision']['mean']} R={b['recall']['mean']}")
    print(f"{len(cells)} cells -> {out}, {summary_path}, {figure_path}")
    return 0
