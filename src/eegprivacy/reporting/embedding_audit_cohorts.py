"""Study C across cohorts: per cohort and (encoder, weights), is the task (the diagnosis where the cohort has a
subject-level label), who the subject is, and the centred-PSD attribute decodable from the embeddings above
their controls? Read from each cohort's tidy rows (``metrics/embedding_audit_<cohort>.csv``), summarised with
:func:`eegprivacy.studies.embedding_audit.summaries.summarise`; nothing here recomputes an endpoint.

The answers (:func:`answers`) are the cohorts' claims (``metrics/embedding_audit_<cohort>_claims.csv``, built by
:mod:`eegprivacy.studies.embedding_audit.claims`): each question is one claim decided by one test with Holm over
the cohort's encoder cells, and this report prints that verdict, p and test unchanged -- the same ones
``reports/study-c.md`` reads back from MLflow. A score counts only above its controls (matched-null convention);
a claim with a random-init control is a paired difference against it. A significant effect below the reference is
"reverse"; anything else is "no evidence" (not "no").
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
from eegprivacy.reporting.embedding_audit import ALPHA, cohort_design  # noqa: E402
from eegprivacy.reporting.format import DASH, estimate  # noqa: E402
from eegprivacy.reporting.claims import claims_lines  # noqa: E402
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
                       "synthetic": synthetic, "path": str(path), "claims": read_claims(path),
                       "provenance": read_provenance(path)}
    return out


def claims_path(path) -> Path:
    """The claims table the stage writes beside a cohort's tidy rows: ``<stem>_claims.csv``."""
    path = Path(path)
    return path.with_name(f"{path.stem}_claims.csv")


def read_claims(path) -> pd.DataFrame:
    """The cohort's claims (:mod:`eegprivacy.studies.embedding_audit.claims`): every verdict here is one of
    them, never re-tested. A missing table is an error naming the stage that writes it."""
    claims = claims_path(path)
    if not claims.exists():
        raise FileNotFoundError(f"{claims}: the claims of cohort {cohort_from_path(path)!r} are missing; run "
                                f"`dvc repro embedding_audit@{cohort_from_path(path)}` to make them")
    table = pd.read_csv(claims, keep_default_na=False, na_values=[""])
    for column in ("link", "ci_over", "reference", "test", "family", "verdict", "provenance", "question"):
        table[column] = table[column].fillna("").astype(str)
    return table


def read_provenance(path) -> dict:
    """``<encoder>/<weights>`` -> what its weights are, from the headline JSON beside the tidy rows."""
    headline = Path(path).with_suffix(".json")
    return json.loads(headline.read_text()).get("meta", {}).get("provenance", {}) if headline.exists() else {}


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
    """The task's balanced accuracy with its controls, from the unit its claim is tested on: the subject-level
    label where the cohort has one, else the window label (``deployment/0`` for audits from before it)."""
    g = lambda unit, metric: _get(summary, encoder=e, weights=w, unit=unit, metric=metric)  # noqa: E731
    unit = next((u for u in ("subject_label", "window_label") if g(u, "balanced_accuracy") is not None),
                "deployment/0")
    r = g(unit, "balanced_accuracy")
    controls = {"gaussian": _value(g(unit, "control_gaussian")), "permuted": _value(g(unit, "control_permuted"))}
    if unit == "subject_label":
        controls["permuted_q95"] = _value(g(unit, "control_permuted_q95"))
    value, low, high, over = _interval(r)
    return {"source": unit if unit != "deployment/0" else "deployment",
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


def _claim(claims: pd.DataFrame, e: str, w: str, claim: str) -> dict | None:
    part = claims[(claims["encoder"] == e) & (claims["weights"] == w) & (claims["claim"] == claim)]
    return None if part.empty else part.iloc[0].to_dict()


def answers(cohorts: dict[str, dict], alpha: float = ALPHA) -> pd.DataFrame:
    """One row per (cohort, encoder, weights): the task, identity, attribute and AEDS entries (estimates and
    controls, for the tables and the figure) and, per question, ``<question>_answer`` ("yes" / "no evidence") with
    the Holm-adjusted p-value of the claim it is: read from the cohort's claims table, the same test, p and verdict
    every report of study C prints (``alpha`` is the claims'; kept for the signature)."""
    rows = []
    for cohort, c in cohorts.items():
        for e, w in c["cells"]:
            s = c["summary"]
            row = {"cohort": cohort, "encoder": e, "weights": w, "label": encoder_label(e, w),
                   "provenance": c.get("provenance", {}).get(f"{e}/{w}", ""),
                   "task": _task(s, e, w), "identity": _identity(s, e, w), "attribute": _attribute(s, e, w),
                   "aeds": _aeds(s, e, w)}
            for question in (*QUESTIONS, "pretraining_adds_identity"):
                claim = _claim(c["claims"], e, w, question)
                row[f"{question}_p_holm"] = np.nan if claim is None else float(claim["p_holm"])
                row[f"{question}_test"] = DASH if claim is None else claim["test"]
                row[f"{question}_answer"] = DASH if claim is None else claim["verdict"]
            row["pretraining_adds_identity"] = row.pop("pretraining_adds_identity_answer")
            rows.append(row)
    return pd.DataFrame(rows)


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
    """One cohort's table: per encoder (with what its weights are) the task BA, BPID@1, L_A and AEDS with their CIs
    and controls, and each claim's verdict with its p_Holm (the claims table's; the tests are named there)."""
    part = table[table["cohort"] == cohort]
    synthetic = " **SYNTHETIC**" if c["synthetic"] else ""
    d = c["design"]
    link = d.get("identity_link", "")
    lines = [f"## {cohort}{synthetic}", "",
             f"Task: {_task_name(c, part)}. Identity ({link or 'link not recorded'}): {d['identity_text']}. "
             f"Pretraining: {d.get('pretrain_text') or DASH}. Rows: `{c['path']}`; claims: "
             f"`{claims_path(c['path'])}`.", "",
             f"*Table: {cohort}, per encoder and weights (provenance in the second column); verdicts and p_Holm are "
             "the claims' (section Claims).*", "",
             "| encoder | weights (provenance) | task BA [CI] | task controls | task? (p_Holm) | "
             f"BPID@1 [CI] (chance), {link or 'link'} | identity? (p_Holm) | pretraining adds identity? (p_Holm) | "
             "L_A subject-disjoint [CI] | attribute? (p_Holm) | AEDS [CI] | ci_over (task / identity / L_A / AEDS) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in part.itertuples():
        t, i, a, s = r.task, r.identity, r.attribute, r.aeds
        chance = f" ({i['chance']:.3f})" if np.isfinite(i["chance"]) else ""
        lines.append(f"| {r.label} | {r.provenance or DASH} | {_est(t)} | {_controls_text(t)} | "
                     f"{_answer(r.task_answer, r.task_p_holm)} | {_est(i)}{chance} | "
                     f"{_answer(r.identity_answer, r.identity_p_holm)} | "
                     f"{_answer(r.pretraining_adds_identity, r.pretraining_adds_identity_p_holm)} | {_est(a)} | "
                     f"{_answer(r.attribute_answer, r.attribute_p_holm)} | {_est(s)} | "
                     f"{t['ci_over']} / {i['ci_over']} / {a['ci_over']} / {s['ci_over']} |")
    v = defense_verdicts(c["summary"])
    lines += ["", f"*Table: {cohort}, defenses of every encoder (weights as in the table above).*", "",
              "| defense verdict | defenses | yes (every seed) | yes on some seeds | no | undecided | closing |",
              "|---|---|---|---|---|---|---|"]
    for key, name in (("attribute", "closes the PSD-attribute channel"), ("identity", "closes identity")):
        x = v[key]
        lines.append(f"| {name} | {x['n']} | {x['yes']} | {x['some_seeds']} | {x['no']} | {x['undecided']} | "
                     f"{', '.join(x['closing']) if x['closing'] else 'none' if x['n'] else DASH} |")
    return lines + [""]


def _answer(verdict: str, p_holm: float) -> str:
    return verdict if not np.isfinite(p_holm) else f"{verdict} ({_p_text(p_holm)})"


def answer_lines(table: pd.DataFrame, cohorts: dict) -> list[str]:
    """The cross-cohort answer table: per cohort and encoder, each claim's verdict (identity with what it links)."""
    lines = ["## Decodable above control? (all cohorts)", "",
             "*Table: each claim's verdict per cohort and encoder (the Claims section gives its test, p and Holm "
             "family); weights: " + "; ".join(dict.fromkeys(v for c in cohorts.values()
                                                           for v in c.get("provenance", {}).values())) + ".*", "",
             "| cohort | encoder | task / diagnosis | identity (links) | pretraining adds identity | PSD attribute | "
             "AEDS [CI] |",
             "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        link = cohorts[r.cohort]["design"].get("identity_link", "")
        lines.append(f"| {r.cohort} | {r.label} | {r.task_answer} | {r.identity_answer} ({link}) | "
                     f"{r.pretraining_adds_identity} | {r.attribute_answer} | {_est(r.aeds)} |")
    counts = {q: int((table[f"{q}_answer"] == YES).sum()) for q in QUESTIONS}
    reverse = {q: int((table[f"{q}_answer"] == "reverse").sum()) for q in QUESTIONS}
    reverse_text = ", ".join(f"{q} {n}" for q, n in reverse.items() if n)
    # identity counted per link type: a link within one recording is not the same finding as one across runs
    links = table["cohort"].map(lambda c: cohorts[c]["design"].get("identity_link", "") or "link not recorded")
    by_link = "; ".join(f"{int(((table['identity_answer'] == YES) & (links == link)).sum())} of "
                        f"{int((links == link).sum())} {link}" for link in dict.fromkeys(links))
    return lines + ["", f"Yes: task {counts['task']}, PSD attribute {counts['attribute']} of {len(table)} (cohort, "
                        f"encoder) cells; identity by what it links: {by_link}"
                        + (f"; reverse (significantly below the reference): {reverse_text}." if reverse_text
                           else "."), ""]


def rules_text(table: pd.DataFrame) -> str:
    return (
        "How to read: every verdict is a claim of the Claims section below, decided by one test, the same test, "
        "p-value and verdict `reports/study-c.md` and each cohort's report print: the diagnosis by a "
        "subject-label permutation test, identity by permuting the reference labels, \"pretraining adds "
        "identity\" and encoder membership as paired differences against the random-init encoder (sign flips "
        "over subjects), the window-level task by permuting the labels among each subject's recordings (or a "
        "run's cues) and refitting, the PSD attribute from its subject-bootstrap interval (normal "
        "approximation, one-sided: L_A subtracts the larger of two controls, so only above 0 is a finding). "
        "Every other test is two-sided; Holm runs over one claim on one cohort (its encoder "
        f"cells); `yes` = p_Holm < {ALPHA:g} above the reference, `reverse` = the same below it (e.g. pretraining "
        "removes identity), `no evidence` is not `no`; each test's measured size is a row of "
        "`reports/calibration.md`. Every interval is the cell's own 95 % interval (uncorrected) over "
        "the unit its `ci_over` names (`subjects`: a cluster bootstrap over subjects; `label permutations`: the "
        "task's permutation test inverted under a shift, since the subject bootstrap keeps the fitted heads and "
        "undercovered; `subjects+seeds`: "
        "subject-bootstrap bounds averaged over member draws; `seeds`: a t-interval across noise seeds): it gives "
        "the size of an effect, not the verdict. Identity rows say what they link (within one recording, across "
        "runs, across recordings): never compare them without that label. Defense verdicts count defenses "
        "(encoder × defense): yes on every seed, on some seeds, no, undecided (no utility to keep).")


def report_md(cohorts: dict[str, dict], table: pd.DataFrame, figure: str | None = None) -> str:
    """The cross-cohort report: the rules, the answer table, one table per cohort, the figure."""
    synthetic = any(c["synthetic"] for c in cohorts.values())
    lines = [f"# Study C across cohorts{' [SYNTHETIC]' if synthetic else ''}: is the task, the subject's identity "
             "or the PSD attribute decodable from frozen-encoder embeddings above control?", "",
             f"Cohorts: {', '.join(cohorts)}. " + rules_text(table), ""]
    lines += answer_lines(table, cohorts)
    claims = [c["claims"] for c in cohorts.values() if c.get("claims") is not None]
    lines += claims_lines(pd.concat(claims, ignore_index=True) if claims else None, list(cohorts))
    for cohort, c in cohorts.items():
        lines += cohort_lines(cohort, c, table)
    if figure:
        lines += ["## Figure", "", f"![cohorts]({figure})", ""]
    from eegprivacy.reporting.calibration import tests_lines

    return "\n".join(lines + tests_lines("reports/embedding_audit_cohorts.md"))


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


def figure(table: pd.DataFrame, path, synthetic: bool = False, links: dict | None = None) -> Path:
    """Four panels (BPID@1 − chance, L_A, task BA, AEDS): one row per encoder, cohorts side by side (offset,
    one colour each), 95 % CIs as error bars; the task panel marks each cell's largest control (×)."""
    labels = list(dict.fromkeys(table["label"]))
    cohorts = list(dict.fromkeys(table["cohort"]))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 0.5 * len(labels) + 3.2), sharey=True)
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
                name = f"{cohort} (identity: {links[cohort]})" if links and links.get(cohort) else cohort
                ax.errorbar([entry["value"] - base], [y], xerr=err, fmt="o", color=f"C{k}", ms=4, capsize=2,
                            label=name if r.Index == part.index[0] else None)
                if key == "task" and np.isfinite(_bar(entry)):
                    ax.plot([_bar(entry)], [y], "x", color=f"C{k}", ms=5)
        ax.axvline(0.5 if key == "task" else 0.0, color="0.4", lw=0.7, ls=":")
        ax.set_xlabel(xlabel)
    axes[0].set_yticks(range(len(labels)), labels)
    axes[0].invert_yaxis()
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names) or 1, fontsize=8, frameon=False)  # off the data
    provenance = "\n".join(dict.fromkeys(
        f"{c}: {p}" for c, p, w in zip(table["cohort"], table.get("provenance", pd.Series(dtype=object)),
                                       table["weights"])
        if isinstance(p, str) and p and w not in ("none", "random_init")))
    fig.suptitle(f"{'[SYNTHETIC] ' if synthetic else ''}Study C across cohorts "
                 "(× = largest control of the task; dotted = chance)"
                 + (f"\nneural encoders (random init beside them):\n{provenance}" if provenance else ""),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path
