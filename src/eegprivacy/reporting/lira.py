"""Study B LiRA's outputs: the log-log ROC figure, the markdown tables and the headline JSON, drawn from the rows
and curves :mod:`eegprivacy.studies.federated.lira` computed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.reporting.format import epsilon_key, estimate
from eegprivacy.studies.federated.lira import LOWEST_FPR, NOTE, resolvable_fpr

LABELS = {("lira_online", ""): "LiRA online", ("lira_offline", ""): "LiRA offline", ("rla", "lr"): "RLA LR",
          ("rla", "rf"): "RLA RF", ("rla", "mlp"): "RLA MLP",
          ("lira_online_untrained_control", ""): "LiRA online, untrained control"}
TABLE_HEAD = [("| ε per step | ε per round | Σε nominal | Σε certified | attack | AUROC | TPR@1 %FPR | TPR@0 FP | "
               "AUROC (pooled) | TPR (pooled) | at FPR | independent non-members | CI over (pooled) |"),
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
CHANCE_ROW = "| | | | | chance | 50.0 | 1.0 | 0.0 | 50.0 | = FPR | | | |"


def _roc_panel(ax, curves: dict, scope: str, name: str, eps_label) -> None:
    """One scope's curves on log-log axes with the chance diagonal (or a note that the scope did not run)."""
    colours = {k: f"C{i}" for i, k in enumerate(LABELS)}
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
                label=f"{LABELS.get((attack, attacker), attack)}, {eps_label(eps)}")
    ax.set_title(name, fontsize=10)
    if lowest >= 1.0:
        ax.text(0.5, 0.5, "not run (needs 6 or more shadows)", ha="center", transform=ax.transAxes)
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
    return [f"# Study B: LiRA and RLA against {synthetic}{meta['dataset']} ({meta['model']})", "",
            f"{NOTE}. {cum.note()}", "",
            ("Targets: federations built as `federated_mia`'s, each target seed on its own per-subject 80/20 "
            f"member split (`federated_mia`'s split of that seed, base split seed {meta['split_seed']}): "
            f"{meta['n_members']} members and {meta['n_nonmembers']} non-members per target over "
            f"{meta['n_clients']} clients, {meta['target_seeds']} targets; over the targets "
            f"{meta['n_independent_nonmembers']} of the {meta['n_trials']} trials were a non-member at least "
            f"once (the independent non-members). Shadows: {meta['n_shadows']} federations through the same "
            f"code and knobs ({meta['training']}), each on {100 * meta['shadow_in_fraction']:.0f} % of every "
            "client's trials of each class (the target's member share); every shadow client's "
            "CSP is fitted on its IN trials as the target's is on its members. LiRA variance: "
            f"{meta['lira_variance']}. RLA: [p0, p1, loss], {meta['attack_folds']}-fold cross-fitted on the "
            "target's own member labels (a stronger attacker knowledge than LiRA's, which uses none)."), "",
            ("Per-seed columns: mean [95 % t-interval over target seeds]. Pooled columns: the scores of all "
            f"{meta['target_seeds']} targets pooled, with a 95 % two-way bootstrap interval that resamples target "
            f"models and {meta['bootstrap_unit']} (`CI over`). A TPR at FPR f is printed only where the independent "
            "non-members (distinct trials, each counted once however many targets held it out) number at least "
            "1/f; the pooled TPR is at the lowest such FPR on a 1-2-5 grid, down to 0.1 %, named in `at FPR`. "
            f"With {meta['n_independent_nonmembers']} independent non-members the targets resolve "
            f"{_fpr_text(resolvable_fpr(LOWEST_FPR, meta['n_independent_nonmembers']))} "
            f"(one target's {meta['n_nonmembers']} non-members: "
            f"{_fpr_text(resolvable_fpr(LOWEST_FPR, meta['n_nonmembers']))}). TPR@0 FP is the share of members "
            "above every non-member. Chance: AUROC 50, TPR at x % FPR = x, TPR@0 FP = 0. All values in %."), ""]


def _fpr_text(fpr: float) -> str:
    return f"{100 * fpr:g} % FPR"


def _summary_row(frame: pd.DataFrame, eps: float, key: tuple, metric: str):
    hit = frame[(frame["epsilon"] == eps) & (frame["attack"] == key[0]) & (frame["attacker"] == key[1])
                & (frame["metric"] == metric)]
    return hit.iloc[0] if len(hit) else None


def _scope_rows(summary: pd.DataFrame, meta: dict, cum, per_scope: str, pooled_scope: str) -> list[str]:
    """One table row per (ε, attack) that has a per-model AUROC."""
    per = summary[summary["scope"] == per_scope]
    pooled = summary[summary["scope"] == pooled_scope]
    lines = []
    for eps in meta["epsilons"]:
        for key, label in LABELS.items():
            a = _summary_row(per, eps, key, "auroc")
            if a is None:
                continue
            t1, t0 = _summary_row(per, eps, key, "tpr_at_fpr_0.01"), _summary_row(per, eps, key, "tpr_at_zero_fpr")
            pa, p = _summary_row(pooled, eps, key, "auroc"), _summary_row(pooled, eps, key, "tpr_at_resolvable_fpr")
            cells = [estimate(r["value"], r["ci_low"], r["ci_high"], pct=True) if r is not None else "–"
                     for r in (a, t1, t0, pa, p)]
            if p is not None:
                cells += [f"{100 * float(p['fpr']):g} %", f"{int(p['n_independent_nonmembers'])}", str(p["ci_over"])]
            else:
                cells += ["–", "–", "–"]
            where = (meta["dataset"], meta["model"], eps)
            sums = " | ".join([cum.text(*where, "nominal", "epsilon_per_round"),
                               *(cum.text(*where, c) for c in ("nominal", "certified"))])
            lines.append(f"| {epsilon_key(eps)} | {sums} | {label} | " + " | ".join(cells) + " |")
    return lines


def report_md(summary: pd.DataFrame, meta: dict, cum) -> str:
    """The markdown report: what was attacked and how, then the targets' and the shadow-as-target tables."""
    lines = _intro(meta, cum)
    lines += ["## Targets (80/20, a split per target)", "", *TABLE_HEAD,
              *_scope_rows(summary, meta, cum, "target_seed", "target_pooled"), CHANCE_ROW, ""]
    lines += ["## Shadow-as-target", "",
              (f"Each of the {meta['n_shadows']} shadows in turn is the target of LiRA fitted on the other "
              f"{meta['n_shadows'] - 2} (its pair partner left out too), a membership game with IN share "
              f"{100 * meta['shadow_in_fraction']:.0f} %. Per-model columns: mean "
              "[t-interval over shadow targets]; pooled: two-way bootstrap over shadow targets and "
              f"{meta['bootstrap_unit']}, the TPR at the FPR the shadows' independent non-members (distinct trials "
              "OUT of at least one shadow) resolve."), "", *TABLE_HEAD,
              *_scope_rows(summary, meta, cum, "shadow_loo", "shadow_loo_pooled"), CHANCE_ROW, ""]
    lines += ["Figure: `reports/figures/federated_lira_roc.png` (log-log ROC, diagonal = chance).", ""]
    return "\n".join(lines)


def _clean(v):
    """A JSON number: None for a missing or non-finite value."""
    return None if v is None or not np.isfinite(v) else float(v)


def headline(summary: pd.DataFrame, meta: dict) -> dict:
    """The headline JSON: the run's shape, then one entry per dataset/model/ε/scope/attack/metric."""
    out = {"epsilon_scope": NOTE, "dataset": meta["dataset"], "model": meta["model"],
           "synthetic": meta["synthetic"], "n_members": meta["n_members"], "n_nonmembers": meta["n_nonmembers"],
           "n_independent_nonmembers": meta["n_independent_nonmembers"], "bootstrap_unit": meta["bootstrap_unit"],
           "n_shadows": meta["n_shadows"], "target_seeds": meta["target_seeds"],
           "wall_time_s": meta.get("wall_time_s")}
    for r in summary.to_dict("records"):
        attack = r["attack"] + (f"_{r['attacker']}" if r["attacker"] else "")
        key = "/".join([meta["dataset"], meta["model"], f"eps_{epsilon_key(r['epsilon'])}", r["scope"], attack,
                        r["metric"]])
        out[key] = {"mean": _clean(r["value"]), "ci_low": _clean(r["ci_low"]), "ci_high": _clean(r["ci_high"]),
                    "chance": _clean(r["chance"]), "n": _clean(r["n"]), "ci_over": r.get("ci_over"),
                    "fpr": _clean(r.get("fpr")), "n_independent_nonmembers": _clean(r.get("n_independent_nonmembers"))}
    return out
