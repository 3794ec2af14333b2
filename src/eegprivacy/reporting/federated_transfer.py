"""Study B's transfer check drawn and tabulated: what :mod:`eegprivacy.studies.federated.transfer` computed."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.reporting.calibration import tests_lines
from eegprivacy.atomic import atomic_path
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.reporting.format import estimate, json_value

ARM_TEXT = {"joined": "joined (its own members trained the model)",
            "held_out": "held out (never joined; own CSP on its calibration trials)",
            "own_data_only": "own data only (CSP + LDA on its members)",
            "untrained": "untrained control (initial global model)",
            "joined_minus_held_out": "joined − held out",
            "held_out_minus_untrained": "held out − untrained",
            "held_out_minus_own_data_only": "held out − own data only"}
ORDER = list(ARM_TEXT)


def _eps(eps: float) -> str:
    return "∞" if not math.isfinite(float(eps)) else f"{float(eps):g}"


def _p(value) -> str:
    return "" if value is None or not np.isfinite(value) else (f"{value:.3f}" if value >= 0.001 else "<0.001")


def report_md(summary: pd.DataFrame, meta: dict) -> str:
    """One table per (model, ε): every arm and comparison with its subjects+seeds interval and Holm p-value."""
    label = "SYNTHETIC " if meta["synthetic"] else ""
    lines = [f"# Study B: transfer to a subject that never joined the federation ({label}{meta['dataset']})", "",
             f"Leave-one-subject-out over the federation: {meta['n_subjects']} folds per seed, {meta['seeds']} "
             f"seeds, each fold a federation of the other {meta['n_subjects'] - 1} subjects at "
             f"{meta['num_rounds']} rounds × {meta['local_epochs']} local epochs, {meta['clients_per_round']} "
             "clients per round (federated_mia's protocol for this dataset). The held-out subject fits its own CSP "
             "on its member (calibration) trials; every arm is scored on its non-member trials of the same "
             "per-seed split. Intervals: 95 % percentile cluster bootstrap over subjects and seeds "
             "(`ci_over: subjects+seeds`). Comparisons: paired by subject and seed, one-sided bootstrap p-value "
             "(is the difference > 0?), Holm-adjusted over every comparison in this file. "
             f"ε is per local step ({meta['epsilon_scope']}).", ""]
    for (model, eps), part in summary.groupby(["model", "epsilon"], sort=False):
        lines += [f"## {model}, ε per step = {_eps(eps)}", "",
                  "| arm | accuracy | AUROC | p (Holm), accuracy | p (Holm), AUROC |",
                  "| --- | --- | --- | --- | --- |"]
        for arm in ORDER:
            cells = []
            ps = []
            for metric in ("accuracy", "auroc"):
                row = part[(part["arm"] == arm) & (part["metric"] == metric)]
                if row.empty:
                    cells.append("–")
                    ps.append("")
                    continue
                r = row.iloc[0]
                cells.append(estimate(r["value"], r["ci_low"], r["ci_high"], pct=True))
                ps.append(_p(r.get("p_holm")))
            lines.append(f"| {ARM_TEXT[arm]} | {cells[0]} | {cells[1]} | {ps[0]} | {ps[1]} |")
        chance = part[(part["metric"] == "accuracy")]["chance"].iloc[0]
        lines += [f"| chance | {100 * chance:.1f} | 50.0 | | |", ""]
    lines += ["Reading: *held out* above the *untrained control* (and chance) is what the federation learnt that "
              "carries to a new subject; *joined − held out* is what a client gains from having its own trials in "
              "the federation; *own data only* is what the subject gets without any federation.",
              "", "Figure: `reports/figures/federated_transfer.png` (per subject: joined, held out, own data only, "
              "with each subject's chance).", ""]
    return "\n".join(lines + tests_lines("reports/federated_transfer.md"))


def headline(summary: pd.DataFrame, meta: dict) -> dict:
    """``<model>/eps_<ε>/<metric>/<arm>`` → value, interval, p-values; plus the run's settings."""
    out = {}
    for _, r in summary.iterrows():
        key = f"{r['model']}/eps_{epsilon_key(r['epsilon'])}/{r['metric']}/{r['arm']}"
        out[key] = {"value": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "chance": r["chance"],
                    "p_value": r.get("p_value"), "p_holm": r.get("p_holm"), "ci_over": r["ci_over"]}
    return json_value({"meta": meta, "summary": out})


def parent_metrics(summary: pd.DataFrame, model: str, epsilon: float) -> dict:
    """One (model, ε)'s summary as MLflow metrics of its parent run."""
    part = summary[(summary["model"] == model) & (summary["epsilon"] == float(epsilon))]
    metrics = {}
    for _, r in part.iterrows():
        for stat in ("value", "ci_low", "ci_high", "p_holm"):
            value = r.get(stat)
            if value is not None and np.isfinite(value):
                metrics[f"{r['metric']}/{r['arm']}/{'mean' if stat == 'value' else stat}"] = float(value)
    return metrics


def transfer_figure(tidy: pd.DataFrame, summary: pd.DataFrame, meta: dict, path: str | Path) -> Path:
    """Per (model, ε) panel: each subject's accuracy joined, held out and with its own data only (means over
    seeds), sorted by joined accuracy, with the subject's chance."""
    groups = list(tidy.groupby(["model", "epsilon"], sort=False))
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 3.2 * len(groups)), squeeze=False)
    for ax, ((model, eps), part) in zip(axes[:, 0], groups):
        means = {arm: part[part["metric"] == f"{arm}_accuracy"].groupby("subject_index")["value"].mean()
                 for arm in ("joined", "held_out", "own_data_only")}
        chance = part[part["metric"] == "held_out_accuracy"].groupby("subject_index")["chance"].mean()
        order = means["joined"].sort_values().index
        x = np.arange(len(order))
        for i, (arm, marker) in enumerate((("joined", "o"), ("held_out", "s"), ("own_data_only", "^"))):
            ax.plot(x + (i - 1) * 0.15, means[arm].reindex(order).to_numpy(), marker, label=ARM_TEXT[arm])
        ax.step(np.r_[x - 0.5, x[-1] + 0.5], np.r_[chance.reindex(order).to_numpy(), chance.reindex(order).iloc[-1]],
                where="post", color="grey", lw=1, label="chance (majority share of its test trials)")
        ax.set_xticks(x, [f"s{int(k)}" for k in order], fontsize=7)
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{'SYNTHETIC ' if meta['synthetic'] else ''}{meta['dataset']}, {model}, ε per step = "
                     f"{_eps(eps)}: mean over {meta['seeds']} seeds (subject index, sorted by joined)", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(path)
