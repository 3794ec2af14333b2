"""Study A's record linkage: exact GlobalID linkage vs Bloom-filter linkage on SYNTHETIC identity tables.

For every seed × typo rate, site A holds clean synthetic identities and site B corrupted copies of most of them
plus people A never saw (see :func:`eegprivacy.privacy.linkage.linkage_scenario`). Exact linkage joins on the
GlobalID of the national id; Bloom linkage joins on Dice similarity of keyed Bloom filters of names, date of
birth, sex and postcode, at every threshold of the grid. Rows: precision, recall and F1 (Wilson intervals per
seed for precision and recall), beside the chance level of a random one-to-one matching.

The keys are :meth:`LinkageKey.for_synthetic_evaluation` keys (public, seed-derived): this measures linkage
quality and protects nothing. Identities, GlobalIDs and keys stay inside :func:`evaluate_cell`; only counts and
rates leave it.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd

from eegprivacy.evaluation.intervals import mean_ci, wilson_interval
from eegprivacy.pipeline.sweep import Cell, expand_grid
from eegprivacy.privacy import linkage as lk
from eegprivacy.studies.release.config import LinkageConfig
from eegprivacy.tracking import required_tags

DATASET = "synthetic_identities"
METHODS = ("exact_hmac", "bloom")
QUALITY = ("precision", "recall", "f1")
GENERATOR_KEYS = ("n_records", "overlap", "household_rate", "format_rate")
CELL_LISTS = ("fields", "thresholds")  # constant lists a cell config carries as JSON text


def dataset_version(config: LinkageConfig) -> str:
    """sha256 of the generator config: the synthetic 'dataset' is fully determined by it (and the seed)."""
    generator = {"generator": "eegprivacy.privacy.linkage.linkage_scenario",
                 **{k: getattr(config, k) for k in GENERATOR_KEYS}}
    return hashlib.sha256(json.dumps(generator, sort_keys=True).encode()).hexdigest()


def run_tags(version: str, seed: int | None) -> dict:
    return required_tags(study="a", stage="linkage", dataset=DATASET, dataset_version=version, synthetic=True,
                         seed=seed, dvc_stage="linkage")


def cells_for(config: LinkageConfig, version: str, code_hash: str) -> list[Cell]:
    """Typo rate × seed cells; each config carries everything the cell computes from."""
    base = {**{k: getattr(config, k) for k in GENERATOR_KEYS}, "q": config.q, "num_bits": config.num_bits,
            "num_hashes": config.num_hashes,
            # lists travel as JSON text: the sweep runner copies every config value into a row column
            "fields": json.dumps(config.fields), "thresholds": json.dumps([float(t) for t in config.thresholds]),
            "dataset_version": version, "code_hash": code_hash}
    return expand_grid({"typo_rate": [float(t) for t in config.typo_rates]}, seeds=config.seeds, base=base)


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

    fields = [tuple(f) if isinstance(f, list) else f for f in json.loads(config["fields"])]
    encoder = lk.BloomEncoder(fields, q=config["q"], num_bits=config["num_bits"], num_hashes=config["num_hashes"],
                              key=key)
    similarity = lk.dice_similarity(encoder.encode(site_a), encoder.encode(site_b))
    thresholds = [float(t) for t in json.loads(config["thresholds"])]
    # greedy matching takes pairs best first, so each threshold's matches are the lowest one's above it
    lowest = lk.greedy_one_to_one(similarity, min(thresholds))
    for threshold in thresholds:
        matches = [m for m in lowest if m[2] >= threshold]
        rows += _rows("bloom", threshold, lk.linkage_quality(matches, truth), chance)
    return rows


def _stats(rows: pd.DataFrame) -> dict | None:
    """Mean and 95% t-interval over seeds, rounded to 4 places (None where not finite)."""
    if rows.empty:
        return None
    mean, low, high = mean_ci(rows["value"].to_numpy(dtype=float))
    fin = lambda x: None if not math.isfinite(x) else round(x, 4)  # noqa: E731
    return {"mean": fin(mean), "ci_low": fin(low), "ci_high": fin(high), "n_seeds": int(len(rows))}


def summarise(tidy: pd.DataFrame, config: LinkageConfig, version: str) -> dict:
    """Mean and 95% t-interval over seeds of exact and default-threshold Bloom scores, per typo rate."""
    default = float(config.default_threshold)
    out = {"synthetic": True, "dataset": DATASET, "dataset_version": version,
           "n_records": config.n_records, "overlap": float(config.overlap),
           "format_rate": float(config.format_rate), "seeds": len(config.seeds),
           "default_threshold": default, "typo_rates": {}}
    for typo_rate, part in tidy.groupby("typo_rate", sort=True):
        entry = {}
        for method in METHODS:
            rows = part[part.method == method]
            if method == "bloom":
                rows = rows[np.isclose(rows.threshold.astype(float), default)]
            entry[method] = {m: _stats(rows[rows.metric == m]) for m in QUALITY}
        bloom = part[(part.method == "bloom") & (part.metric == "f1")].groupby("threshold")["value"].mean()
        entry["bloom_best_f1_threshold"] = float(bloom.idxmax()) if len(bloom) else None
        chance = part.loc[part.metric == "recall", "chance"]
        entry["chance_recall"] = float(chance.mean()) if len(chance) else None
        out["typo_rates"][f"{float(typo_rate):g}"] = entry
    return out


def headline_metrics(summary: dict) -> dict[str, float]:
    """The summary's exact and Bloom precision and recall means as flat MLflow metric names."""
    flat = {}
    for typo_rate, entry in summary["typo_rates"].items():
        for method in METHODS:
            for metric in ("precision", "recall"):
                value = (entry[method][metric] or {}).get("mean")
                if value is not None:
                    flat[f"typo_{typo_rate}/{method}/{metric}_mean"] = value
    return flat


def threshold_curves(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per (metric, typo rate): Bloom precision/recall mean and 95% t-interval over seeds at each Dice threshold,
    and the exact linkage mean (threshold NaN) beside them: what the precision–recall figure draws."""
    rows = []
    for (metric, typo_rate), part in tidy[tidy.metric.isin(["precision", "recall"])].groupby(["metric", "typo_rate"],
                                                                                            sort=True):
        for threshold, group in part[part.method == "bloom"].groupby("threshold"):
            mean, low, high = mean_ci(group["value"].to_numpy(dtype=float))
            rows.append({"metric": metric, "typo_rate": typo_rate, "method": "bloom", "threshold": threshold,
                         "mean": mean, "ci_low": low, "ci_high": high})
        rows.append({"metric": metric, "typo_rate": typo_rate, "method": "exact_hmac", "threshold": np.nan,
                     "mean": part.loc[part.method == "exact_hmac", "value"].mean()})
    return pd.DataFrame(rows)
