"""Study B LiRA's outputs: the log-log ROC figure, the markdown tables and the headline JSON, drawn from the rows
and curves :mod:`eegprivacy.studies.federated.lira` computed."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.reporting.calibration import tests_lines
from eegprivacy.atomic import atomic_path
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.reporting.format import estimate
from eegprivacy.reporting.study_runs import latest_parents
from eegprivacy.attacks.reference import REFERENCE_ATTACKS
from eegprivacy.studies.federated.lira.config import (
    ALPHA,
    CONTROL_SUFFIX,
    CONTROLLED,
    DIFF_METRIC,
    LOWEST_FPR,
    LOWEST_TPR,
    MIN_BEYOND,
    NOTE,
    UNTRAINED,
)
from eegprivacy.studies.federated.lira.pooled import DIFF_COLUMNS
from eegprivacy.studies.federated.lira.scoring import needed_nonmembers, resolvable_fpr
from eegprivacy.studies.federated.lira.targets import references_of
from eegprivacy.tracking.runs import finished_stage_runs

RLA_LABELS = {("rla", "lr"): "RLA LR", ("rla", "rf"): "RLA RF", ("rla", "mlp"): "RLA MLP"}


def label(attack: str, attacker: str = "") -> str:
    """A row's name in the tables: the registry's text for a reference attack (with its k references and control),
    the RLA's attacker, the untrained model."""
    if (attack, attacker) in RLA_LABELS:
        return RLA_LABELS[(attack, attacker)]
    if attack == UNTRAINED:
        return "LiRA online, untrained model (shown, not tested)"
    base = attack.removesuffix(CONTROL_SUFFIX)
    k = references_of(base)
    name = base.rpartition("_k")[0] if k is not None else base
    text = REFERENCE_ATTACKS[name].text if name in REFERENCE_ATTACKS else attack
    text += f", {k} reference{'s' if k > 1 else ''}" if k is not None else ""
    return text + (", preprocessing-only control" if attack.endswith(CONTROL_SUFFIX) else "")


def row_order(key: tuple) -> tuple:
    """Tables list the reference attacks in registry order (all references, then k = 1, 2, 4 …), then the RLAs,
    controls after their attack, the untrained model last."""
    attack, attacker = key
    base = attack.removesuffix(CONTROL_SUFFIX)
    k = references_of(base)
    name = base.rpartition("_k")[0] if k is not None else base
    rank = list(REFERENCE_ATTACKS).index(name) if name in REFERENCE_ATTACKS else len(REFERENCE_ATTACKS) + (
        1 if attack == UNTRAINED else 0)
    return (attack.endswith(CONTROL_SUFFIX), rank, k is not None, k or 0, attacker)


CONTROL_HEAD = ["| ε per step | attack | attack − control (AUROC points) | p (two-sided) | p (Holm) | "
                f"Holm < {ALPHA:g} | attack AUROC | control AUROC | untrained AUROC | control's share of the excess | "
                "subject clusters | CI over |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
TABLE_HEAD = [("| ε per step | ε per round | Σε nominal | Σε certified | attack | AUROC | TPR@1 %FPR | "
               f"AUROC (pooled) | TPR@{100 * LOWEST_FPR:g} %FPR (pooled) | TPR (pooled) | at FPR | CI method (TPR) | "
               "subject clusters | independent non-members | CI over (pooled) |"),
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
CHANCE_ROW = f"| | | | | chance | 50.0 | 1.0 | 50.0 | {100 * LOWEST_FPR:g} | = FPR | | | | | |"


def _roc_panel(ax, curves: dict, scope: str, name: str, eps_label) -> None:
    """One scope's curves on log-log axes with the chance diagonal (or a note that the scope did not run)."""
    keys = sorted({(a, b) for (_, _, a, b) in curves}, key=row_order)
    colours = {k: f"C{i % 10}" for i, k in enumerate(keys)}
    styles = ["-", "--", ":", "-."]
    eps_list = sorted({e for (s, e, _, _) in curves if s == scope}, key=lambda e: -float(e))
    lowest = 1.0
    for (sc, eps, attack, attacker), (fpr, tpr) in curves.items():
        if sc != scope:
            continue
        keep = fpr > 0
        lowest = min(lowest, fpr[keep].min()) if keep.any() else lowest
        ax.plot(fpr[keep], tpr[keep], color=colours.get((attack, attacker), "k"),
                ls=styles[eps_list.index(eps) % len(styles)], lw=1.3,
                label=f"{label(attack, attacker)}, {eps_label(eps)}")
    ax.set_title(name, fontsize=10)
    if lowest >= 1.0:
        ax.text(0.5, 0.5, "not run (too few shadows to leave a balanced group out)", ha="center",
                transform=ax.transAxes)
        return
    grid = np.logspace(np.log10(lowest), 0, 50)
    ax.plot(grid, grid, color="grey", lw=0.8, label="chance (TPR = FPR)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lowest, 1)
    ax.set_ylim(lowest, 1.05)
    ax.axvline(0.001, color="grey", lw=0.5, ls=":")
    ax.axvline(0.01, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("false positive rate")
    ax.legend(fontsize=6.5, loc="lower right")


def roc_figure(curves: dict, path: Path, title: str, eps_label=lambda eps: f"ε={eps}") -> None:
    """Log-log ROC, one curve per (ε, attack); left: the targets pooled over seeds, right: shadow-as-target.
    ``eps_label(eps)`` names an ε in the legend (the stage adds the cumulative ε)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=True)
    _roc_panel(axes[0], curves, "target_pooled", "targets (80/20, a split per target), pooled", eps_label)
    _roc_panel(axes[1], curves, "shadow_loo", "shadow-as-target, leave one pair out", eps_label)
    axes[0].set_ylabel("true positive rate")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130, format="png")
    plt.close(fig)


def cumulative_label(cum, dataset: str, model: str):
    """The legend's ε: per step, per round and cumulative (from federated-accounting's rows)."""
    return lambda eps: (f"ε={eps}/step, {cum.text(dataset, model, float(eps), 'nominal', 'epsilon_per_round')}"
                        f"/round, Σε={cum.text(dataset, model, float(eps))}")


def _intro(meta: dict, cum) -> list[str]:
    synthetic = "SYNTHETIC " if meta["synthetic"] else ""
    beyond = meta.get("min_beyond", MIN_BEYOND)
    n_in = meta.get("shadow_in_count", round(meta["n_shadows"] * meta["shadow_in_fraction"]))
    return [f"# Study B: LiRA and RLA against {synthetic}{meta['dataset']} ({meta['model']})", "",
            f"{NOTE}. {cum.note()}", "",
            ("Targets: federations built as `federated_mia`'s, each target seed on its own per-subject 80/20 "
            f"member split (`federated_mia`'s split of that seed, base split seed {meta['split_seed']}): "
            f"{meta['n_members']} members and {meta['n_nonmembers']} non-members per target over "
            f"{meta['n_clients']} clients, {meta['target_seeds']} targets; over the targets "
            f"{meta['n_independent_nonmembers']} of the {meta['n_trials']} trials were a non-member at least "
            f"once (the independent non-members). Shadows: {meta['n_shadows']} federations through the same "
            f"code and knobs ({meta['training']}), each on {100 * meta['shadow_in_fraction']:.0f} % of every "
            "client's trials of each class (the target's member share, to within one trial per subject and class); "
            f"the masks are balanced: every trial is IN in exactly {n_in} of the {meta['n_shadows']} shadows, so "
            "a trial's IN/OUT count says nothing about any membership, and the masks are drawn independently of "
            "the targets' splits. Every shadow client's CSP is fitted on its IN trials as the target's is on its "
            f"members. LiRA variance: {meta['lira_variance']}. RLA: [p0, p1, loss], {meta['attack_folds']}-fold "
            "cross-fitted on the target's own member labels (a stronger attacker knowledge than LiRA's, which "
            "uses none)."), "",
            ("**Preprocessing-only control.** Each client's CSP and scaling are fitted on its members, so members "
            "sit further from the decision boundary in CSP space whatever model is applied afterwards: an attack on "
            "the trained model detects preprocessing as well as training. The control is a model that never saw "
            "the attacked client, scored through that client's own preprocessing: per target, "
            f"{meta.get('control_folds', 4)} federations trained exactly like it (same seed, ε and member split) "
            "each without one client fold; a client's trials pass through the target's CSP of that client and are "
            "scored by the fold model that left it out (EEGNet: BatchNorm statistics calibrated on the client's "
            "members), and LiRA reads them against the same shadows as the target. The untrained model is shown "
            "beside, not tested: an untrained network's outputs are nearly constant, so it cannot show a "
            "preprocessing leak."), "",
            (f"**Which TPRs are reported.** A TPR at FPR f is a number only where at least {beyond} independent "
            f"non-members lie beyond its threshold (f × independent non-members ≥ {beyond}; independent "
            "non-members: distinct trials, each counted once however many models held it out). Elsewhere the "
            f"cell reads \"not resolvable (needs ≥ N independent non-members, has M; supports F % FPR)\", F the "
            "lowest FPR on the 1-2-5 grid the pool resolves, and no number for it is logged. TPR at zero false "
            "positives is never reported: a threshold above every non-member has no non-member beyond it. "
            f"With {meta['n_independent_nonmembers']} independent non-members the pooled targets resolve "
            f"{_fpr_text(resolvable_fpr(LOWEST_FPR, meta['n_independent_nonmembers'], beyond))} "
            f"({100 * LOWEST_FPR:g} % FPR needs {needed_nonmembers(LOWEST_FPR, beyond):,}); one target's "
            f"{meta['n_nonmembers']} non-members resolve "
            f"{_fpr_text(resolvable_fpr(LOWEST_FPR, meta['n_nonmembers'], beyond))} "
            f"(1 % FPR needs {needed_nonmembers(0.01, beyond):,})."), "",
            ("Per-seed columns: mean [95 % t-interval over target seeds]. Pooled columns: the scores of all "
            f"{meta['target_seeds']} targets pooled. AUROC: 95 % two-way percentile bootstrap resampling target "
            f"models and {meta['bootstrap_unit']}, n − 1 of each n (`two_way_bootstrap`: the resampled mean's "
            "variance then has the unbiased divisor; drawn n of n its interval covered 0.937). TPR (at the lowest "
            "resolvable FPR, named in `at FPR`): the blocked threshold bootstrap (`blocked_threshold_bootstrap`): "
            "the same resamples, the threshold re-estimated at that FPR on each resample's non-members and the TPR "
            "read off its members, so the interval carries the threshold's own error and the clustering of trials "
            "within subjects; `subject clusters` says how many subjects the pool spans, `CI over` what is resampled. "
            "Chance: AUROC 50, TPR at x % FPR = x. All values in %."), ""]


def _fpr_text(fpr: float) -> str:
    return f"{100 * fpr:g} % FPR" if np.isfinite(fpr) else "no FPR below 100 %"


def _summary_row(frame: pd.DataFrame, eps: float, key: tuple, metric: str):
    hit = frame[(frame["epsilon"] == eps) & (frame["attack"] == key[0]) & (frame["attacker"] == key[1])
                & (frame["metric"] == metric)]
    return hit.iloc[0] if len(hit) else None


def _resolved(r) -> bool:
    value = r.get("resolvable", True)
    return True if value is None or (isinstance(value, float) and np.isnan(value)) else bool(value)


def _cell(r) -> str:
    """One summary row as a table cell: its estimate [interval], "not resolvable (…)" where the rule says so, or
    "–" where the row is missing."""
    if r is None:
        return "–"
    if not _resolved(r):
        note = r.get("note") if isinstance(r.get("note"), str) and r.get("note") else "not resolvable"
        return "not resolvable (" + note.removeprefix("not resolvable").lstrip(": ") + ")"
    return estimate(r["value"], r["ci_low"], r["ci_high"], pct=True)


def _scope_rows(summary: pd.DataFrame, meta: dict, cum, per_scope: str, pooled_scope: str) -> list[str]:
    """One table row per (ε, attack) that has a per-model AUROC."""
    per = summary[summary["scope"] == per_scope]
    pooled = summary[summary["scope"] == pooled_scope]
    lines = []
    keys = sorted({(a, b) for a, b in zip(per["attack"], per["attacker"]) if references_of(a) is None},
                  key=row_order)  # the attacks on all references here; on k references: reference_table
    for eps in meta["epsilons"]:
        for key in keys:
            a = _summary_row(per, eps, key, "auroc")
            if a is None:
                continue
            t1 = _summary_row(per, eps, key, "tpr_at_fpr_0.01")
            pa, low = _summary_row(pooled, eps, key, "auroc"), _summary_row(pooled, eps, key, LOWEST_TPR)
            p = _summary_row(pooled, eps, key, "tpr_at_resolvable_fpr")
            cells = [_cell(r) for r in (a, t1, pa, low, p)]
            if p is not None:
                ok = _resolved(p)
                clusters = p.get("n_clusters")
                cells += [f"{100 * float(p['fpr']):g} %" if ok else "–", str(p.get("ci_method")) if ok else "–",
                          f"{int(clusters)}" if clusters is not None and np.isfinite(clusters) else "–",
                          f"{int(p['n_independent_nonmembers'])}", str(p["ci_over"])]
            else:
                cells += ["–"] * 5
            where = (meta["dataset"], meta["model"], eps)
            sums = " | ".join([cum.text(*where, "nominal", "epsilon_per_round"),
                               *(cum.text(*where, c) for c in ("nominal", "certified"))])
            lines.append(f"| {epsilon_key(eps)} | {sums} | {label(*key)} | " + " | ".join(cells) + " |")
    return lines


def _p_text(value) -> str:
    return "–" if value is None or not np.isfinite(float(value)) else f"{float(value):.3g}"


def _share_text(value) -> str:
    return "– (no excess)" if value is None or not np.isfinite(float(value)) else f"{100 * float(value):.0f} %"


def _control_rows(summary: pd.DataFrame, meta: dict) -> tuple[list[str], list[str]]:
    """The LiRA − control table's rows (per ε, online and offline) and one sentence per row on how much of LiRA's
    AUROC excess over 0.5 the control reaches."""
    pooled = summary[(summary["scope"] == "target_pooled") & (summary["metric"] == DIFF_METRIC)]
    lines, sentences = [], []
    attacks = sorted(set(pooled["attack"]), key=lambda a: (a not in CONTROLLED, row_order((a, ""))))
    for eps in meta["epsilons"]:
        for attack in attacks:
            r = _summary_row(pooled, eps, (attack, ""), DIFF_METRIC)
            if r is None:
                continue
            significant = r.get("significant")
            mark = ("–" if significant is None or pd.isna(significant) else "yes" if bool(significant) else "no")
            clusters = r.get("n_clusters")
            cells = [estimate(r["value"], r["ci_low"], r["ci_high"], pct=True), _p_text(r.get("p_value")),
                     _p_text(r.get("p_holm")), mark,
                     *(estimate(r.get(c), pct=True) for c in ("attack_auroc", "control_auroc", "untrained_auroc")),
                     _share_text(r.get("control_share")),
                     f"{int(clusters)}" if clusters is not None and np.isfinite(clusters) else "–", str(r["ci_over"])]
            name = label(attack)
            lines.append(f"| {epsilon_key(eps)} | {name} | " + " | ".join(cells) + " |")
            if attack not in CONTROLLED:  # the reference-count rows: interval only, no sentence
                continue
            share = r.get("control_share")
            if share is not None and np.isfinite(float(share)):
                sentences.append(
                    f"At ε = {epsilon_key(eps)}, the preprocessing-only control reaches {100 * float(share):.0f} % "
                    f"of {name}'s AUROC excess over 0.5 ((control − 0.5) / (attack − 0.5) = "
                    f"({100 * float(r['control_auroc']):.1f} − 50) / ({100 * float(r['attack_auroc']):.1f} − 50)).")
            else:
                sentences.append(f"At ε = {epsilon_key(eps)}, {name} has no AUROC excess over 0.5 "
                                 f"({estimate(r.get('attack_auroc'), pct=True)} %): no share to state.")
    return lines, sentences


def _pooled(summary: pd.DataFrame, eps: float, attack: str, metric: str):
    hit = summary[(summary["scope"] == "target_pooled") & (summary["epsilon"] == eps)
                  & (summary["attack"] == attack) & (summary["attacker"] == "") & (summary["metric"] == metric)]
    return hit.iloc[0] if len(hit) else None


def reference_attacks(summary: pd.DataFrame) -> list[str]:
    """The reference attacks' row names in the summary (every k and all references), in :func:`row_order`."""
    pooled = summary[(summary["scope"] == "target_pooled") & (summary["attacker"] == "")]
    names = {a for a in pooled["attack"] if not a.endswith(CONTROL_SUFFIX) and a != UNTRAINED}
    return sorted(names, key=lambda a: row_order((a, "")))


REFERENCE_HEAD = ["| ε per step | attack | reference models | AUROC (pooled) | TPR (pooled) | at FPR | "
                  "attack − control (AUROC points) | p (Holm) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]


def reference_table(summary: pd.DataFrame, epsilons) -> list[str]:
    """The attacks by number of reference models: pooled AUROC and TPR at the lowest resolvable FPR, each with its
    subject × target-model interval, and attack − control (tested only on all references)."""
    lines = []
    for eps in epsilons:
        for attack in reference_attacks(summary):
            a = _pooled(summary, eps, attack, "auroc")
            if a is None:
                continue
            t = _pooled(summary, eps, attack, "tpr_at_resolvable_fpr")
            d = _pooled(summary, eps, attack, DIFF_METRIC)
            k = references_of(attack)
            fpr = f"{100 * float(t['fpr']):g} %" if t is not None and _resolved(t) else "–"
            diff = estimate(d["value"], d["ci_low"], d["ci_high"], pct=True) if d is not None else "–"
            p = _p_text(d.get("p_holm")) if d is not None else "–"
            name = label(attack).rsplit(", ", 1)[0] if k is not None else label(attack)
            lines.append(f"| {epsilon_key(eps)} | {name} | {k if k is not None else 'all'} | {_cell(a)} | "
                         f"{_cell(t)} | {fpr} | {diff} | {p} |")
    return lines


def unresolved_sentence(summary: pd.DataFrame) -> str:
    """Which of the FPRs asked for (1 %, 0.1 %) the pool cannot resolve, and the one it reports instead."""
    fprs = summary.loc[(summary["metric"] == "tpr_at_resolvable_fpr") & summary["fpr"].notna(), "fpr"]
    if fprs.empty:
        return ""
    lowest = float(fprs.min())
    missing = [f for f in (0.01, LOWEST_FPR) if f < lowest - 1e-12]
    if not missing:
        return ""
    needs = " and ".join(f"{100 * f:g} % needs {needed_nonmembers(f):,}" for f in missing)
    return (f"TPR at {' and '.join(f'{100 * f:g} %' for f in missing)} FPR: not resolvable here (≥ {MIN_BEYOND} "
            f"independent non-members beyond the threshold: {needs}); the lowest FPR the pool resolves is "
            f"{100 * lowest:g} %, reported instead.")


def strongest_sentence(summary: pd.DataFrame, epsilons) -> str:
    """Which attack is strongest at low FPR, per ε, from the pooled TPR at the lowest FPR the pool resolves (the
    same FPR for every attack: one pool of non-members): the top attack and the runner-up with their intervals,
    and whether the intervals separate them."""
    parts = []
    for eps in epsilons:
        cells = [(attack, _pooled(summary, eps, attack, "tpr_at_resolvable_fpr")) for attack in
                 reference_attacks(summary)]
        cells = sorted([(a, r) for a, r in cells if r is not None and _resolved(r) and np.isfinite(r["value"])],
                       key=lambda c: -float(c[1]["value"]))
        if len(cells) < 2:
            continue
        (top, r1), (second, r2) = cells[:2]
        apart = float(r1["ci_low"]) > float(r2["ci_high"])
        parts.append(f"at ε = {epsilon_key(eps)} per step, {label(top)} ({_cell(r1)} % TPR at "
                     f"{100 * float(r1['fpr']):g} % FPR, ahead of {label(second)} {_cell(r2)} %; "
                     + ("its interval lies above the runner-up's)" if apart else
                        "the intervals overlap, so the order is not established)"))
    if not parts:
        return "No TPR at a low FPR is resolvable here, so no attack can be called strongest at low FPR."
    return "Strongest at low FPR (the highest pooled TPR at the lowest resolvable FPR): " + "; ".join(parts) + "."


def report_md(summary: pd.DataFrame, meta: dict, cum) -> str:
    """The markdown report: what was attacked and how, then the targets' and the shadow-as-target tables."""
    lines = _intro(meta, cum)
    group = int(meta.get("loo_group", 2))
    lines += ["## Targets (80/20, a split per target)", "", *TABLE_HEAD,
              *_scope_rows(summary, meta, cum, "target_seed", "target_pooled"), CHANCE_ROW, ""]
    control_lines, sentences = _control_rows(summary, meta)
    if control_lines:
        family = summary.loc[summary["metric"] == DIFF_METRIC, "family"].dropna()
        family = next((f for f in family if isinstance(f, str) and f), "no cell tested (no bootstrap)")
        lines += ["## Attack − preprocessing-only control", "",
                  ("The claim is the paired difference: the pooled AUROC of an attack on the trained target minus that "
                  "of the same attack on the preprocessing-only control (the fold model that never saw the client, "
                  "through the "
                  f"client's own CSP), pooled over the {meta['target_seeds']} targets. Interval: 95 % percentile "
                  f"two-way bootstrap, the same resamples of target models and {meta['bootstrap_unit']} (n − 1 of "
                  "each n) for attack and control (`paired_two_way_bootstrap`); p: two-sided bootstrap p-value of "
                  "\"difference = 0\"; "
                  f"Holm over the table's attack − control cells ({family}). The controls and the untrained model are "
                  "not hypotheses of the family (no p-value). The untrained model's AUROC is shown, not tested: its "
                  "near-constant outputs cannot show a preprocessing leak. Control's share of the excess: (control − "
                  "0.5) / (attack − 0.5). All AUROCs in %."), "", *CONTROL_HEAD, *control_lines, "", *sentences, ""]
    reference_lines = reference_table(summary, meta["epsilons"])
    if reference_lines:
        lines += ["## Attacks by number of reference models", "",
                  ("Each reference attack on k shadows per trial as reference models (online: the trial's first "
                  "⌊k/2⌋ IN and ⌈k/2⌉ OUT shadows; offline: its first k OUT shadows) and on all of them; the loss "
                  "threshold reads none. RMIA's population points z are "
                  "the target's non-members of the other subjects (a trial is never compared with its own "
                  "subject's trials). Pooled over the targets, intervals over target models × "
                  f"{meta['bootstrap_unit']}; attack − control is tested (Holm) on all references only, the rows on "
                  "k references carry their interval. All values in %."), "", *REFERENCE_HEAD, *reference_lines, "",
                  unresolved_sentence(summary), "", strongest_sentence(summary, meta["epsilons"]), ""]
    lines += ["## Shadow-as-target", "",
              (f"Each of the {meta['n_shadows']} shadows in turn is the target of LiRA fitted on the other "
              f"{meta['n_shadows'] - group} (the {group} shadows of its balanced group left out together, so every "
              "trial keeps the same number of IN and OUT fitting shadows), a membership game with IN share "
              f"{100 * meta['shadow_in_fraction']:.0f} %. Per-model columns: mean "
              "[t-interval over shadow targets]; pooled: as for the targets, over shadow targets and "
              f"{meta['bootstrap_unit']}, the TPR at the FPR the shadows' independent non-members (distinct trials "
              "OUT of at least one shadow) resolve under the same rule."), "", *TABLE_HEAD,
              *_scope_rows(summary, meta, cum, "shadow_loo", "shadow_loo_pooled"), CHANCE_ROW, ""]
    lines += ["Figure: `reports/figures/federated_lira_roc.png` (log-log ROC, diagonal = chance).", ""]
    return "\n".join(lines + tests_lines("reports/federated_lira.md"))


def _clean(v):
    """A JSON number: None for a missing or non-finite value."""
    return None if v is None or v is pd.NA or not np.isfinite(v) else float(v)


def headline(summary: pd.DataFrame, meta: dict) -> dict:
    """The headline JSON: the run's shape, then one entry per dataset/model/ε/scope/attack/metric."""
    out = {"epsilon_scope": NOTE, "dataset": meta["dataset"], "model": meta["model"],
           "synthetic": meta["synthetic"], "n_members": meta["n_members"], "n_nonmembers": meta["n_nonmembers"],
           "n_independent_nonmembers": meta["n_independent_nonmembers"], "bootstrap_unit": meta["bootstrap_unit"],
           "n_shadows": meta["n_shadows"], "target_seeds": meta["target_seeds"],
           "shadow_in_count": meta.get("shadow_in_count"), "min_beyond": meta.get("min_beyond", MIN_BEYOND),
           "wall_time_s": meta.get("wall_time_s")}
    for r in summary.to_dict("records"):
        attack = r["attack"] + (f"_{r['attacker']}" if r["attacker"] else "")
        key = "/".join([meta["dataset"], meta["model"], f"eps_{epsilon_key(r['epsilon'])}", r["scope"], attack,
                        r["metric"]])
        out[key] = {"mean": _clean(r["value"]), "ci_low": _clean(r["ci_low"]), "ci_high": _clean(r["ci_high"]),
                    "chance": _clean(r["chance"]), "n": _clean(r["n"]), "ci_over": r.get("ci_over"),
                    "fpr": _clean(r.get("fpr")), "n_independent_nonmembers": _clean(r.get("n_independent_nonmembers")),
                    "ci_method": r.get("ci_method"), "n_clusters": _clean(r.get("n_clusters")),
                    "resolvable": _resolved(r),
                    "note": r["note"] if isinstance(r.get("note"), str) else ""}
        if r["metric"] == DIFF_METRIC:  # the attack − control cell: its test and the AUROCs beside
            for column in DIFF_COLUMNS:
                value = r.get(column)
                out[key][column] = (value if column == "family" and isinstance(value, str) else
                                    None if column == "family" or value is None or pd.isna(value) else
                                    bool(value) if column == "significant" else _clean(value))
        if not out[key]["resolvable"]:  # an unresolvable cell carries no number, only what it needs and has
            out[key].update(mean=None, ci_low=None, ci_high=None)
    return out


_LOGGED = re.compile(r"^target_pooled/(?P<attack>[a-z0-9_]+?)/(?P<metric>auroc_minus_control|auroc|"
                     r"tpr_at_resolvable_fpr)(?:_(?P<part>ci_low|ci_high|fpr|p_value|p_holm|control_share))?$")


def parent_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest finished ``federated_lira`` parent run per run name (one per dataset, model and ε)."""
    return latest_parents(finished_stage_runs(uri, experiment, "federated_lira"))


def logged_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """The reference attacks' pooled rows as the parent runs logged them (value, interval, FPR, Holm p), in the
    summary's columns, so :func:`reference_table` prints MLflow's numbers."""
    cells: dict = {}
    for run in runs.to_dict("records"):
        eps = float(run["tags.epsilon"])
        for column, value in run.items():
            hit = _LOGGED.match(column.removeprefix("metrics.")) if column.startswith("metrics.") else None
            if hit is None or pd.isna(value):
                continue
            base = hit["attack"].removesuffix(CONTROL_SUFFIX)
            if references_of(base) is None and base not in REFERENCE_ATTACKS:
                continue
            key = (run["tags.dataset"], run["tags.model"], eps, hit["attack"], hit["metric"])
            cells.setdefault(key, {"resolvable": True, "note": "", "run_id": run["run_id"],
                                   "run_name": run["tags.mlflow.runName"]})[hit["part"] or "value"] = float(value)
    rows = [{"dataset": d, "model": m, "epsilon": e, "scope": "target_pooled", "attack": a, "attacker": "",
             "metric": metric, **{c: np.nan for c in ("ci_low", "ci_high", "fpr", "p_holm")}, **v}
            for (d, m, e, a, metric), v in cells.items()]
    return pd.DataFrame(rows)


def study_b_lines(uri: str, experiment: str) -> list[str]:
    """Study B's section on the strongest attacks (RMIA, LiRA, loss; every number from the ``federated_lira``
    parent runs); nothing where the store holds no run with them."""
    summary = logged_summary(parent_runs(uri, experiment))
    if summary.empty:
        return []
    lines = []
    for (dataset, model), part in summary.groupby(["dataset", "model"], sort=True):
        epsilons = sorted(set(part["epsilon"]), key=lambda e: -e)
        runs = part.drop_duplicates("run_id").sort_values("run_name")
        lines += [f"## The strongest attacks at low FPR: RMIA, LiRA and the loss threshold ({dataset}, {model})", "",
                  ("Stage `federated_lira`: target federations as `federated_mia`'s (each target on its own 80/20 "
                   "member split), shadow federations through the same code as reference models. Each attack on "
                   "k shadows per trial as references (online: ⌊k/2⌋ IN and ⌈k/2⌉ OUT; offline: k OUT) and on "
                   "all; "
                   "RMIA's population points z are the target's non-members of the other subjects. TPR at the "
                   "lowest FPR the pooled non-members resolve (≥ 10 independent non-members beyond the threshold). "
                   "Intervals: 95 % bootstrap over target models × subjects. Attack − control: the same attack on "
                   "the preprocessing-only control (the federation trained without the client's fold, through the "
                   "client's own member-fitted CSP), tested with Holm on all references only. ε is per local step, "
                   "not a cumulative guarantee. All values in %."), "", *REFERENCE_HEAD,
                  *reference_table(part, epsilons), "", unresolved_sentence(part), "",
                  strongest_sentence(part, epsilons), "",
                  "*From MLflow runs " + ", ".join(f"`{r.run_name}` (`runs:/{r.run_id}`)" for r in runs.itertuples())
                  + "; every cell with its per-seed rows in `reports/federated_lira.md`.*", ""]
    return lines
