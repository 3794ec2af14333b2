"""Study C's claims, one test each: what a report may say "yes" to, the test that decides it, and its Holm family.

Every report of study C (``reports/embedding_audit_<cohort>.md``, ``reports/embedding_audit_cohorts.md`` and
``reports/study-c.md``) prints the rows this module builds, so a claim reads the same test, p-value and verdict
wherever it appears. A claim is asked once per audited (encoder, weights) cell of a cohort:

============================  =======================================================  ==============================
claim                         test (what the null keeps)                               cells
============================  =======================================================  ==============================
``task`` (subject-level       subject-label permutation: the subjects' labels permuted  every cell
label, e.g. MSU's diagnosis)  once across all folds and the cross-fitted pipeline rerun
                              (exact under the null; ``subject_label_permutations``)
``task`` (window label)       label permutation within a subject's recordings (eegmat:  every cell
                              a recording's state) or within a run's cues (eegmmidb: a
                              cue's side), the cross-fitted pipeline rerun (exact;
                              ``window_label_permutations``)
``identity``                  reference labels permuted between subjects, guesses      every cell
                              fixed (exact under exchangeable reference sets)
``pretraining_adds_identity`` paired: BPID@1 of the pretrained minus the random-init   neural cells with a random-init
                              encoder on the same queries, sign flips per query        twin
                              subject
``attribute``                 L_A's subject-bootstrap interval against 0, upper tail   every cell
                              only (a gain over the larger of two controls; normal
                              approximation)
``head_membership``           member subjects permuted, scores fixed (LiRA where it    every cell
                              ran; the first member draw); exact under the null
``encoder_membership``        paired: within-subject AUC of the pretrained minus the   pretrained neural cells
                              random-init encoder, sign flips per pretraining subject
============================  =======================================================  ==============================

A claim that has a control is tested as the paired difference against it (the random-init encoder), never against
chance. Every test but the attribute's is two-sided (issue 46: a pretrained encoder that *removes* identity against
its random-init twin is a finding, not "no evidence"), its p twice the smaller tail. The attribute claim's is
one-sided (above 0), argued: L_A is the score minus the *larger* of two noisy controls, so on embeddings that carry
nothing about the attribute it lies below 0 by construction (a two-sided test of "L_A = 0" rejected 0.35 of such
nulls, nearly all below); below 0 is no finding, so only the upper tail asks the claim's question; ``direction``
says which side of its reference the estimate lies. The Holm family is one claim on one cohort (its encoder cells):
``m`` is printed with every p. ``yes`` means Holm-adjusted p < α with the estimate above its reference, ``reverse``
the same below it; anything else is ``no evidence`` (an interval that reaches its reference does not show the
absence of leakage). The estimate is printed with its 95 % interval (the size of the effect): over subjects, except
the task claim's, which inverts its permutation test (``ci_over`` = "label permutations": the subject bootstrap
keeps the fitted heads and undercovered); the verdict comes from the test, not from the interval. Each test's
measured size on null data shaped like the cohort is a row of ``reports/calibration.md`` (stage ``calibration``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.evaluation.cluster_bootstrap import holm
from eegprivacy.evaluation.intervals import interval_p_value

ALPHA = 0.05
# the task claim's interval: the permutation test inverted under a shift (the subject bootstrap keeps the fitted
# heads and covered chance 0.87 of the time on cohort-shaped nulls; issue 46)
TASK_CI_OVER = "label permutations"
YES, NO_EVIDENCE, REVERSE = "yes", "no evidence", "reverse"
COLUMNS = ["cohort", "encoder", "weights", "cell", "provenance", "claim", "question", "link", "estimate",
           "ci_low", "ci_high", "ci_over", "reference", "test", "p_value", "family", "m", "p_holm", "verdict",
           "direction"]


@dataclass(frozen=True)
class ClaimSpec:
    """One claim: the question in words and what its estimate is read against."""

    question: str
    reference: str


CLAIMS = {
    "task": ClaimSpec("is the task label decodable from held-out subjects' embeddings? (balanced accuracy)",
                      "permuted-label null"),
    "identity": ClaimSpec("does a query window identify its subject among the reference set? (BPID@1)",
                          "chance 1/K"),
    "pretraining_adds_identity": ClaimSpec(
        "does pretraining add identity beyond the random-init encoder? (BPID@1 difference)", "random init"),
    "attribute": ClaimSpec("is the centred-PSD attribute decodable on held-out subjects? (L_A, a gain over its "
                           "Gaussian and permuted controls; it fails only for embeddings that keep almost nothing "
                           "of the window's spectrum, as the claims section says)", "0 (controls subtracted)"),
    "head_membership": ClaimSpec(
        "were a subject's windows in the downstream head's training set? (membership AUC, the first member draw)",
        "chance 0.5"),
    "encoder_membership": ClaimSpec(
        "were a subject's windows in the encoder's pretraining? (within-subject AUC difference)", "random init"),
}


#: What it would take for the attribute claim to fail, printed with it (issue 46: its controls make it nearly true
#: by construction). Its controls are Gaussian embeddings and permuted training rows, so L_A > 0 asks only whether
#: the embeddings carry *some* of the window's centred spectrum beyond noise, which every encoder whose output
#: depends on its input does: the claim is a floor, not a finding.
ATTRIBUTE_FAILS = ("The attribute claim fails (no evidence) only when L_A's interval reaches 0: when a ridge "
                   "attacker reads held-out windows' centred band powers from the embeddings no better than from "
                   "Gaussian embeddings or from rows permuted against their labels, i.e. when the embedding keeps "
                   "almost nothing of the window's spectrum (a constant or spectrum-blind encoder). Any encoder whose "
                   "output depends on its input passes it, so a `yes` says the spectrum survives, not that it "
                   "survives more than in another encoder; compare the L_A values across encoders for that.")


def _permutation_text(kind: str, n: float, exact: float, units: str = "") -> str:
    count = f"{int(n):,}" if np.isfinite(n) else "?"
    how = f"exact, {count}" if exact == 1 else count
    return f"{kind}{units} ({how})"


def _get(tidy: pd.DataFrame, e: str, w: str, unit: str, metric: str, seed: int | None = None, **where):
    m = (tidy["encoder"] == e) & (tidy["weights"] == w) & (tidy["unit"] == unit) & (tidy["metric"] == metric)
    for k, v in where.items():
        m &= tidy[k].astype(str) == str(v)
    if seed is not None:
        m &= tidy["seed"] == seed
    part = tidy[m]
    return None if part.empty else part.iloc[0]


def _v(r, column: str = "value") -> float:
    return float("nan") if r is None else float(r[column])


def _entry(claim: str, estimate, low, high, reference: str, test: str, p: float, at: float,
           ci_over: str = "subjects", link: str = "") -> dict:
    """One claim's row; ``at`` is the reference's value, the side of which the estimate lies on (``direction``)."""
    estimate = float(estimate)
    direction = "" if not (np.isfinite(estimate) and np.isfinite(at)) else ("above" if estimate >= at else "below")
    return {"claim": claim, "question": CLAIMS[claim].question, "estimate": estimate, "ci_low": float(low),
            "ci_high": float(high), "ci_over": ci_over if np.isfinite(low) else "none", "reference": reference,
            "test": test, "p_value": float(p), "link": link, "direction": direction}


def cell_claims(tidy: pd.DataFrame, e: str, w: str, design: dict, first_seed: int = 0) -> list[dict]:
    """The claims of one (encoder, weights) cell, from its tidy rows (``pretraining_adds_identity`` rows are the
    ``claim/pretraining_adds_identity`` unit :func:`paired_identity_rows` adds)."""
    out = []
    for unit in ("subject_label", "window_label"):
        ba = _get(tidy, e, w, unit, "balanced_accuracy")
        if ba is None:
            continue
        test = ("subject-label permutation" if unit == "subject_label"
                else "cue-label permutation within each run"
                if _v(_get(tidy, e, w, unit, "label_per_recording")) == 0
                else "recording-label permutation within each subject")
        n = _v(_get(tidy, e, w, unit, "n_permutations"))
        null_mean = _v(_get(tidy, e, w, unit, "control_permuted"))
        out.append(_entry("task", ba["value"], ba["ci_low"], ba["ci_high"],
                          f"permuted-label null (mean {null_mean:.2f})", _permutation_text(test, n, 0.0),
                          _v(_get(tidy, e, w, unit, "p_value")), null_mean, ci_over=TASK_CI_OVER))
        break
    b = _get(tidy, e, w, "identity", "bpid_at_1", defense="none")
    if b is not None:
        out.append(_entry("identity", b["value"], b["ci_low"], b["ci_high"], f"chance 1/K = {b['chance']:.3f}",
                          _permutation_text("reference-label permutation",
                                            _v(_get(tidy, e, w, "identity", "n_permutations", defense="none")),
                                            _v(_get(tidy, e, w, "identity", "exact", defense="none"))),
                          _v(_get(tidy, e, w, "identity", "p_value", defense="none")), float(b["chance"]),
                          link=design.get("identity_link", "")))
    d = _get(tidy, e, w, "claim/pretraining_adds_identity", "difference")
    if d is not None:
        g = lambda m: _v(_get(tidy, e, w, "claim/pretraining_adds_identity", m))  # noqa: E731
        out.append(_entry("pretraining_adds_identity", d["value"], d["ci_low"], d["ci_high"],
                          f"random init (BPID@1 {g('reference'):.3f})",
                          _permutation_text("sign flips over ", g("n_permutations"), g("exact"),
                                            f"{int(g('n_units'))} query subjects"),
                          g("p_value"), 0.0, link=design.get("identity_link", "")))
    la = _get(tidy, e, w, "attribute/subject_disjoint", "gain")
    if la is not None:
        out.append(_entry("attribute", la["value"], la["ci_low"], la["ci_high"], "0 (controls subtracted)",
                          "interval vs reference, one-sided (normal approx.)",
                          interval_p_value(la["value"], la["ci_low"], la["ci_high"], 0.0), 0.0))
    for attacker, name in (("lira_online", "LiRA"), ("loss_threshold", "loss threshold")):
        h = _get(tidy, e, w, "membership", "auc", seed=first_seed, endpoint="membership_head", attacker=attacker)
        p = _get(tidy, e, w, "membership", "p_value", seed=first_seed, endpoint="membership_head", attacker=attacker)
        if h is not None and p is not None:  # the stronger attack when it ran (LiRA), else the loss threshold
            g = lambda metric: _v(_get(tidy, e, w, "membership", metric, seed=first_seed,  # noqa: E731
                                       endpoint="membership_head", attacker=attacker))
            out.append(_entry("head_membership", h["value"], h["ci_low"], h["ci_high"], "chance 0.5",
                              _permutation_text(f"{name}: member-subject permutation", g("n_permutations"),
                                                g("exact")), p["value"], 0.5))
            break
    m = _get(tidy, e, w, "membership", "within_subject_auc_minus_control", seed=first_seed)
    if m is not None:
        g = lambda metric: _v(_get(tidy, e, w, "membership", metric, seed=first_seed))  # noqa: E731
        out.append(_entry("encoder_membership", m["value"], m["ci_low"], m["ci_high"],
                          "random init (within-subject AUC difference 0)",
                          _permutation_text("sign flips over ", g("paired_permutations"), g("paired_exact"),
                                            f"{int(g('paired_subjects'))} pretraining subjects"),
                          g("paired_p_value"), 0.0))
    return out


def claims_table(tidy: pd.DataFrame, cohort: str, cells: list[tuple[str, str]], design: dict,
                 labels: dict, provenance: dict, alpha: float = ALPHA, first_seed: int = 0) -> pd.DataFrame:
    """Every claim of one cohort's cells with its test, p, Holm over the cohort's cells of that claim, and verdict.

    ``labels`` / ``provenance`` map (encoder, weights) to the cell's display name and to what its encoder is
    ("EEGPT architecture (0.82 M parameters), self-pretrained here: …", "published weights (sha256 …)");
    ``design`` is the cohort's :meth:`~eegprivacy.studies.embedding_audit.config.CohortConfig.describe`.
    """
    rows = []
    for e, w in cells:
        for entry in cell_claims(tidy, e, w, design, first_seed):
            rows.append({"cohort": cohort, "encoder": e, "weights": w, "cell": labels[(e, w)],
                         "provenance": provenance[(e, w)], **entry})
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("family", "m", "p_holm", "verdict")])
    if table.empty:
        return table.reindex(columns=COLUMNS)
    table["p_holm"] = np.nan
    table["m"] = 0
    for claim, part in table.groupby("claim", sort=False):
        tested = part["p_value"].notna()
        table.loc[part.index[tested], "p_holm"] = holm(part.loc[tested, "p_value"].to_numpy())
        table.loc[part.index, "m"] = int(tested.sum())
    table["family"] = [f"{cohort}: {c}, m = {m}" for c, m in zip(table["claim"], table["m"])]
    significant = table["p_holm"] < alpha
    table["verdict"] = np.where(significant & (table["direction"] == "below"), REVERSE,
                                np.where(significant, YES, NO_EVIDENCE))
    return table[COLUMNS]


def paired_identity_rows(ctx, twin, config) -> list[dict]:
    """``claim/pretraining_adds_identity`` rows of a pretrained cell: its BPID@1 minus its random-init twin's on
    the same queries, with a subject-bootstrap interval and a sign-flip test over query subjects."""
    from eegprivacy.evaluation.permutation import paired_identity_test

    a, b = ctx.bpid(), twin.bpid()
    if not np.array_equal(a.query_subjects, b.query_subjects):
        raise ValueError("the pretrained and random-init encoders were scored on different queries")
    t = paired_identity_test(a.correct, b.correct, a.query_subjects, n_permutations=config.test_permutations,
                             n_bootstrap=config.bootstrap, random_state=config.subject_seed)
    common = {"unit": "claim/pretraining_adds_identity", "endpoint": "pretraining_adds_identity",
              "split": f"reference_set_by_{ctx.cohort.identity}", "defense": "none", "attacker": "centroid_cosine",
              "seed": 0, "chance": 0.0, "n": float(a.n_queries), "eps_unit": "none"}

    def row(metric, value, ci=(np.nan, np.nan)):
        return {**common, "metric": metric, "value": float(value), "ci_low": float(ci[0]), "ci_high": float(ci[1])}

    return [row("difference", t.statistic, t.difference_ci), row("reference", b.accuracy),
            row("p_value", t.p_value_two_sided), row("n_permutations", t.n_permutations), row("exact", float(t.exact)),
            row("n_units", np.unique(a.query_subjects).size)]


NUMBERS = ("estimate", "ci_low", "ci_high", "p_value", "p_holm", "m")
TEXTS = ("question", "link", "ci_over", "reference", "test", "family", "verdict", "direction")


def claims_for_run(claims: pd.DataFrame, encoder: str, weights: str) -> tuple[dict, dict]:
    """(metrics, tags) of one cell's claims for its MLflow parent run: ``claim_<claim>_<number>`` and
    ``claim_<claim>_<text>``, plus the cell's ``provenance``; :func:`claims_from_runs` reads them back."""
    part = claims[(claims["encoder"] == encoder) & (claims["weights"] == weights)]
    metrics, tags = {}, {}
    for r in part.to_dict("records"):
        metrics |= {f"claim_{r['claim']}_{k}": float(r[k]) for k in NUMBERS if np.isfinite(float(r[k]))}
        tags |= {f"claim_{r['claim']}_{k}": str(r[k]) for k in TEXTS}
    if not part.empty:
        tags["provenance"] = str(part["provenance"].iloc[0])
    return metrics, tags


def claims_from_runs(runs: pd.DataFrame, labels) -> pd.DataFrame:
    """The claims table back from MLflow parent runs (columns ``metrics.*`` / ``tags.*`` of ``search_runs``):
    one row per run and logged claim. ``labels(encoder, weights)`` gives the cell's display name."""
    rows = []
    for run in runs.to_dict("records"):
        names = {k.removeprefix("tags.claim_").removesuffix("_test") for k in run
                 if k.startswith("tags.claim_") and k.endswith("_test") and isinstance(run[k], str)}
        for claim in (c for c in CLAIMS if c in names):
            e, w = str(run.get("tags.encoder")), str(run.get("weights") or "")
            row = {"cohort": run.get("tags.dataset"), "encoder": e, "weights": w, "cell": labels(e, w),
                   "provenance": run.get("tags.provenance"), "claim": claim}
            row |= {k: float(run.get(f"metrics.claim_{claim}_{k}", np.nan)) for k in NUMBERS}
            row |= {k: run.get(f"tags.claim_{claim}_{k}") or "" for k in TEXTS}
            rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["m"] = table["m"].fillna(0).astype(int)
    return table
