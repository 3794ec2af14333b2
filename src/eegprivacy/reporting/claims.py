"""Study C's claims table in markdown: one renderer for every report, so a claim prints the same test, p-value and
verdict in ``study-c.md``, ``embedding_audit_cohorts.md`` and each cohort's report (the rows come from
:mod:`eegprivacy.studies.embedding_audit.claims`; nothing here tests anything)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.studies.embedding_audit.claims import ALPHA, ATTRIBUTE_FAILS, CLAIMS

HEADING = "## Claims (one test each)"
HEADER = ("| cohort | encoder | weights (provenance) | claim | links | estimate [95 % CI] | reference | test | p | "
          "p_Holm (family) | verdict |")


def _p(p: float) -> str:
    if not np.isfinite(p):
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _estimate(r) -> str:
    if not np.isfinite(r["estimate"]):
        return "—"
    if np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"]):
        return f"{r['estimate']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
    return f"{r['estimate']:.3f}"


def claim_row(r) -> str:
    """One table line; the cells the consistency test compares are the claim's test, p, p_Holm and verdict."""
    star = " *" if np.isfinite(r["p_holm"]) and r["p_holm"] < ALPHA else ""
    return (f"| {r['cohort']} | {r['cell']} | {r['provenance']} | {r['claim']} | {r['link'] or '—'} | "
            f"{_estimate(r)} | {r['reference']} | {r['test']} | {_p(r['p_value'])} | "
            f"{_p(r['p_holm'])}{star} ({r['family']}) | {r['verdict']} |")


def sort_claims(table: pd.DataFrame, cohorts=None) -> pd.DataFrame:
    order = {c: i for i, c in enumerate(cohorts or dict.fromkeys(table["cohort"]))}
    claim_order = {c: i for i, c in enumerate(CLAIMS)}
    return (table.assign(_c=table["cohort"].map(order).fillna(len(order)), _k=table["claim"].map(claim_order),
                         _i=np.arange(len(table)))
            .sort_values(["_c", "_k", "_i"]).drop(columns=["_c", "_k", "_i"]))


def claims_lines(table: pd.DataFrame, cohorts=None) -> list[str]:
    """The claims section: what each claim asks and how it is decided, then one row per (cohort, cell, claim)."""
    if table is None or table.empty:
        return [HEADING, "", "No claim was computed (no cohort's claims table was found).", ""]
    asks = "; ".join(f"**{name}**: {spec.question}" for name, spec in CLAIMS.items() if name in set(table["claim"]))
    lines = [HEADING, "",
             f"Each claim is decided by one test, the same in every report of study C: {asks}. A claim with a "
             "control (the random-init encoder) is tested as the paired difference against it. `p` is the test's "
             "two-sided p-value (the attribute's one-sided: L_A subtracts the larger of two controls, so it lies "
             "below 0 on embeddings that carry nothing, and only above 0 answers the claim); `p_Holm` is "
             "Holm-adjusted over the family named beside it (one claim on one cohort, its encoder cells; m of "
             f"them); the verdict is `yes` when p_Holm < {ALPHA:g} (`*`) with the "
             "estimate above its reference, `reverse` when it is below (e.g. pretraining *removes* identity), else "
             "`no evidence` (not `no`). The estimate's 95 % interval gives the size of the effect and does not "
             "decide the verdict: it resamples subjects, except the task's, which inverts its permutation test "
             "(the subject bootstrap keeps the fitted heads, so it undercovers; issue 46). `links` "
             "says what an identity row links (never compare a link within one recording with one across runs). "
             "Each test's measured size on null data shaped like its cohort is a row of `reports/calibration.md`; "
             "`normal approx.` marks the claims decided from the interval, which are not exact (see their rows "
             f"there). {ATTRIBUTE_FAILS}",
             "", "*Table: one row per (cohort, encoder, claim); the encoders' weights (third column): "
             + "; ".join(dict.fromkeys(table["provenance"])) + ".*",
             "", HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    lines += [claim_row(r) for r in sort_claims(table, cohorts).to_dict("records")]
    return lines + [""]


def parse_claims(markdown: str) -> dict[tuple[str, str, str], tuple[str, str, str, str]]:
    """(cohort, encoder, claim) -> (test, p, p_Holm with family, verdict) of the claims table in a report: what the
    consistency test compares between reports."""
    out, inside = {}, False
    for line in markdown.splitlines():
        if line.startswith("## "):
            inside = line.strip() == HEADING
            continue
        if inside and line.startswith("| ") and not line.startswith(HEADER[:10]):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == HEADER.count("|") - 1:
                out[(cells[0], cells[1], cells[3])] = (cells[7], cells[8], cells[9], cells[10])
    return out
