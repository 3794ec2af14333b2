"""Study B's reports: ``federated_mia_report``'s headline JSON, Tables 4-9-shaped markdown and figures (from the
summary :mod:`eegprivacy.studies.federated.report` computes), ``csp_exploration``'s PCA figure and
``optuna_study_b``'s Pareto figure. Cumulative ε (:class:`~eegprivacy.studies.federated.cumulative.Cumulative`)
stands beside every per-step ε.

One idea over about 600 lines: every output here is drawn from one summary table, ``federated_mia_report``'s, with
its cumulative-ε labels; the tables and figures share its column conventions and would import each other's helpers
if split.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import atomic_path, write_text_atomic  # noqa: E402
from eegprivacy.pipeline.keys import epsilon_key  # noqa: E402
from eegprivacy.reporting.calibration import tests_lines  # noqa: E402
from eegprivacy.reporting.figures import titled  # noqa: E402
from eegprivacy.reporting.format import DASH  # noqa: E402
from eegprivacy.reporting.paper_b import PAPER_MI2, WHY, verdict  # noqa: E402
from eegprivacy.studies.federated.cumulative import Cumulative  # noqa: E402
from eegprivacy.studies.federated.report import EPSILON_SCOPE, REGRESSIONS, family, tested  # noqa: E402

CALIBRATIONS = ("nominal", "certified")
PAPER_DATASET = "eegmmidb"  # the paper's MI2: its Tables 7-9 are quoted beside our numbers on this cohort
# What a reader must know about a cohort before reading its tables.
DATASET_NOTES = {
    "eegmmidb": ("The primary cohort: PhysioNet eegmmidb, left vs right fist motor imagery (runs 4, 8, 12), one "
                 "client per subject. The two classes alternate inside every run, so the label is not the "
                 "recording. The paper's protocol: 20 rounds × 20 local epochs, 8 clients per round, every round "
                 "attacked. With 45 trials per subject (9 non-members per client and seed), many subjects sit near "
                 "chance, as is usual for this dataset; the per-client table lists them. The default profile runs "
                 "SimpleNet here; EEGNet's paper rows run on the full profile (`make reproduce PROFILE=full`), and "
                 "its default-profile rows are the controlled table's (`reports/federated_control.md`)."),
    "eegmat": ("A second cohort with a confound: rest and mental arithmetic are two different recordings of each "
               "subject, so a model can learn the recording (its session, impedances, length) rather than the task; "
               "high utility here does not mean the task was learnt, and membership results inherit that. Run "
               "lighter (10 × 10, 3 seeds) on the default profile."),
    "synthetic_mi": ("SYNTHETIC: a generated motor-imagery cohort for testing the pipeline, never evidence about "
                     "EEG."),
}
ALPHA = 0.05


def dataset_order(datasets, synthetic: dict | None = None) -> list[str]:
    """Real cohorts before synthetic ones, the paper's cohort first, otherwise as given."""
    datasets = list(dict.fromkeys(datasets))
    synthetic = synthetic or {}
    return sorted(datasets, key=lambda d: (bool(synthetic.get(d, False)), d != PAPER_DATASET, datasets.index(d)))


def _clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


# ---- headline JSON -----------------------------------------------------------------------------------------
def headline(summary: pd.DataFrame, regressions: dict, cum: Cumulative, clients: pd.DataFrame | None = None
             ) -> dict:
    """Utility and attack scores per (dataset, model, ε[, attack, attacker]) with both spreads, chance and the
    Holm-adjusted p-value against chance, the loss-gap regressions, the clients above chance and the cumulative ε
    of every run."""
    out: dict = {"epsilon_scope": EPSILON_SCOPE, "loss_gap_vs_rla_accuracy": regressions}
    keep = summary[summary["metric"].isin(["utility_accuracy", "utility_f1", "utility_auroc", "accuracy", "auroc"])
                   & ((summary["attack"] == "") | (summary["metric"].isin(["accuracy", "auroc"])))]
    for r in keep.to_dict("records"):
        key = "/".join([r["dataset"], r["model"], f"eps_{epsilon_key(r['epsilon'])}",
                        *([r["attack"], r["attacker"]] if r["attack"] else ["utility"]),
                        r["metric"].removeprefix("utility_")])
        out[key] = {"mean": _clean(float(r["mean"])), "std_across_rounds": _clean(float(r["std"])),
                    "ci95_across_seeds": [_clean(float(r["ci_low"])), _clean(float(r["ci_high"]))],
                    "n_seeds": int(r["n_seeds"]), "chance": _clean(float(r["chance"])),
                    "p_holm": _clean(float(r.get("p_holm", float("nan")))), "synthetic": bool(r["synthetic"])}
    if clients is not None and not clients.empty:
        for (d, m, e), part in clients.groupby(["dataset", "model", "epsilon"], sort=False):
            out[f"{d}/{m}/eps_{epsilon_key(e)}/utility/clients_above_chance"] = {
                "count": int(part["above_chance"].sum()), "of": int(len(part)),
                "near_chance": [int(c) for c in part.loc[~part["above_chance"], "client"]],
                "test": "one-sided binomial vs 0.5 on the last round's accuracy averaged over seeds, on one seed's "
                        "trials over the design effect of resplit seeds, Holm over the clients"}
    out["cumulative_epsilon"] = {
        f"{d}/{m}/eps_{epsilon_key(e)}": {c: _clean(cum.value(d, m, e, c)) for c in CALIBRATIONS}
        for d, m, e in summary[["dataset", "model", "epsilon"]].drop_duplicates().itertuples(index=False)}
    out["cumulative_epsilon_scope"] = cum.note()
    return out


def write_headline(path, payload: dict) -> None:
    write_text_atomic(path, json.dumps(payload, indent=1, sort_keys=True) + "\n")


# ---- markdown tables ---------------------------------------------------------------------------------------
SMALL_SEEDS = 3  # at or below this many seeds a t-interval is marked with its degrees of freedom


def p_holm_text(p_holm: float) -> str:
    """How both study B reports print a tested cell's verdict: ``(p_Holm 0.012 *)``, ``*`` below α."""
    return f"(p_Holm {p_holm:.3f}{' *' if p_holm < ALPHA else ''})"


def _interval_mark(row) -> str:
    """What an interval rests on, where a reader should know: ``seeds`` where it is the t-interval over seeds
    (no per-client reading), with its t quantile when few seeds stand behind it ("t(2), 3 seeds"), and whether
    it was clipped to the metric's range [0, 1]."""
    marks = []
    n = int(row["n_seeds"]) if "n_seeds" in row and np.isfinite(row["n_seeds"]) else 0
    over_seeds = row.get("ci_over", "seeds") == "seeds"
    if over_seeds and n > SMALL_SEEDS:
        marks.append("seeds")
    if over_seeds and 1 < n <= SMALL_SEEDS:
        marks.append(f"{row.get('ci_method', f't({n - 1})')}, {n} seeds")
    if bool(row.get("ci_clipped", False)):
        marks.append("clipped")
    return f" ({'; '.join(marks)})" if marks else ""


def _cell(summary, dataset, model, eps, metric, attack="", attacker="", pct=True) -> str:
    hit = summary[(summary["dataset"] == dataset) & (summary["model"] == model) & (summary["epsilon"] == eps)
                  & (summary["metric"] == metric) & (summary["attack"] == attack)
                  & (summary["attacker"] == attacker)]
    if hit.empty or not np.isfinite(hit["mean"].iloc[0]):
        return DASH
    m, s = float(hit["mean"].iloc[0]), float(hit["std"].iloc[0])
    lo, hi = float(hit["ci_low"].iloc[0]), float(hit["ci_high"].iloc[0])
    k = 100.0 if pct else 1.0
    digits = 1 if pct else 2
    text = f"{k * m:.{digits}f} ± {k * s:.{digits}f}" if np.isfinite(s) else f"{k * m:.{digits}f}"
    text += f" [{k * lo:.{digits}f}, {k * hi:.{digits}f}]{_interval_mark(hit.iloc[0])}" if np.isfinite(lo) else ""
    p_holm = float(hit["p_holm"].iloc[0]) if "p_holm" in hit else float("nan")
    if np.isfinite(p_holm):
        return f"{text} {p_holm_text(p_holm)}"
    chance = float(hit["chance"].iloc[0])
    same_every_seed = np.isfinite(lo) and lo == hi == m and int(hit["n_seeds"].iloc[0]) > 1
    return text + (" †" if same_every_seed and np.isfinite(chance) and m > chance else "")


def _chance(summary, dataset, metric, attack) -> str:
    hit = summary[(summary["dataset"] == dataset) & (summary["metric"] == metric) & (summary["attack"] == attack)]
    values = hit["chance"].dropna()
    return f"{100 * values.mean():.1f}" if len(values) else DASH


def _methods(model: str, eps: float) -> str:
    name = {"simplenet": "SimpleNet", "eegnet": "EEGNet"}.get(model, model)
    return f"FL-{name}" if not math.isfinite(eps) else f"DP-FL-{name}"


def _eps_cells(cum: Cumulative, dataset: str, model: str, e: float) -> str:
    per_step = DASH if not math.isfinite(e) else f"{e:g}"
    return (f"{per_step} | {cum.text(dataset, model, e, 'nominal', 'epsilon_per_round')} | "
            f"{cum.text(dataset, model, e, 'nominal')} | {cum.text(dataset, model, e, 'certified')}")


EPS_HEADER = "| Methods | ε per step | ε per round | Σε nominal | Σε certified | "
ATTACK_COLUMNS = [("rla", "accuracy"), ("rla", "auroc"), ("fla", "accuracy"), ("fla", "auroc"),
                  ("gla_paper", "accuracy"), ("gla_paper", "auroc"), ("gla_paper", "tpr_at_fpr_0.01"),
                  ("gla_sound", "accuracy"), ("gla_sound", "auroc"), ("gla_sound", "tpr_at_fpr_0.01"),
                  ("cla", "accuracy"), ("cla", "auroc")]
CONTROL_COLUMNS = [("rla_untrained_control", "auroc"), ("fla_untrained_control", "auroc")]
GLA_SOUND_COLUMNS = [("gla_sound", "auroc"), ("gla_sound_control", "auroc"), ("gla_sound_pooled", "auroc"),
                     ("gla_sound_pooled_control", "auroc"), ("gla_sound_pooled", "min_detectable_auroc")]
PREAMBLE = [
    "# Study B: federated membership inference — tables", "",
    ("Each cell: mean ± std across federated rounds (the paper's ±: how a score moves during one run, averaged over "
     "seeds) [95 % interval of the mean over seeds of each seed's mean over rounds: the uncertainty]. CI over = "
     "subjects+seeds: the subject (one client each) is the privacy unit, so the interval is a cluster bootstrap "
     "that resamples whole clients (the same B resamples in every cell) crossed with a resample of the seeds "
     "(percentile interval). Cells marked `seeds` (CLA, whose label is the client; GLA (paper), real updates vs "
     "Gaussian vectors; and wherever a cell kept no replicates) carry the t-interval across seeds instead, `t(n−1)` "
     "with few seeds, clipped to the score's range where marked. Scores in %, losses as they are. "
     f"{EPSILON_SCOPE} Chance levels in the last row of each attack table (accuracy chance is the majority share of "
     "the attacker-test half: members are 80 % of the trials, so RLA/FLA accuracy near 80 % is no leakage; read "
     "AUROC and TPR at low FPR)."), "",
    ("`(p_Holm …)`: the one-sided test of score − chance (the bootstrap p-value on subjects+seeds cells, a "
     "one-sample t-test of the per-seed means on `seeds` cells), Holm-adjusted over its family: one family per "
     "printed table group, every tested cell of one attacker's attack tables of a dataset, or the dataset's "
     "classification table (the family and its size m are named above each); `*`: p_Holm < 0.05. "
     "reports/study-b.md prints the same p_Holm for the same cell. Controls (untrained model, sound-GLA control) "
     "are shown, never tested, never starred. Every cell is printed, significant or not; no attacker is picked "
     "after the fact. `†`: the same score in every seed and above chance (no spread, so no t-test; not in the "
     "Holm family). Only AUROC cells (and utility) are tested: an attack's accuracy moves with the member share "
     "and its TPR at 1 % FPR rests on a few non-members, so both are estimates with intervals, untested."), "",
    ("What these tests can and cannot say: each client's CSP and scaling are fitted on its members, so an attack "
     "AUROC above 0.5 here measures that preprocessing and federated training together. The test of training "
     "alone is attack − preprocessing-only control (a federation that never saw the client, scored through the "
     "client's own CSP): stage `federated_control`, the table reports/study-b.md opens with."), "",
    ("GLA (paper) classifies real client updates against Gaussian vectors matched to their mean and variance. It can "
     "score near 100 % with no membership signal at all: it detects that an update is a real update rather than "
     "noise (structure, correlations, tails the matching leaves out), which holds for updates computed on "
     "non-members just as well; under DP the noised updates look more like noise, so its fall says nothing about "
     "membership either. GLA (sound) compares updates of the same global model on equally many member and "
     "non-member trials, split by client, so membership is the only difference it can learn."), ""]


def _method_rows(part, dataset, order, cum, columns, attacker="") -> list[str]:
    """One row per (model, ε): the method, its ε columns and ``columns`` ((attack, metric) pairs)."""
    return [f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | "
            + " | ".join(_score_cell(part, dataset, m, e, metric, attack, attacker) for attack, metric in columns)
            + " |" for m, e in order]


def _score_cell(part, dataset, model, eps, metric, attack, attacker) -> str:
    """:func:`_cell`, except a TPR at an FPR the attacker-test half cannot resolve (fewer than 1/FPR negatives),
    which is printed as n.r. with the number of negatives."""
    if metric.startswith("tpr_at_fpr_") and "n_test" in part:
        fpr = float(metric.rsplit("_", 1)[1])
        negatives = _negatives(part, dataset, model, eps, attack, attacker)
        if np.isfinite(negatives) and negatives < 1.0 / fpr:
            return f"n.r. ({negatives:.0f})"
    return _cell(part, dataset, model, eps, metric, attack, attacker)


def family_caption(part: pd.DataFrame, name: str) -> str:
    """The caption line naming a table's Holm family, its size and what its intervals are over."""
    mask = tested(part)
    m = int((part[mask].apply(family, axis=1) == name).sum()) if mask.any() else 0
    over = ", ".join(sorted(set(part["ci_over"].dropna()))) if "ci_over" in part else "seeds"
    b = sorted({str(c) for c in part.get("ci_method", pd.Series(dtype=str)).dropna() if "bootstrap" in str(c)})
    text = (f"*Holm family `{name}`: m = {m} tested cells (controls shown, never tested). CI over = "
            f"{'subjects+seeds' if 'subjects+seeds' in over else over}"
            f"{' (' + '; '.join(b) + ')' if b else ''}; cells marked `seeds` are over seeds only.*")
    counts = [int(c) for method in b for c in re.findall(r"\((\d+) resamples\)", method)]
    if counts and m and m / (min(counts) + 1) >= ALPHA:  # the conventions' p-value floor, checked where printed
        text += (f" **With B = {min(counts)} resamples the smallest bootstrap p-value is 1/(B+1), so no p_Holm of "
                 f"this family can fall below {m}/(B+1) = {m / (min(counts) + 1):.3f} ≥ α = {ALPHA}: a missing `*` "
                 "here is the resample count's, not the data's (raise federated_mia.subject_bootstrap).**")
    return text


def _classification_table(part, dataset, title, order, cum) -> list[str]:
    lines = [f"## {title}: classification (shape of Tables 4/7)", "",
             family_caption(part, f"{dataset}/utility"), "",
             EPS_HEADER + "Acc | Precision | Recall | F1 | AUROC | Avg training loss | Avg testing loss |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m, e in order:
        cells = [_cell(part, dataset, m, e, f"utility_{k}") for k in ("accuracy", "precision", "recall", "f1",
                                                                    "auroc")]
        cells += [_cell(part, dataset, m, e, k, pct=False) for k in ("train_loss", "test_loss")]
        lines.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | " + " | ".join(cells) + " |")
    return lines + [""]


def _attack_tables(part, dataset, title, order, cum, attacker) -> list[str]:
    lines = [f"## {title}: attacks, {attacker.upper()} attacker (shape of Tables 5/6, 8/9)", "",
             family_caption(part, f"{dataset}/attacks/{attacker}") + " The family covers this attacker's "
             "tables below (attacks, GLA (sound), TPR at low FPR).", "",
             EPS_HEADER + "RLA Acc | RLA AUROC | FLA Acc | FLA AUROC | GLA (paper) Acc | GLA (paper) AUROC | "
             "GLA (paper) TPR@1%FPR | GLA (sound) Acc | GLA (sound) AUROC | GLA (sound) TPR@1%FPR | "
             "CLA Acc | CLA AUROC |",
             "| --- | --- | --- | --- | --- |" + " --- |" * 12]
    lines += _method_rows(part, dataset, order, cum, ATTACK_COLUMNS, attacker)
    lines.append("| chance | | | | | " + " | ".join(_chance(part, dataset, metric, attack)
                                                   for attack, metric in ATTACK_COLUMNS) + " |")
    lines.append("")
    if (part["attack"] == CONTROL_COLUMNS[0][0]).any():
        lines += [(f"Negative control, {attacker.upper()} attacker: RLA and FLA on the untrained initial model (it "
                   "has seen no trial; anything above chance comes from each client's member-fitted CSP, not from "
                   "training)."), "",
                  EPS_HEADER + "RLA AUROC (untrained) | FLA AUROC (untrained) |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += _method_rows(part, dataset, order, cum, CONTROL_COLUMNS, attacker)
        lines.append("")
    if (part["attack"] == "gla_sound_pooled").any():
        lines += [(f"GLA (sound), {attacker.upper()} attacker, beside its control and pooled. Control: the same "
                   "attack on updates of the untrained initial global model, computed on the same member and "
                   "non-member batches with the same local seeds (what the data and each client's member-fitted "
                   "CSP alone give away). Per round the attacker-test half holds about 4 member and 4 non-member "
                   "updates, too few to detect any AUROC; pooled: every attacked round of a seed in one test, "
                   "split by client. Min. detectable AUROC: the smallest true AUROC the pooled test detects with "
                   "power 80 % at one-sided α = 0.05 (normal approximation, null variance; above 100 = none)."), "",
                  EPS_HEADER + "GLA (sound) AUROC per round | control per round | pooled | pooled control | "
                  "pooled: min. detectable AUROC |", "| --- | --- | --- | --- | --- |" + " --- |" * 5]
        lines += _method_rows(part, dataset, order, cum, GLA_SOUND_COLUMNS, attacker)
        lines.append("")
    return lines


def _regression_lines(regressions: dict, dataset: str) -> list[str]:
    lines = []
    for attacker, metric in REGRESSIONS:
        reg = regressions.get(f"{dataset}/rla_{metric}_{attacker}")
        what = f"RLA {metric} ({attacker.upper()} attacker)"
        if reg and "error" in reg:
            lines += [f"Loss gap vs {what}: no regression ({reg['error']}).", ""]
        elif reg:
            lines += [(f"Loss gap (test − train loss) vs {what}, OLS over rounds and cells: slope "
                       f"{reg['slope']:.3g}, R² = {reg['r2']:.3f}, p = {reg['p_value']:.3g}, n = {reg['n']} "
                       "(successive rounds are autocorrelated: p is optimistic)."), ""]
    return lines


def _epsilon_order(epsilons) -> list:
    """∞ first, then ε from large to small."""
    return sorted(epsilons, key=lambda x: (math.isfinite(x), -x))


def _client_table(clients: pd.DataFrame, dataset: str, title: str, order, cum) -> list[str]:
    """Per (model, ε): how many clients the final global model serves above chance, and which it leaves near it."""
    part = clients[clients["dataset"] == dataset] if clients is not None and not clients.empty else pd.DataFrame()
    if part.empty:
        return []
    lines = [f"## {title}: utility per client (last round, each client's non-members)", "",
             ("Per client, the last round's accuracy on its non-members averaged over seeds, read as a count on "
              "one seed's trials divided by the design effect 1/S + (1 − 1/S)·f (S seeds, f the non-member share: "
              "each seed splits the same trials anew, so pooling the seeds' predictions counted a shared trial "
              "several times and rejected too often: [`study_b.client_utility`](calibration.md"
              "#cal-study-b-client-utility)); above chance = one-sided binomial test against 0.5, Holm over the "
              "clients of the row. The clients near chance are listed by index, not averaged away."), "",
             EPS_HEADER + "clients above chance | median client accuracy [range] | near chance (client index) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m, e in order:
        one = part[(part["model"] == m) & (part["epsilon"] == e)]
        if one.empty:
            continue
        acc = 100 * one["accuracy"]
        near = ", ".join(str(c) for c in one.loc[~one["above_chance"], "client"]) or "none"
        lines.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | {int(one['above_chance'].sum())} of "
                     f"{len(one)} | {acc.median():.1f} [{acc.min():.1f}, {acc.max():.1f}] | {near} |")
    return lines + [""]


def with_test_sizes(summary: pd.DataFrame, tidy: pd.DataFrame) -> pd.DataFrame:
    """``n_test``: the mean attacker-test size of each attack score (what a low-FPR TPR can resolve)."""
    keys = ["dataset", "model", "epsilon", "attack", "attacker", "metric"]
    rows = tidy[tidy["attack"].fillna("") != ""].copy()
    if rows.empty or "n" not in rows:
        return summary.assign(n_test=np.nan)
    for column in ("attack", "attacker"):
        rows[column] = rows[column].fillna("")
    sizes = rows.groupby(keys)["n"].mean().rename("n_test").reset_index()
    return summary.drop(columns=["n_test"], errors="ignore").merge(sizes, on=keys, how="left")


LOW_FPR = (("tpr_at_fpr_0.01", 0.01), ("tpr_at_fpr_0.001", 0.001))


def _negatives(part, dataset, model, eps, attack, attacker) -> float:
    """Negatives (non-members, or the negative class) in one attacker-test half: its size times one minus the
    accuracy chance (the majority share)."""
    hit = part[(part["dataset"] == dataset) & (part["model"] == model) & (part["epsilon"] == eps)
               & (part["attack"] == attack) & (part["attacker"] == attacker) & (part["metric"] == "accuracy")]
    if hit.empty or "n_test" not in hit:
        return float("nan")
    return float(hit["n_test"].iloc[0]) * (1.0 - float(hit["chance"].iloc[0]))


def _low_fpr_table(part, dataset, title, order, cum, attacker) -> list[str]:
    """TPR at 1 % and 0.1 % FPR of every per-round attack, printed only where the attacker-test half holds enough
    negatives to resolve that FPR (≥ 1 / FPR); otherwise "n.r." with the count."""
    attacks = [a for a in ("rla", "fla", "gla_paper", "gla_sound") if (part["attack"] == a).any()]
    if not attacks:
        return []
    head = " | ".join(f"{a.upper().replace('_PAPER', ' (paper)').replace('_SOUND', ' (sound)')} TPR@{f * 100:g}%FPR"
                      for a in attacks for _, f in LOW_FPR)
    lines = [f"### {title}: TPR at low FPR, {attacker.upper()} attacker", "",
             ("A TPR at FPR f needs at least 1/f negatives in the attacker-test half; below that the cell says "
              "n.r. (not resolvable) with the mean number of negatives."), "",
             EPS_HEADER + head + " |", "| --- | --- | --- | --- | --- |" + " --- |" * (len(attacks) * len(LOW_FPR))]
    rows, resolvable, most = [], False, 0.0
    for m, e in order:
        cells = []
        for a in attacks:
            negatives = _negatives(part, dataset, m, e, a, attacker)
            most = max(most, negatives) if np.isfinite(negatives) else most
            for metric, fpr in LOW_FPR:
                if not np.isfinite(negatives) or negatives < 1.0 / fpr:
                    cells.append(f"n.r. ({negatives:.0f})" if np.isfinite(negatives) else DASH)
                else:
                    resolvable = True
                    cells.append(_cell(part, dataset, m, e, metric, a, attacker))
        rows.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | " + " | ".join(cells) + " |")
    if not resolvable:
        return [f"TPR at 1 % / 0.1 % FPR, {attacker.upper()} attacker: not resolvable for any per-round attack on "
                f"{title} (at most {most:.0f} negatives in an attacker-test half; 1 % needs ≥ 100, 0.1 % ≥ 1,000). "
                "The pooled LiRA (reports/federated_lira.md) reports the TPR its pooled non-members can resolve.", ""]
    return lines + rows + [""]


PAPER_ROWS = [("", "", "accuracy"), ("", "", "auroc"), ("rla", "lr", "auroc"), ("rla", "rf", "auroc"),
              ("rla", "rf", "accuracy"), ("gla_paper", "lr", "accuracy"), ("gla_paper", "rf", "accuracy"),
              ("cla", "lr", "accuracy"), ("cla", "rf", "accuracy")]


def _paper_table(part, dataset, order) -> list[str]:
    """Our eegmmidb numbers beside the paper's MI2 Tables 7-9 (quoted), with a verdict and the reason a
    difference is expected."""
    lines = [f"## {dataset} beside the paper's MI2 (Tables 7-9)", "",
             ("The paper's values are quoted from its tables (mean ± SD across rounds; no interval). Ours: mean "
              "[95 % interval over subjects+seeds, or over seeds where marked]. Verdict: *agrees* when the "
              "paper's value lies in our interval. The paper's ε is per round of its mechanism; ours is per local "
              "step (20 × 20 steps and more per round), so at equal ε our noise per update is the same and the "
              "composed ε far larger (see the ε columns above)."), "",
             "| model | ε | what | ours | paper | verdict | why they can differ |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for m, e in order:
        paper = PAPER_MI2.get((m, float(e)))
        if paper is None:
            continue
        for attack, attacker, metric in PAPER_ROWS:
            key = (attack, attacker, metric)
            if key not in paper:
                continue
            name = f"utility_{metric}" if not attack else metric
            hit = part[(part["model"] == m) & (part["epsilon"] == e) & (part["metric"] == name)
                       & (part["attack"] == attack) & (part["attacker"] == attacker)]
            what = (f"classification {metric}" if not attack else
                    f"{attack.upper().replace('_PAPER', ' (paper)')} {metric} ({attacker.upper()})")
            if hit.empty:
                lines.append(f"| {m} | {_eps_text(e)} | {what} | {DASH} | {paper[key]:.1f} | – | |")
                continue
            r = hit.iloc[0]
            ours = _cell(part, dataset, m, e, name, attack, attacker)
            lines.append(f"| {m} | {_eps_text(e)} | {what} | {ours} | {paper[key]:.1f} | "
                         f"{verdict(paper[key], 100 * r['mean'], 100 * r['ci_low'], 100 * r['ci_high'])} | "
                         f"{WHY.get((attack, metric), '')} |")
    return lines + [""]


def _eps_text(e: float) -> str:
    return "∞" if not math.isfinite(e) else f"{e:g}"


def tables_md(summary: pd.DataFrame, regressions: dict, cum: Cumulative | None = None,
              clients: pd.DataFrame | None = None) -> str:
    """The markdown of reports/federated_mia_tables.md: per dataset (real ones first, the paper's cohort first of
    all), the classification table, the per-client utility, one attack table per attacker (with chance, the
    untrained control and Holm marks), the low-FPR table, the loss-gap regressions and, on the paper's cohort,
    the comparison with its Tables 7-9."""
    cum = cum or Cumulative(None)
    lines = [*PREAMBLE, "ε is per step; " + cum.note(), ""]
    synthetic = {d: bool(p["synthetic"].iloc[0]) for d, p in summary.groupby("dataset")}
    for dataset in dataset_order(summary["dataset"].unique(), synthetic):
        part = summary[summary["dataset"] == dataset]
        title = f"{'SYNTHETIC ' if synthetic[dataset] else ''}{dataset}"
        order = [(m, e) for e in _epsilon_order(part["epsilon"].unique()) for m in part["model"].unique()]
        rounds = part[part["metric"] == "utility_accuracy"]["n_rounds"].max()
        seeds = part["n_seeds"].max()
        lines += [f"# {title}: {rounds:.0f} rounds, {seeds:.0f} seeds", ""]
        if dataset in DATASET_NOTES:
            lines += [DATASET_NOTES[dataset], ""]
        lines += _classification_table(part, dataset, title, order, cum)
        lines += _client_table(clients, dataset, title, order, cum)
        for attacker in sorted(a for a in part["attacker"].unique() if a):
            lines += _attack_tables(part, dataset, title, order, cum, attacker)
            lines += _low_fpr_table(part, dataset, title, order, cum, attacker)
        lines += _regression_lines(regressions, dataset)
        if dataset == PAPER_DATASET:
            lines += _paper_table(part, dataset, order)
    return "\n".join(lines + tests_lines("reports/federated_mia_tables.md")) + "\n"


# ---- figures -----------------------------------------------------------------------------------------------
def _suffix(synthetic: bool) -> str:
    return " (SYNTHETIC)" if synthetic else ""


def save_png(fig, path: Path) -> Path:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path


class _Panels:
    """What every federated_mia figure lays out: datasets (rows or columns), models, ε, and the ε labels."""

    def __init__(self, tidy: pd.DataFrame, cum: Cumulative):
        self.tidy, self.cum = tidy, cum
        self.synthetic = {d: bool(part["synthetic"].iloc[0]) for d, part in tidy.groupby("dataset")}
        self.datasets = dataset_order(tidy["dataset"].unique(), self.synthetic)
        self.models = list(dict.fromkeys(tidy["model"]))
        self.epsilons = _epsilon_order(tidy["epsilon"].unique())

    def title(self, dataset: str) -> str:
        return f"{dataset}{_suffix(self.synthetic[dataset])}"

    def eps_label(self, d, m, e) -> str:
        """Per-step ε with the per-round and cumulative (nominal, worst case) beside it."""
        cum = self.cum
        return (f"ε={epsilon_key(e)}/step, {cum.text(d, m, e, 'nominal', 'epsilon_per_round')}/round, "
                f"Σε={cum.text(d, m, e)}")


def rla_rounds_figure(p: _Panels):
    """RLA accuracy across rounds for ε ∈ {∞, 5, 1}, LR and RF attackers, chance beside."""
    tidy = p.tidy
    fig, axes = plt.subplots(len(p.datasets), len(p.models), figsize=(4.5 * len(p.models), 3.2 * len(p.datasets)),
                             squeeze=False)
    for i, d in enumerate(p.datasets):
        for j, m in enumerate(p.models):
            ax = axes[i, j]
            rla = tidy[(tidy["dataset"] == d) & (tidy["model"] == m) & (tidy["attack"] == "rla")
                       & (tidy["metric"] == "accuracy")]
            for k, e in enumerate((math.inf, 5.0, 1.0)):
                for attacker, style in (("lr", "-"), ("rf", "--")):
                    one = rla[(rla["epsilon"] == e) & (rla["attacker"] == attacker)]
                    line = one.groupby("round")["value"].mean()
                    if len(line):
                        ax.plot(line.index, line.values, style, color=f"C{k}", marker="o", ms=3,
                                label=f"{p.eps_label(d, m, e)}, {attacker.upper()}")
            if len(rla):
                ax.axhline(rla["chance"].mean(), color="grey", ls="--", lw=1, label="chance (majority)")
            ax.set(title=f"{p.title(d)}: {m}", xlabel="round", ylabel="RLA accuracy")
            ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.text(0.01, 0.01, "per round: one round's local steps composed; Σε: cumulative ε after all rounds (nominal, "
             "per example, worst case); see reports/federated_accounting.md", fontsize=7)
    return fig


def grad_norms_figure(p: _Panels):
    """Member vs non-member per-sample gradient norms of the last round, as quantile curves (CDF)."""
    tidy = p.tidy
    qs = tidy[tidy["metric"].str.match(r"grad_norm_(member|nonmember)_q\d+")]
    pairs = [(d, m) for d in p.datasets for m in p.models]
    fig, axes = plt.subplots(len(pairs), len(p.epsilons), figsize=(3.2 * len(p.epsilons), 2.6 * len(pairs)),
                             squeeze=False)
    for i, (d, m) in enumerate(pairs):
        for j, e in enumerate(p.epsilons):
            ax = axes[i, j]
            part = qs[(qs["dataset"] == d) & (qs["model"] == m) & (qs["epsilon"] == e)]
            for who, color in (("member", "C0"), ("nonmember", "C1")):
                q = part[part["metric"].str.startswith(f"grad_norm_{who}_q")]
                if len(q):
                    q = q.assign(q=q["metric"].str[-3:].astype(int) / 100).groupby("q")["value"].mean()
                    ax.plot(q.values, q.index, color=color, label=who)
            ax.set_title(f"{p.title(d)}\n{m} {p.eps_label(d, m, e)} (last round)", fontsize=8)
            ax.set(xlabel="per-sample gradient norm", ylabel="CDF")
            if len(part):
                ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def client_accuracy_figure(p: _Panels):
    """Per-client accuracy of the last round's global model, boxplots per (model, ε)."""
    tidy = p.tidy
    fig, axes = plt.subplots(1, len(p.datasets), figsize=(6 * len(p.datasets), 3.6), squeeze=False)
    for i, d in enumerate(p.datasets):
        part = tidy[(tidy["dataset"] == d) & (tidy["metric"] == "client_accuracy")]
        last = part[part["round"] == part["round"].max()]
        groups = [(m, e) for m in p.models for e in p.epsilons]
        data = [last[(last["model"] == m) & (last["epsilon"] == e)]["value"].to_numpy() for m, e in groups]
        axes[0, i].boxplot(data, tick_labels=[f"{m}\nε={epsilon_key(e)}\nΣε={p.cum.text(d, m, e)}"
                                              for m, e in groups])
        axes[0, i].axhline(0.5, color="grey", ls="--", lw=1)
        axes[0, i].set(title=f"{p.title(d)}: per-client accuracy (last round)", ylabel="accuracy")
        axes[0, i].tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return fig


def loss_gap_figure(p: _Panels, regressions: dict):
    """Loss gap vs RLA score over rounds and cells, with the OLS line (or why there is none)."""
    fig, axes = plt.subplots(len(REGRESSIONS), len(p.datasets),
                             figsize=(4.8 * len(p.datasets), 3.4 * len(REGRESSIONS)), squeeze=False)
    for i, d in enumerate(p.datasets):
        for j, (attacker, metric) in enumerate(REGRESSIONS):
            ax, reg = axes[j, i], regressions.get(f"{d}/rla_{metric}_{attacker}", {})
            if "points" in reg:
                x, y = np.asarray(reg["points"]["gap"]), np.asarray(reg["points"]["rla"])
                ax.scatter(x, y, s=10)
                grid = np.linspace(x.min(), x.max(), 10)
                ax.plot(grid, reg["intercept"] + reg["slope"] * grid, color="C3",
                        label=f"OLS R²={reg['r2']:.2f}, p={reg['p_value']:.2g}")
                ax.legend(fontsize=7)
            elif reg:
                ax.text(0.5, 0.5, "no regression:\n" + reg.get("error", "")[:60], ha="center", va="center",
                        fontsize=7, transform=ax.transAxes)
            ax.set(title=p.title(d), xlabel="loss gap (test − train)", ylabel=f"RLA {metric} ({attacker.upper()})")
    fig.tight_layout()
    return fig


def figures(tidy: pd.DataFrame, regressions: dict, folder: Path, cum: Cumulative | None = None) -> list[Path]:
    """The four federated_mia figures into ``folder``; their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    panels = _Panels(tidy, cum or Cumulative(None))
    draw = {"rla_rounds": rla_rounds_figure, "grad_norms": grad_norms_figure,
            "client_accuracy": client_accuracy_figure,
            "loss_gap": lambda p: loss_gap_figure(p, regressions)}
    return [save_png(fig(panels), folder / f"federated_mia_{name}.png") for name, fig in draw.items()]


# ---- csp_exploration ---------------------------------------------------------------------------------------
def csp_pca_figure(projections: dict, explained, title: str, synthetic: bool):
    """The members' PCA of the per-client CSP log-variances: both classes, members (o) and non-members (x)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8), layout="constrained")
    for label, colour in ((0, "#0072B2"), (1, "#D55E00")):
        for what, marker in (("member", "o"), ("non-member", "x")):
            proj = projections[(label, what)]
            ax.scatter(proj[:, 0], proj[:, 1], s=12, marker=marker, color=colour, alpha=0.6,
                       label=f"class {label}, {what}")
    ax.set_xlabel(f"PC1 ({explained[0]:.0%})")
    ax.set_ylabel(f"PC2 ({explained[1]:.0%})")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.set_title(titled(title, synthetic), fontsize=9)
    return fig


# ---- optuna_study_b ----------------------------------------------------------------------------------------
def pareto_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    """All complete trials by mechanism, the front as a step line, chance levels and the chance point."""
    from eegprivacy.pipeline import search
    from eegprivacy.studies.federated.search import OBJECTIVES

    search.pareto_figure(
        tidy, OBJECTIVES, "mechanism", path, xlabel="record-level attack TPR at 1 % FPR (strongest attacker) ↓",
        ylabel="global model AUROC on non-members (client mean) ↑",
        title=titled(f"{summary['dataset']} {summary['model']}: DP federated learning search, "
                     f"{summary['n_trials']} trials, {summary['num_rounds']} rounds, mean of "
                     f"{summary['noise_seeds']} seeds", summary["synthetic"]),
        chance=summary["chance"], chance_point="chance (no information)",
        chance_labels={"utility_auroc": "chance AUROC (0.5)",
                       "rla_tpr_at_fpr_0.01": "attack chance (TPR = FPR = 0.01)"})
