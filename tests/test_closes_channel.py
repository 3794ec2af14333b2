"""The "closes the channel" verdict (study C, issue 20): utility judged relative to the undefended utility above
chance, undecided where there is no utility to keep, every attacker must fail; and the cells that write it.

Labelled synthetic: the verdict tests use hand-set intervals and accuracies; the cell tests use random windows of
10 synthetic subjects whose embeddings carry the state."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from eegprivacy.embeddings.defenses import (
    UtilityResult,
    channel_verdict,
    closes_channel,
    has_utility,
    utility_kept,
    utility_with_controls,
)
from eegprivacy.studies.embedding_audit.cells import RELEASE_HALF, core_rows, defense_rows, dp_head_rows
from eegprivacy.studies.embedding_audit.config import EmbeddingAuditConfig
from eegprivacy.studies.embedding_audit.context import Context
from eegprivacy.studies.embedding_audit.data import AuditData

REPO = Path(__file__).resolve().parents[1]
CLOSED, OPEN = (-0.05, 0.03), (0.05, 0.2)  # L_A intervals: reaches 0 / excludes 0 from above


def undefended(ba: float, ci: tuple, gaussian: float = 0.5, permuted: float = 0.49) -> UtilityResult:
    """A synthetic undefended utility result."""
    return UtilityResult(ba, ci, gaussian, permuted, n_windows=600, n_subjects=20)


def test_yes_where_the_absolute_bar_could_only_say_no():
    """eegmat's undefended utility is 0.51-0.58: below 0.6, so the old rule could never say yes."""
    base = undefended(0.57, (0.53, 0.61))
    v = channel_verdict([CLOSED, CLOSED], 0.55, base, kept_threshold=0.5, absolute_threshold=0.6)
    assert v.closes is True and v.as_value() == 1.0
    assert v.closes_absolute is False and not closes_channel(CLOSED, 0.55, 0.6)
    assert v.kept == pytest.approx((0.55 - 0.5) / (0.57 - 0.5))


def test_no_when_utility_is_lost_or_any_attacker_still_leaks():
    base = undefended(0.57, (0.53, 0.61))
    lost = channel_verdict([CLOSED], 0.51, base, kept_threshold=0.5)
    assert lost.closes is False and lost.as_value() == 0.0 and lost.reason == "utility lost"
    # one attacker (say the Wiener one) still leaks: the channel is open, whatever the others do
    leaks = channel_verdict([CLOSED, OPEN], 0.57, base, kept_threshold=0.5)
    assert leaks.closes is False and not leaks.leakage_closed
    # open leakage is a no even where there is no utility to keep
    assert channel_verdict([OPEN], 0.5, undefended(0.52, (0.47, 0.57))).closes is False
    assert channel_verdict([(np.nan, np.nan)], 0.57, base).closes is False  # no interval: nothing shown closed


def test_undecided_without_utility_to_keep():
    # the undefended utility's interval reaches chance: nothing to keep, so neither yes nor a forced no
    v = channel_verdict([CLOSED], 0.55, undefended(0.54, (0.48, 0.60)))
    assert v.closes is None and math.isnan(v.as_value()) and v.reason.startswith("undecided")
    # above chance but not above its own (biased) control: undecided as well
    biased = undefended(0.60, (0.56, 0.64), permuted=0.58)
    assert not has_utility(biased) and channel_verdict([CLOSED], 0.6, biased).closes is None
    assert math.isnan(utility_kept(0.55, 0.5)) and utility_kept(0.5, 0.6) == pytest.approx(0.0)


def test_verdict_checks_its_inputs():
    base = undefended(0.57, (0.53, 0.61))
    with pytest.raises(ValueError, match="at least one attacker"):
        channel_verdict([], 0.55, base)
    with pytest.raises(ValueError, match="kept_threshold"):
        channel_verdict([CLOSED], 0.55, base, kept_threshold=0.0)


def test_has_utility_on_embeddings_that_carry_the_task_and_on_noise():
    """Synthetic: 12 subjects x 20 windows; the state shifts the embedding (utility) or not (none)."""
    from eegprivacy.embeddings.splits import SubjectDisjointSplit

    rng = np.random.default_rng(0)
    groups, y = np.repeat(np.arange(12), 20), np.tile([0, 1], 120)
    split = SubjectDisjointSplit(4, random_state=0)
    real = utility_with_controls(rng.standard_normal((240, 6)) + 1.5 * y[:, None], y, groups, split, random_state=0)
    noise = utility_with_controls(rng.standard_normal((240, 6)), y, groups, split, random_state=0)
    assert has_utility(real) and not has_utility(noise)


# ------------------------------------------------------------------ the cells that write the verdict

@pytest.fixture(scope="module")
def ctx():
    """Context of a synthetic 10-subject audit whose embeddings carry the state (small DP head settings)."""
    params = yaml.safe_load((REPO / "params" / "embedding_audit.yaml").read_text())["embedding_audit"]
    params["defenses"]["dp_head"].update(epochs=2)
    params["splits"]["subject_disjoint"]["n_splits"] = 5
    config = EmbeddingAuditConfig.from_mapping(params, "test", "embedding_audit.")
    rng = np.random.default_rng(0)
    subjects, per_state, sfreq = 10, 6, 64.0
    subject = np.repeat([f"S{i:02d}" for i in range(subjects)], 2 * per_state)
    state = np.tile(np.repeat([0, 1], per_state), subjects)
    order = np.tile(np.arange(per_state), 2 * subjects)
    X = rng.standard_normal((subject.size, 2, int(4 * sfreq))) * 1e-5
    data = AuditData(X=X, subject=subject, state=state, order=order, role=np.full(subject.size, "audit"),
                     sfreq=sfreq, ch_names=["Cz", "Pz"])
    Z = rng.standard_normal((subject.size, 8)) + 1.5 * state[:, None]
    A = rng.standard_normal((subject.size, 3))
    return Context(Z, data, config, {"Z": Z}, targets=(A, np.zeros((subject.size, 2))))


def _rows(rows, metric, **where):
    out = [r for r in rows if r["metric"] == metric and all(r[k] == v for k, v in where.items())]
    assert len(out) == 1, (metric, where, out)
    return out[0]


def test_defense_rows_judge_against_the_deployment_utility_and_need_all_attackers(ctx, torch_one_thread):
    rows = defense_rows("defense/noise/3", 0, ctx)
    verdict = _rows(rows, "closes_channel")
    assert verdict["attacker"] == "all_attackers"
    assert {r["metric"] for r in rows} >= {"closes_channel_absolute", "closes_channel_undecided", "utility_kept",
                                          "undefended_control_gaussian", "undefended_control_permuted"}
    base = _rows(rows, "undefended_balanced_accuracy")
    deployment = _rows(core_rows("deployment/0", 0, ctx), "balanced_accuracy")
    assert base["value"] == deployment["value"] and base["ci_low"] == deployment["ci_low"]  # the same utility
    defended = _rows(rows, "balanced_accuracy", endpoint="utility")["value"]
    assert _rows(rows, "utility_kept")["value"] == pytest.approx((defended - 0.5) / (base["value"] - 0.5))
    assert ("undefended_utility", "subject_disjoint", 0) in ctx.memo  # computed once, shared


def test_dp_head_rows_compare_on_the_same_release_half(ctx, torch_one_thread):
    rows = dp_head_rows(1.0, 0, ctx)
    base = _rows(rows, "undefended_balanced_accuracy")
    assert base["split"] == RELEASE_HALF
    rel = ~ctx.head_rows_for(0)
    expected = utility_with_controls(ctx.Z[rel], ctx.state[rel], ctx.groups[rel],
                                     ctx.splitter("subject_disjoint", 0, ctx.groups[rel]),
                                     n_bootstrap=ctx.config.bootstrap, random_state=0)
    assert base["value"] == expected.balanced_accuracy and base["n"] == rel.sum()
    spent = _rows(rows, "epsilon_spent")
    assert spent["eps_unit"] == "subject" and 0 < spent["value"] <= 1.0 + 1e-6
    assert all(r["eps_unit"] == "none" for r in rows if not r["metric"].startswith("epsilon"))


# ------------------------------------------------------------------ the report

def _summary_row(unit, endpoint, metric, value, *, defense="none", attacker="none", ci=(np.nan, np.nan),
                 eps_unit="none"):
    return {"encoder": "bandpower", "weights": "none", "unit": unit, "endpoint": endpoint, "split": "s",
            "defense": defense, "attacker": attacker, "metric": metric, "value": value, "ci_low": ci[0],
            "ci_high": ci[1], "eps_unit": eps_unit, "chance": np.nan, "seeds": 3}


def test_report_prints_verdicts_epsilon_units_and_holm():
    """Synthetic summary rows: a window-level DP head (ε 1 per window, vacuous subject bound), a noise defense
    that closes, and two L_A p-values corrected together."""
    import pandas as pd

    from eegprivacy.reporting.embedding_audit import _defense_lines, leakage_holm

    dp, nz = "defense/dp_head/1", "defense/noise/3"
    rows = [_summary_row(dp, "attribute", "gain", 0.01, defense="dp_head_eps1", attacker="ridge", ci=(-0.1, 0.1)),
            _summary_row(dp, "defense", "epsilon_spent", 1.0, defense="dp_head_eps1", eps_unit="window"),
            _summary_row(dp, "defense", "epsilon_subject_bound", 25.0, defense="dp_head_eps1", eps_unit="subject"),
            _summary_row(dp, "defense", "delta_subject_bound", 6.6e6, defense="dp_head_eps1", eps_unit="subject"),
            _summary_row(dp, "defense", "closes_channel", np.nan, defense="dp_head_eps1"),
            _summary_row(dp, "defense", "closes_channel_undecided", 1.0, defense="dp_head_eps1"),
            _summary_row(dp, "defense", "closes_channel_absolute", 0.0, defense="dp_head_eps1"),
            _summary_row(nz, "attribute", "gain", 0.0, defense="noise_3", attacker="ridge", ci=(-0.1, 0.1)),
            _summary_row(nz, "defense", "closes_channel", 1.0, defense="noise_3"),
            _summary_row(nz, "defense", "closes_channel_absolute", 0.0, defense="noise_3"),
            _summary_row(nz, "defense", "undefended_balanced_accuracy", 0.57, defense="noise_3", ci=(0.53, 0.61)),
            _summary_row(nz, "defense", "undefended_control_gaussian", 0.50, defense="noise_3"),
            _summary_row(nz, "defense", "undefended_control_permuted", 0.49, defense="noise_3"),
            _summary_row("attribute/temporal_gap", "attribute", "p_value", 0.01),
            _summary_row("attribute/subject_disjoint", "attribute", "p_value", 0.04)]
    summary = pd.DataFrame(rows)
    cells = [("bandpower", "none")]
    text = "\n".join(_defense_lines(summary, cells, {"defense_seeds": 3, "utility_threshold": 0.6,
                                                     "utility_kept": 0.5}))
    assert "1.00 per window; per subject ≤ 25.0 (k = 25 windows, δ_k = 6.6e+06) (vacuous: δ_k ≥ 1)" in text
    assert "undecided: no utility to keep" in text and "yes, every seed" in text
    assert "0.57 [0.53, 0.61] (0.50 / 0.49)" in text and "absolute bar 0.6" in text
    tests = leakage_holm(summary, cells)
    assert tests[("bandpower", "none", "temporal_gap")] == pytest.approx((0.01, 0.02))
    assert tests[("bandpower", "none", "subject_disjoint")] == pytest.approx((0.04, 0.04))
