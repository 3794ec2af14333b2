"""Study C's claims (issue 35): one test per claim, a Holm family per (cohort, claim), paired tests where a claim has
a control, identity rows labelled by what they link -- and every report printing the same test, p and verdict.

FIXTURES: SYNTHETIC tidy rows written here (no result), and the committed reports, which must agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eegprivacy.reporting.claims import claims_lines, parse_claims
from eegprivacy.studies.embedding_audit.claims import (
    CLAIMS,
    claims_for_run,
    claims_from_runs,
    claims_table,
    interval_p_value,
)
from eegprivacy.studies.embedding_audit.config import IDENTITY_LINKS
from eegprivacy.studies.embedding_audit.units import encoder_label

REPO = Path(__file__).resolve().parents[1]
CELLS = [("bandpower", "none"), ("biot", "self_pretrained"), ("biot", "random_init")]
DESIGN = {"identity": "halves", "identity_link": IDENTITY_LINKS["halves"], "subject_level_task": True}


def _row(e, w, unit, metric, value, ci=(np.nan, np.nan), seed=0, chance=np.nan, defense="none"):
    return {"encoder": e, "weights": w, "unit": unit, "endpoint": unit, "split": "s", "defense": defense,
            "attacker": "a", "metric": metric, "value": value, "ci_low": ci[0], "ci_high": ci[1], "seed": seed,
            "chance": chance, "n": 10.0, "eps_unit": "none"}


def _tidy(diagnosis_p=(0.001, 0.001, 0.3)) -> pd.DataFrame:
    """SYNTHETIC rows of three cells on a diagnosis cohort: the p-values the claims must carry unchanged."""
    rows = []
    for (e, w), p in zip(CELLS, diagnosis_p):
        rows += [_row(e, w, "subject_label", "balanced_accuracy", 0.7, (0.6, 0.8), chance=0.5),
                 _row(e, w, "subject_label", "control_permuted", 0.5),
                 _row(e, w, "subject_label", "p_value", p),
                 _row(e, w, "subject_label", "n_permutations", 1000),
                 _row(e, w, "identity", "bpid_at_1", 0.5, (0.4, 0.6), chance=1 / 76),
                 _row(e, w, "identity", "p_value", 1e-4), _row(e, w, "identity", "n_permutations", 9999),
                 _row(e, w, "identity", "exact", 0.0),
                 _row(e, w, "attribute/subject_disjoint", "gain", 0.9, (0.85, 0.95))]
    e, w = CELLS[1]
    for seed in (0, 1):  # only the first member-draw seed carries the paired membership test
        rows += [_row(e, w, "membership", "within_subject_auc_minus_control", 0.1 + seed, (0.05, 0.15), seed),
                 _row(e, w, "membership", "paired_p_value", 0.004 + seed / 10, seed=seed),
                 _row(e, w, "membership", "paired_permutations", 256, seed=seed),
                 _row(e, w, "membership", "paired_exact", 1.0, seed=seed),
                 _row(e, w, "membership", "paired_subjects", 8, seed=seed)]
    unit = "claim/pretraining_adds_identity"
    rows += [_row(e, w, unit, "difference", 0.02, (-0.01, 0.05))]
    rows += [_row(e, w, unit, m, v) for m, v in (("reference", 0.48), ("p_value", 0.2), ("n_permutations", 9999),
                                                 ("exact", 0.0), ("n_units", 76))]
    return pd.DataFrame(rows)


def _claims(tidy=None) -> pd.DataFrame:
    labels = {c: encoder_label(*c) for c in CELLS}
    provenance = {c: f"provenance of {c[0]}" for c in CELLS}
    return claims_table(_tidy() if tidy is None else tidy, "msu_schizophrenia", CELLS, DESIGN, labels, provenance)


def test_each_claim_has_one_test_and_holm_runs_over_one_claim_on_one_cohort():
    claims = _claims()
    task = claims[claims["claim"] == "task"].set_index("encoder")
    assert (task["test"] == "subject-label permutation (1,000)").all()
    assert (task["m"] == 3).all() and task["family"].iloc[0] == "msu_schizophrenia: task, m = 3"
    np.testing.assert_allclose(task["p_holm"], [0.003, 0.003, 0.3])  # Holm over the three cells, not the table
    assert list(task["verdict"]) == ["yes", "yes", "no evidence"]
    # paired claims exist only on the pretrained cell and read the first member-draw seed
    member = claims[claims["claim"] == "encoder_membership"]
    assert list(member["weights"]) == ["self_pretrained"] and member["p_value"].iloc[0] == pytest.approx(0.004)
    assert member["test"].iloc[0] == "sign flips over 8 pretraining subjects (exact, 256)"
    assert member["reference"].iloc[0].startswith("random init")
    adds = claims[claims["claim"] == "pretraining_adds_identity"]
    assert list(adds["weights"]) == ["self_pretrained"] and adds["verdict"].iloc[0] == "no evidence"
    # identity rows say what they link; the others do not
    assert set(claims.loc[claims["claim"].str.contains("identity"), "link"]) == {"within one recording"}
    assert set(claims.loc[~claims["claim"].str.contains("identity"), "link"]) == {""}
    assert set(claims["claim"]) <= set(CLAIMS)


def test_no_signal_claim_is_not_a_yes():
    """A cell whose permutation p is large never reads "yes", whatever its interval says."""
    claims = _claims(_tidy(diagnosis_p=(0.6, 0.7, 0.9)))
    assert set(claims.loc[claims["claim"] == "task", "verdict"]) == {"no evidence"}


def test_interval_p_value_is_one_sided_and_nan_without_interval():
    assert interval_p_value(0.5, 0.4, 0.6, 0.5) == pytest.approx(0.5)
    assert interval_p_value(0.9, 0.85, 0.95, 0.5) < 1e-6
    assert np.isnan(interval_p_value(0.9, np.nan, np.nan, 0.5))


def test_claims_read_back_from_mlflow_render_the_same_rows():
    """What the stage logs on each parent run (``claims_for_run``) read back as the study report does gives the
    same claims table, line for line, as the one the cohort reports render from the CSV."""
    claims = _claims()
    runs = []
    for i, (e, w) in enumerate(CELLS):
        metrics, tags = claims_for_run(claims, e, w)
        runs.append({"run_id": f"{i:032x}", "tags.dataset": "msu_schizophrenia", "tags.encoder": e, "weights": w,
                     **{f"metrics.{k}": v for k, v in metrics.items()}, **{f"tags.{k}": v for k, v in tags.items()}})
    back = claims_from_runs(pd.DataFrame(runs), encoder_label)
    a = parse_claims("\n".join(claims_lines(claims)))
    b = parse_claims("\n".join(claims_lines(back)))
    assert a and a == b
    assert len(a) == len(claims)


def _report(name: str) -> str:
    path = REPO / "reports" / name
    if not path.exists():
        pytest.fail(f"{path} is missing (`dvc repro embedding_audit_cohorts` / `eegprivacy report --study c`)")
    return path.read_text()


def test_study_c_and_the_cohort_report_print_the_same_test_p_and_verdict_for_every_claim():
    """The committed reports: every claim of the cross-cohort report appears in study-c.md with the same test,
    p, p_Holm (family) and verdict, and the other way round."""
    study = parse_claims(_report("study-c.md"))
    cohorts = parse_claims(_report("embedding_audit_cohorts.md"))
    assert study, "study-c.md has no claims table"
    assert study.keys() == cohorts.keys()
    differ = {k: (study[k], cohorts[k]) for k in study if study[k] != cohorts[k]}
    assert not differ, differ


def test_committed_claims_meet_the_protocol():
    """MSU's diagnosis cells ran ≥ 1,000 permutations (p ≥ 1/1001, so Holm over its cells can pass), every
    claim with a control is a paired test, and every identity row carries its link."""
    claims = parse_claims(_report("embedding_audit_cohorts.md"))
    msu = {k: v for k, v in claims.items() if k[0] == "msu_schizophrenia" and k[2] == "task"}
    assert len(msu) >= 7
    for test, p, _, _ in msu.values():
        assert test.startswith("subject-label permutation (") and int(test.split("(")[1].rstrip(")")
                                                                       .replace(",", "")) >= 1000
        assert float(p) >= 1 / 1001 - 1e-12
    paired = {k: v for k, v in claims.items() if k[2] in ("encoder_membership", "pretraining_adds_identity")}
    assert paired and all(v[0].startswith("sign flips") for v in paired.values())
    text = _report("embedding_audit_cohorts.md")
    for line in text.splitlines():
        if line.startswith("| ") and "| identity |" in line:
            assert any(link in line for link in IDENTITY_LINKS.values()), line


def test_a_significant_difference_below_the_control_reads_reverse_not_no_evidence():
    """Issue 46: the claims are two-sided. A pretrained encoder whose BPID@1 is far *below* its random-init twin
    (EEGPT on one cohort: −0.365) is a finding in the other direction ("reverse"), not "no evidence"; a small p
    above the reference stays "yes"."""
    tidy = _tidy()
    unit = tidy["unit"] == "claim/pretraining_adds_identity"
    tidy.loc[unit & (tidy["metric"] == "difference"), ["value", "ci_low", "ci_high"]] = [-0.365, -0.45, -0.28]
    tidy.loc[unit & (tidy["metric"] == "p_value"), "value"] = 1e-4
    adds = _claims(tidy).set_index("claim").loc["pretraining_adds_identity"]
    assert (adds["direction"], adds["verdict"]) == ("below", "reverse")
    task = _claims(tidy).query("claim == 'task'")
    assert set(task["direction"]) == {"above"} and list(task["verdict"]) == ["yes", "yes", "no evidence"]


def test_a_window_label_task_names_what_its_null_permutes_and_the_attribute_test_has_one_side():
    """SYNTHETIC: a cohort without a subject-level label decides its task on the ``window_label`` unit, the test
    named by what it permutes (a subject's recordings' labels, or a run's cues'), the interval the one that
    inverts it; an attribute gain far *below* 0 is "no evidence", not "reverse" (L_A subtracts the larger of two
    controls: below 0 is where a null lies, not a finding)."""
    tidy = _tidy()
    tidy = tidy[tidy["unit"] != "subject_label"]
    rows = []
    for e, w in CELLS:
        rows += [_row(e, w, "window_label", "balanced_accuracy", 0.62, (0.55, 0.69), chance=0.5),
                 _row(e, w, "window_label", "control_permuted", 0.5), _row(e, w, "window_label", "p_value", 0.002),
                 _row(e, w, "window_label", "n_permutations", 1000),
                 _row(e, w, "window_label", "label_per_recording", 0.0 if e == "bandpower" else 1.0)]
    tidy = pd.concat([tidy, pd.DataFrame(rows)], ignore_index=True)
    gain = (tidy["unit"] == "attribute/subject_disjoint") & (tidy["encoder"] == "bandpower")
    tidy.loc[gain, ["value", "ci_low", "ci_high"]] = [-0.3, -0.4, -0.2]
    claims = _claims(tidy).set_index(["encoder", "weights", "claim"])
    assert claims.loc[("bandpower", "none", "task"), "test"] == "cue-label permutation within each run (1,000)"
    assert claims.loc[("biot", "self_pretrained", "task"), "test"] == \
        "recording-label permutation within each subject (1,000)"
    assert (claims.xs("task", level="claim")["ci_over"] == "label permutations").all()
    attribute = claims.loc[("bandpower", "none", "attribute")]
    assert attribute["p_value"] > 0.99 and attribute["verdict"] == "no evidence"
