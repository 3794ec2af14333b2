"""Study C across cohorts: per cohort and (encoder, weights), is the task (the diagnosis where the cohort has a
subject-level label), who the subject is, and the centred-PSD attribute decodable from the embeddings above
their controls? Read from each cohort's tidy rows (``metrics/embedding_audit_<cohort>.csv``), summarised with
:func:`eegprivacy.studies.embedding_audit.summaries.summarise`; nothing here recomputes an endpoint.

The answers (:func:`answers`) follow the matched-null convention: a score counts only above its controls, not
above chance alone, and every decision is corrected over the table's cells (Holm):

- task: the subject-level label's balanced accuracy (``subject_label``) where the cohort has one, else the
  deployment task's (``deployment/0``); "yes" when its CI lower bound lies above chance 0.5, above its Gaussian
  and permuted-label controls (and, for a subject-level label, above the 95th percentile of its permutation
  null), and the one-sided test against the largest of them, recovered from the interval
  (:func:`eegprivacy.reporting.study_reports.interval_p_value`), survives Holm over the table's task cells;
- identity: BPID@1's CI lower bound above chance 1/K (its matched null), with the same interval test and Holm
  over the identity cells; beside it, whether pretraining adds identity (a self-pretrained encoder's BPID@1
  above the same encoder's at random init, Holm over those cells);
- PSD attribute: L_A (subject-disjoint) with its CI lower bound above 0 (L_A is a gain over its controls already)
  and its interval test Holm-adjusted over the table's L_A cells below 0.05 (the permutation p shown raw beside).

Anything else is "no evidence" (not "no": an interval that reaches the control does not show the absence of
leakage).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import atomic_path, write_text_atomic  # noqa: E402
from eegprivacy.evaluation.cluster_bootstrap import holm  # noqa: E402
from eegprivacy.reporting.embedding_audit import ALPHA, cohort_design  # noqa: E402
from eegprivacy.reporting.format import DASH, estimate  # noqa: E402
from eegprivacy.reporting.study_reports import interval_p_value  # noqa: E402
from eegprivacy.studies.embedding_audit.summaries import summarise  # noqa: E402
from eegprivacy.studies.embedding_audit.summaries import summary_row as _get  # noqa: E402
from eegprivacy.studies.embedding_audit.units import encoder_label  # noqa: E402

COHORTS = ("eegmat", "msu_schizophrenia", "eegmmidb")
STEM = "embedding_audit_"
FIGURE = "embedding_audit_cohorts.png"
YES, NO_EVIDENCE = "yes", "no evidence"
CORRECTION = "Holm"
QUESTIONS = ("task", "identity", "attribute")


def default_inputs(cohorts=COHORTS, folder: str = "metrics") -> list[str]:
    """The per-cohort tidy tables the stage reads by default: ``metrics/embedding_audit_<cohort>.csv``."""
    return [f"{folder}/{STEM}{c}.csv" for c in cohorts]


def cohort_from_path(path: Path) -> str:
    """The cohort a tidy table belongs to by its name (``embedding_audit_<cohort>.csv``)."""
    return Path(path).stem.removeprefix(STEM)


def read_cohort(path) -> tuple[str, pd.DataFrame]:
    """(cohort, tidy rows) of one cohort's table. A missing table is an error naming it and the stage that
    writes it; a table holding several cohorts or none named is an error too (one table, one cohort)."""
    path = Path(path)
    if not path.exists():
        cohort = cohort_from_path(path)
        raise FileNotFoundError(f"{path}: the tidy rows of cohort {cohort!r} are missing; run "
                                f"`dvc repro embedding_audit@{cohort}` to make them")
    tidy = pd.read_csv(path)
    column = "cohort" if "cohort" in tidy else "dataset"
    names = tidy[column].dropna().astype(str).unique() if column in tidy else []
    if len(names) > 1:
        raise ValueError(f"{path}: one cohort per table expected, found {sorted(names)} in column {column!r}")
    return (names[0] if len(names) else cohort_from_path(path)), tidy


def read_design(path) -> dict:
    """The cohort's design (task text etc.) from the headline JSON written beside its tidy table
    (``<stem>.json``: its ``meta``, read by :func:`eegprivacy.reporting.embedding_audit.cohort_design`), eegmat's
    design where there is no such file."""
    headline = Path(path).with_suffix(".json")
    meta = json.loads(headline.read_text()).get("meta", {}) if headline.exists() else {}
    return cohort_design(meta)


def load(paths) -> dict[str, dict]:
    """cohort -> {"summary", "design", "synthetic", "path"} for every tidy table in ``paths`` (in order)."""
    out = {}
    for path in paths:
        cohort, tidy = read_cohort(path)
        if cohort in out:
            raise ValueError(f"{path}: cohort {cohort!r} is already read from {out[cohort]['path']}")
        synthetic = bool(tidy["synthetic"].astype(str).str.lower().eq("true").any()) if "synthetic" in tidy else False
        out[cohort] = {"summary": summarise(tidy), "cells": _cells(tidy), "design": read_design(path),
                       "synthetic": synthetic, "path": str(path)}
    return out


def _cells(tidy: pd.DataFrame) -> list[tuple[str, str]]:
    """(encoder, weights) of the audited cells (the bridge's source/target rows left out) in the order the stage
    wrote them: each encoder with its primary weights, then the random-init baselines."""
    part = tidy[tidy["unit"].astype(str) != "bridge"]
    return list(dict.fromkeys(zip(part["encoder"].astype(str), part["weights"].astype(str))))


def _value(r) -> float:
    return np.nan if r is None else float(r["value"])


def _interval(r) -> tuple[float, float, float, str]:
    if r is None:
        return np.nan, np.nan, np.nan, "none"
    return float(r["value"]), float(r["ci_low"]), float(r["ci_high"]), str(r.get("ci_over", "none"))


def _task(summary, e, w) -> dict:
    """The task's balanced accuracy with its controls: the subject-level label where the cohort has one."""
    g = lambda unit, metric: _get(summary, encoder=e, weights=w, unit=unit, metric=metric)  # noqa: E731
    unit = "subject_label" if g("subject_label", "balanced_accuracy") is not None else "deployment/0"
    r = g(unit, "balanced_accuracy")
    controls = {"gaussian": _value(g(unit, "control_gaussian")), "permuted": _value(g(unit, "control_permuted"))}
    if unit == "subject_label":
        controls["permuted_q95"] = _value(g(unit, "control_permuted_q95"))
    value, low, high, over = _interval(r)
    return {"source": "subject_label" if unit == "subject_label" else "deployment",
            "endpoint": None if r is None else str(r["endpoint"]), "value": value, "ci_low": low, "ci_high": high,
            "ci_over": over, "chance": 0.5, "controls": controls, "p_value": _value(g(unit, "p_value"))}


def _identity(summary, e, w) -> dict:
    """BPID@1 with its matched null, chance 1/K (a reference set whose subject labels carry no information links
    at 1/K), and, for a pretrained encoder, the same encoder's random-init BPID@1: not a null for linkage (random
    features are still features of the signal) but the reference for "does pretraining add identity"."""
    r = _get(summary, encoder=e, weights=w, unit="identity", metric="bpid_at_1")
    ref = (_get(summary, encoder=e, weights="random_init", unit="identity", metric="bpid_at_1")
           if w != "random_init" else None)
    value, low, high, over = _interval(r)
    return {"value": value, "ci_low": low, "ci_high": high, "ci_over": over,
            "chance": np.nan if r is None else float(r["chance"]), "controls": {},
            "random_init": _value(ref)}


def _attribute(summary, e, w) -> dict:
    """L_A (subject-disjoint, ridge: the undefended audit's attacker) with its permutation p-value."""
    g = lambda metric: _get(summary, encoder=e, weights=w, unit="attribute/subject_disjoint",  # noqa: E731
                            metric=metric)
    value, low, high, over = _interval(g("gain"))
    return {"value": value, "ci_low": low, "ci_high": high, "ci_over": over, "chance": 0.0,
            "controls": {"gaussian": _value(g("control_gaussian")), "permuted": _value(g("control_permuted"))},
            "p_value": _value(g("p_value"))}


def _aeds(summary, e, w) -> dict:
    value, low, high, over = _interval(_get(summary, encoder=e, weights=w, unit="aeds", metric="aeds"))
    return {"value": value, "ci_low": low, "ci_high": high, "ci_over": over}


def _bar(entry: dict) -> float:
    """What a score must clear: chance and every control (NaN controls ignored)."""
    levels = [entry["chance"], *entry["controls"].values()]
    levels = [v for v in levels if np.isfinite(v)]
    return max(levels) if levels else np.nan


def _interval_test(entry: dict) -> float:
    """One-sided p of "above the bar" recovered from the interval (normal approximation; NaN without one)."""
    return interval_p_value(entry["value"], entry["ci_low"], entry["ci_high"], _bar(entry))


def answers(cohorts: dict[str, dict], alpha: float = ALPHA) -> pd.DataFrame:
    """One row per (cohort, encoder, weights): the task, identity, attribute and AEDS entries and, per question,
    ``<question>_answer`` ("yes" / "no evidence"), with the Holm-adjusted p-value each decision used. Holm runs over
    the table's cells of one question (all cohorts and encoders together)."""
    rows = []
    for cohort, c in cohorts.items():
        for e, w in c["cells"]:
            s = c["summary"]
            rows.append({"cohort": cohort, "encoder": e, "weights": w, "label": encoder_label(e, w),
                         "task": _task(s, e, w), "identity": _identity(s, e, w), "attribute": _attribute(s, e, w),
                         "aeds": _aeds(s, e, w)})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    for question in ("task", "identity"):
        p = [_interval_test(entry) for entry in table[question]]
        table[f"{question}_p_holm"] = holm(p)
        table[f"{question}_answer"] = [
            YES if (np.isfinite(entry["ci_low"]) and entry["ci_low"] > _bar(entry) and adj < alpha) else NO_EVIDENCE
            for entry, adj in zip(table[question], table[f"{question}_p_holm"])]
    # Does pretraining add identity? A pretrained encoder's BPID@1 against its random init's, over the cells that
    # have one (Holm over those); "–" where there is no random-init cell (band power, the random-init cells).
    reference = [entry["random_init"] for entry in table["identity"]]
    p = [interval_p_value(e["value"], e["ci_low"], e["ci_high"], ref) if np.isfinite(ref) else np.nan
         for e, ref in zip(table["identity"], reference)]
    table["pretraining_adds_identity_p_holm"] = holm(p)
    table["pretraining_adds_identity"] = [
        DASH if not np.isfinite(ref) else
        YES if (np.isfinite(e["ci_low"]) and e["ci_low"] > ref and adj < alpha) else NO_EVIDENCE
        for e, ref, adj in zip(table["identity"], reference, table["pretraining_adds_identity_p_holm"])]
    # The attribute is tested like the others, from its subject-bootstrap interval (L_A is already a gain over
    # its controls, so its bar is 0): at the stage's 50 permutations the permutation p cannot go below 1/51, and
    # Holm over ~20 cells would then refuse every cell whatever L_A is. The permutation p stays beside it (raw).
    table["attribute_p_holm"] = holm([interval_p_value(e["value"], e["ci_low"], e["ci_high"], 0.0)
                                      for e in table["attribute"]])
    table["attribute_answer"] = [YES if (np.isfinite(entry["ci_low"]) and entry["ci_low"] > 0 and adj < alpha)
                                 else NO_EVIDENCE for entry, adj in zip(table["attribute"], table["attribute_p_holm"])]
    return table


def defense_verdicts(summary: pd.DataFrame) -> dict:
    """Per verdict (attribute channel ``closes_channel``, identity ``closes_identity``): how many defenses
    (encoder, weights, defense) say yes on every seed, no, undecided or yes on some seeds only, and which close."""
    out = {}
    for key, metric in (("attribute", "closes_channel"), ("identity", "closes_identity")):
        rows = summary[summary["metric"] == metric]
        v = rows["value"].astype(float)
        names = [f"{encoder_label(r.encoder, r.weights)}: {r.defense}" for r in rows.itertuples()]
        out[key] = {"n": int(len(rows)), "yes": int((v == 1).sum()), "no": int((v == 0).sum()),
                    "undecided": int(v.isna().sum()), "some_seeds": int(((v > 0) & (v < 1)).sum()),
                    "closing": sorted(n for n, x in zip(names, v) if x == 1)}
    return out


# ----------------------------------------------------------------------------------------------- markdown

def _est(entry: dict, digits: int = 2) -> str:
    return estimate(entry["value"], entry["ci_low"], entry["ci_high"], digits=digits)


def _controls_text(entry: dict) -> str:
    names = {"gaussian": "G", "permuted": "P", "permuted_q95": "P q95", "random_init": "random init"}
    parts = [f"{names[k]} {v:.2f}" for k, v in entry["controls"].items() if np.isfinite(v)]
    return ", ".join(parts) if parts else DASH


def _num(value: float) -> str:
    return DASH if not np.isfinite(value) else f"{value:.2f}"


def _p_text(p: float) -> str:
    return DASH if not np.isfinite(p) else f"{p:.3f}{' *' if p < ALPHA else ''}"


def _task_name(c: dict, table: pd.DataFrame) -> str:
    sources = {t["source"] for t in table["task"]}
    endpoint = next((t["endpoint"] for t in table["task"] if t["source"] == "subject_label"), None)
    if "subject_label" in sources:
        return f"{endpoint.replace('_', ' ')} (subject-level label)"
    return c["design"]["task_text"]


def cohort_lines(cohort: str, c: dict, table: pd.DataFrame) -> list[str]:
    """One cohort's table: per encoder the task BA, BPID@1, L_A and AEDS with their CIs, controls and answers."""
    part = table[table["cohort"] == cohort]
    synthetic = " **SYNTHETIC**" if c["synthetic"] else ""
    d = c["design"]
    lines = [f"## {cohort}{synthetic}", "",
             f"Task: {_task_name(c, part)}. Identity: {d['identity_text']}. Pretraining: "
             f"{d.get('pretrain_text') or DASH}. Rows: `{c['path']}`.", "",
             "| encoder | task BA [CI] | task controls | p (Holm) | task? | BPID@1 [CI] (chance) | p (Holm) | "
             "identity? | random-init BPID@1 | p (Holm) | pretraining adds identity? | L_A subject-disjoint [CI] | "
             "p (Holm) | permutation p (raw) | attribute? | AEDS [CI] | ci_over (task / identity / L_A / AEDS) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in part.itertuples():
        t, i, a, s = r.task, r.identity, r.attribute, r.aeds
        chance = f" ({i['chance']:.3f})" if np.isfinite(i["chance"]) else ""
        lines.append(f"| {r.label} | {_est(t)} | {_controls_text(t)} | {_p_text(r.task_p_holm)} | "
                     f"{r.task_answer} | {_est(i)}{chance} | {_p_text(r.identity_p_holm)} | {r.identity_answer} | "
                     f"{_num(i['random_init'])} | {_p_text(r.pretraining_adds_identity_p_holm)} | "
                     f"{r.pretraining_adds_identity} | {_est(a)} | {_p_text(r.attribute_p_holm)} | "
                     f"{_p_text(a['p_value'])} | "
                     f"{r.attribute_answer} | "
                     f"{_est(s)} | {t['ci_over']} / {i['ci_over']} / {a['ci_over']} / {s['ci_over']} |")
    v = defense_verdicts(c["summary"])
    lines += ["", "| defense verdict | defenses | yes (every seed) | yes on some seeds | no | undecided | closing |",
              "|---|---|---|---|---|---|---|"]
    for key, name in (("attribute", "closes the PSD-attribute channel"), ("identity", "closes identity")):
        x = v[key]
        lines.append(f"| {name} | {x['n']} | {x['yes']} | {x['some_seeds']} | {x['no']} | {x['undecided']} | "
                     f"{', '.join(x['closing']) if x['closing'] else 'none' if x['n'] else DASH} |")
    return lines + [""]


def answer_lines(table: pd.DataFrame) -> list[str]:
    """The cross-cohort answer table: per cohort and encoder, yes / no evidence for each question."""
    lines = ["## Decodable above control? (all cohorts)", "",
             "| cohort | encoder | task / diagnosis | identity | pretraining adds identity | PSD attribute | "
             "AEDS [CI] |",
             "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.cohort} | {r.label} | {r.task_answer} | {r.identity_answer} | "
                     f"{r.pretraining_adds_identity} | {r.attribute_answer} | {_est(r.aeds)} |")
    counts = {q: int((table[f"{q}_answer"] == YES).sum()) for q in QUESTIONS}
    return lines + ["", f"Yes: task {counts['task']}, identity {counts['identity']}, PSD attribute "
                        f"{counts['attribute']} of {len(table)} (cohort, encoder) cells.", ""]


def rules_text(table: pd.DataFrame) -> str:
    m = {q: int(np.isfinite(table[f"{q}_p_holm"].astype(float)).sum()) for q in QUESTIONS}
    return (
        "How to read: every interval is the cell's own 95 % interval (uncorrected) over the unit its `ci_over` "
        "names (`subjects`: a cluster bootstrap over subjects; `subjects+seeds`: subject-bootstrap bounds "
        "averaged over member draws; `seeds`: a t-interval across noise seeds). **task?**: the subject-level "
        "label's balanced accuracy (one prediction per held-out subject) where the cohort has one, else the "
        "deployment task's; yes when its CI lower bound is above chance 0.5, above the Gaussian (G) and permuted-"
        "label (P) controls, and for a subject-level label above the permutation null's 95th percentile (P q95). "
        "**identity?**: BPID@1's CI lower bound above chance 1/K (the matched null: a reference set whose subject "
        "labels carry nothing links at 1/K). **pretraining adds identity?**: a self-pretrained encoder's BPID@1 "
        "above its random init's (same test, Holm over those cells; `–` where there is no random-init cell): the "
        "random-init encoder is not a null for linkage (random features of the signal still identify), it says "
        "what the pretraining added. For task and identity, the "
        "one-sided test of the score against the largest of those levels, recovered from its interval (normal "
        f"approximation), is {CORRECTION}-adjusted over the table's cells (task: m = {m['task']}, identity: "
        f"m = {m['identity']}) and must be below {ALPHA:g}. **attribute?**: L_A (subject-disjoint; a gain over "
        "its Gaussian and permuted controls, so its bar is 0) with its CI lower bound above 0 and the same "
        f"interval test, {CORRECTION}-adjusted over the table's m = {m['attribute']} L_A cells, below {ALPHA:g}; "
        "the split-local permutation p-value is shown raw beside it (with the stage's few permutations its floor "
        "is 1 / (permutations + 1), too coarse for a correction over the table). Multiple-comparison correction: "
        f"{CORRECTION}. `no evidence` is not `no`: the interval or the test does not clear the control. "
        "Defense verdicts count defenses (encoder × defense): yes on every seed, on some seeds, no, undecided "
        "(no utility to keep).")


def report_md(cohorts: dict[str, dict], table: pd.DataFrame, figure: str | None = None) -> str:
    """The cross-cohort report: the rules, the answer table, one table per cohort, the figure."""
    synthetic = any(c["synthetic"] for c in cohorts.values())
    lines = [f"# Study C across cohorts{' [SYNTHETIC]' if synthetic else ''}: is the task, the subject's identity "
             "or the PSD attribute decodable from frozen-encoder embeddings above control?", "",
             f"Cohorts: {', '.join(cohorts)}. " + rules_text(table), ""]
    lines += answer_lines(table)
    for cohort, c in cohorts.items():
        lines += cohort_lines(cohort, c, table)
    if figure:
        lines += ["## Figure", "", f"![cohorts]({figure})", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- JSON, figure

def _clean(value):
    """JSON-safe: NaN/∞ -> None, numpy scalars -> Python, recursively."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def headline(cohorts: dict[str, dict], table: pd.DataFrame) -> dict:
    """Per cohort: its design, per encoder the answers with the estimates, controls and Holm p they rest on, and
    the defense verdict counts; the correction and α used."""
    out = {"correction": CORRECTION, "alpha": ALPHA, "cohorts": {}}
    for cohort, c in cohorts.items():
        encoders = {}
        for r in table[table["cohort"] == cohort].itertuples():
            encoders[f"{r.encoder}/{r.weights}"] = {
                q: {**getattr(r, q), "answer": getattr(r, f"{q}_answer"), "p_holm": getattr(r, f"{q}_p_holm")}
                for q in QUESTIONS} | {"aeds": r.aeds,
                                       "pretraining_adds_identity": {
                                           "answer": r.pretraining_adds_identity,
                                           "p_holm": r.pretraining_adds_identity_p_holm}}
        out["cohorts"][cohort] = {"design": c["design"], "synthetic": c["synthetic"], "encoders": encoders,
                                  "defense_verdicts": defense_verdicts(c["summary"])}
    return _clean(out)


def write_headline(path, payload: dict) -> Path:
    return write_text_atomic(Path(path), json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


PANELS = (("identity", "BPID@1 − chance [95% CI]", "chance"), ("attribute", "L_A subject-disjoint [95% CI]", None),
          ("task", "task / diagnosis BA [95% CI]", None), ("aeds", "AEDS [95% CI]", None))


def figure(table: pd.DataFrame, path, synthetic: bool = False) -> Path:
    """Four panels (BPID@1 − chance, L_A, task BA, AEDS): one row per encoder, cohorts side by side (offset,
    one colour each), 95 % CIs as error bars; the task panel marks each cell's largest control (×)."""
    labels = list(dict.fromkeys(table["label"]))
    cohorts = list(dict.fromkeys(table["cohort"]))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 0.5 * len(labels) + 2.2), sharey=True)
    for ax, (key, xlabel, shift) in zip(axes, PANELS):
        for k, cohort in enumerate(cohorts):
            part = table[table["cohort"] == cohort]
            offset = (k - (len(cohorts) - 1) / 2) * 0.8 / max(len(cohorts), 1)
            for r in part.itertuples():
                entry = getattr(r, key)
                base = entry["chance"] if shift and np.isfinite(entry.get("chance", np.nan)) else 0.0
                if not np.isfinite(entry["value"]):
                    continue
                y = labels.index(r.label) + offset
                err = [[max(entry["value"] - entry["ci_low"], 0)], [max(entry["ci_high"] - entry["value"], 0)]]
                err = err if np.isfinite(entry["ci_low"]) and np.isfinite(entry["ci_high"]) else None
                ax.errorbar([entry["value"] - base], [y], xerr=err, fmt="o", color=f"C{k}", ms=4, capsize=2,
                            label=cohort if r.Index == part.index[0] else None)
                if key == "task" and np.isfinite(_bar(entry)):
                    ax.plot([_bar(entry)], [y], "x", color=f"C{k}", ms=5)
        ax.axvline(0.5 if key == "task" else 0.0, color="0.4", lw=0.7, ls=":")
        ax.set_xlabel(xlabel)
    axes[0].set_yticks(range(len(labels)), labels)
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{'[SYNTHETIC] ' if synthetic else ''}Study C across cohorts "
                 "(× = largest control of the task; dotted = chance)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path
