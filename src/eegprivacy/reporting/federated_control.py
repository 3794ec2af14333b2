"""Study B's controlled membership table, drawn and written: ``reports/federated_control.md``, its figure, the
metrics of the stage's MLflow summary run, and the lead section of ``reports/study-b.md`` rebuilt from that run.

One table per model (the Holm family): rows are (preprocessing, attack), columns the per-step ε; every cell is
attack − control AUROC (the trained model minus the model that never saw the client, both through the client's
own preprocessing) with its subjects+seeds interval and ``*`` where the Holm-adjusted one-sided p < 0.05.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

ALPHA = 0.05
ATTACK_NAMES = {"loss": "loss threshold", "rla_lr": "RLA (lr)", "fla_lr": "FLA (lr)", "gla_lr": "GLA sound (lr)",
                "rla_rf": "RLA (rf)", "fla_rf": "FLA (rf)", "gla_rf": "GLA sound (rf)", "rla_mlp": "RLA (mlp)",
                "fla_mlp": "FLA (mlp)", "gla_mlp": "GLA sound (mlp)"}
PREP_NAMES = {"member_csp": "member-fitted CSP (paper)", "calibration_csp": "calibration-fitted CSP",
              "dp_csp": "DP-CSP", "channels": "no CSP (11 sensorimotor channels)"}
STATS = ("value", "ci_low", "ci_high", "p_value", "p_holm", "control_share", "certified_epsilon")
_KEY = re.compile(r"^control/(?P<model>[^/]+)/(?P<prep>[^/]+)/eps(?P<eps>[^/]+)/(?P<attack>[^/]+)/(?P<arm>[^/]+)/"
                  r"(?P<stat>[^/]+)$")


def _eps_text(eps: float) -> str:
    return "∞" if math.isinf(eps) else f"{eps:g}"


def metrics_of(summary: pd.DataFrame) -> dict[str, float]:
    """The summary as MLflow metrics ``control/<model>/<prep>/eps<ε>/<attack>/<arm>/<stat>`` (finite values)."""
    out = {}
    for _, row in summary.iterrows():
        for stat in STATS:
            value = row.get(stat, np.nan)
            if value is not None and np.isfinite(float(value)):
                out[f"control/{row['model']}/{row['preprocessing']}/eps{row['epsilon']:g}/{row['attack']}/"
                    f"{row['arm']}/{stat}"] = float(value)
    return out


def tidy_run(run: pd.Series) -> pd.DataFrame:
    """One summary run's metrics back into summary rows (what the lead section prints)."""
    records: dict = {}
    for column in run.index:
        if not column.startswith("metrics."):
            continue
        match = _KEY.match(column[len("metrics."):])
        if not match or pd.isna(run[column]):
            continue
        eps = math.inf if match["eps"] == "inf" else float(match["eps"])
        key = (match["model"], match["prep"], eps, match["attack"], match["arm"])
        records.setdefault(key, {})[match["stat"]] = float(run[column])
    rows = [{"model": k[0], "preprocessing": k[1], "epsilon": k[2], "attack": k[3], "arm": k[4], **v}
            for k, v in records.items()]
    out = pd.DataFrame(rows)
    for stat in STATS:
        if not out.empty and stat not in out:
            out[stat] = np.nan
    if not out.empty:
        out["significant"] = out["p_holm"] < ALPHA
    return out


def _cell(row, signed: bool = True) -> str:
    if row is None or not np.isfinite(row["value"]):
        return "—"
    fmt = "{:+.3f}" if signed else "{:.3f}"
    text = f"{fmt.format(row['value'])} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    return text + (" *" if bool(row.get("significant", False)) else "")


def _epsilons(summary: pd.DataFrame) -> list[float]:
    return sorted(summary["epsilon"].unique(), key=lambda e: (-math.inf if math.isinf(e) else -e))


def _orders(summary: pd.DataFrame, column: str, known) -> list[str]:
    present = list(dict.fromkeys(summary[column]))
    return [k for k in known if k in present] + [k for k in present if k not in known]


def model_table(summary: pd.DataFrame, model: str) -> list[str]:
    """One model's table: a utility row and each attack's attack − control row per preprocessing option."""
    part = summary[summary["model"] == model]
    epsilons = _epsilons(part)
    index = {(r["preprocessing"], r["epsilon"], r["attack"], r["arm"]): r for _, r in part.iterrows()}
    header = "| preprocessing | row | " + " | ".join(f"ε = {_eps_text(e)}" for e in epsilons) + " |"
    lines = [header, "|---|---|" + "---|" * len(epsilons)]
    attacks = _orders(part[part["arm"] == "attack_minus_control"], "attack", ATTACK_NAMES)
    for prep in _orders(part, "preprocessing", PREP_NAMES):
        util = [index.get((prep, e, "utility_accuracy", "attack")) for e in epsilons]
        lines.append(f"| {PREP_NAMES.get(prep, prep)} | non-member accuracy | "
                     + " | ".join(_cell(u, signed=False) for u in util) + " |")
        for attack in attacks:
            cells = [index.get((prep, e, attack, "attack_minus_control")) for e in epsilons]
            lines.append(f"| | {ATTACK_NAMES.get(attack, attack)}: attack − control | "
                         + " | ".join(_cell(c) for c in cells) + " |")
        eps_row = [index.get((prep, e, "utility_accuracy", "attack")) for e in epsilons]
        certified = [r.get("certified_epsilon", np.nan) if r is not None else np.nan for r in eps_row]
        lines.append(f"| | certified ε per member trial, whole run (RDP) | "
                     + " | ".join("∞" if not np.isfinite(c) else f"{c:,.0f}" for c in certified) + " |")
    return lines


def explained_sentences(summary: pd.DataFrame, model: str) -> list[str]:
    """For the member-fitted CSP at every ε: how much of the raw attack AUROC's excess over 0.5 the
    preprocessing-only control reaches, attack by attack."""
    part = summary[(summary["model"] == model) & (summary["preprocessing"] == "member_csp")]
    out = []
    for eps in _epsilons(part):
        pieces = []
        for attack in _orders(part[part["arm"] == "attack_minus_control"], "attack", ATTACK_NAMES):
            rows = {r["arm"]: r for _, r in part[(part["epsilon"] == eps) & (part["attack"] == attack)].iterrows()}
            if "attack" not in rows or "control" not in rows:
                continue
            a, c = rows["attack"]["value"], rows["control"]["value"]
            low = rows["attack"].get("ci_low", np.nan)
            share = rows["attack_minus_control"].get("control_share", np.nan) if "attack_minus_control" in rows \
                else np.nan
            name = f"{ATTACK_NAMES.get(attack, attack)} {a:.3f} vs control {c:.3f}"
            if not (np.isfinite(low) and low > 0.5):  # a share of an excess the attack's own interval does not show
                pieces.append(f"{name} (attack not above chance: its interval starts at {low:.3f})")
            elif c >= a:
                pieces.append(f"{name} (the control reaches all of it)")
            elif np.isfinite(share):
                pieces.append(f"{name} ({max(share, 0.0):.0%} of the excess over 0.5)")
        if pieces:
            out.append(f"- ε = {_eps_text(eps)}: " + "; ".join(pieces) + ".")
    return out


def arm_table(summary: pd.DataFrame, model: str) -> list[str]:
    """The raw AUROC of every arm (attack, control, untrained) per (preprocessing, attack, ε): what each
    difference is made of. The untrained arm is shown, never tested."""
    part = summary[(summary["model"] == model) & summary["arm"].isin(["attack", "control", "untrained"])
                   & (summary["attack"] != "utility_accuracy")]
    epsilons = _epsilons(part)
    lines = ["| preprocessing | attack | arm | " + " | ".join(f"ε = {_eps_text(e)}" for e in epsilons) + " |",
             "|---|---|---|" + "---|" * len(epsilons)]
    index = {(r["preprocessing"], r["attack"], r["arm"], r["epsilon"]): r for _, r in part.iterrows()}
    for prep in _orders(part, "preprocessing", PREP_NAMES):
        for attack in _orders(part, "attack", ATTACK_NAMES):
            for arm in ("attack", "control", "untrained"):
                cells = [index.get((prep, attack, arm, e)) for e in epsilons]
                if all(c is None for c in cells):
                    continue
                lines.append(f"| {PREP_NAMES.get(prep, prep)} | {ATTACK_NAMES.get(attack, attack)} | {arm} | "
                             + " | ".join(_cell({**c, 'significant': False}, signed=False) if c is not None
                                          else "—" for c in cells) + " |")
    return lines


def family_note(summary: pd.DataFrame, model: str) -> str:
    cells = summary[(summary["model"] == model) & (summary["arm"] == "attack_minus_control")]
    n_sig = int(cells["significant"].sum()) if "significant" in cells else 0
    return (f"*{model}: every cell attack − control AUROC, paired (same clients, seeds and cross-fitted attacker), "
            f"95 % interval from a cluster bootstrap over subjects + seeds; `*`: one-sided bootstrap p < 0.05 after "
            f"Holm over this table's {len(cells)} attack − control cells (the family; controls and the untrained "
            f"model are never tested). {n_sig} of {len(cells)} cells significant.*")


def lead_lines(summary: pd.DataFrame, meta: dict | None = None) -> list[str]:
    """The section ``reports/study-b.md`` opens with."""
    if summary.empty:
        return []
    meta = meta or {}
    protocols = meta.get("protocols", {})
    lines = ["## How much membership federated training leaks, apart from preprocessing (eegmmidb)", "",
             "The attacks below are each read against a **preprocessing-only control**: the same protocol "
             "trained without the attacked client (its fold of client folds left out), scored through that "
             "client's own preprocessing. Attack − control is what training on the client adds. Members are 60 % "
             "of each subject's trials, calibration trials 20 % (only the calibration-fitted CSP reads them), "
             "non-members the paper's 20 %. ε is per local step (Laplace gradient DP), not a cumulative "
             "guarantee; the certified row composes every step (and DP-CSP's Gaussian release) per member trial.",
             ""]
    from eegprivacy.federated.preprocessing import PREPROCESSING

    present = _orders(summary, "preprocessing", PREP_NAMES)
    lines += ["What ε leaves out, per preprocessing (the certified row counts only what it covers):", "",
              *(f"- {PREP_NAMES.get(p, p)}: {PREPROCESSING[p].outside_epsilon}." for p in present
                if p in PREPROCESSING), ""]
    for model in _orders(summary, "model", ("simplenet", "eegnet")):
        proto = protocols.get(model, {})
        detail = (f" ({proto.get('num_rounds')} rounds × {proto.get('local_epochs')} local epochs, "
                  f"{proto.get('seeds')} seeds)") if proto else ""
        lines += [f"### {model}{detail}", "", *model_table(summary, model), "", family_note(summary, model), "",
                  "Member-fitted CSP: how much of the raw attack AUROC the preprocessing-only control explains —", "",
                  *explained_sentences(summary, model), ""]
    return lines


def report_md(summary: pd.DataFrame, meta: dict) -> str:
    """``reports/federated_control.md``: the lead tables, then every arm's raw AUROC."""
    lines = ["# Study B — attack − preprocessing-only control", "",
             f"Dataset {meta.get('dataset')} (version `{str(meta.get('dataset_version'))[:12]}`), "
             f"{meta.get('n_subjects')} subjects (one client each), {meta.get('control_folds')} client folds for "
             f"the controls, {meta.get('bootstrap')} bootstrap resamples over subjects + seeds. DP-CSP: ε = "
             f"{meta.get('dp_csp_epsilon')}, δ = {meta.get('dp_csp_delta')} per trial.", "",
             *lead_lines(summary, meta)]
    for model in _orders(summary, "model", ("simplenet", "eegnet")):
        lines += [f"## {model}: every arm's AUROC", "",
                  "*The untrained model is shown, never tested: its outputs are nearly constant, so it cannot show "
                  "what member-fitted preprocessing leaks.*", "", *arm_table(summary, model), ""]
    return "\n".join(lines) + "\n"


def draw(summary: pd.DataFrame, fig) -> None:
    """Attack − control against ε, one panel per model: colour = preprocessing, marker = attack, 95 % intervals."""
    from matplotlib.lines import Line2D

    models = _orders(summary, "model", ("simplenet", "eegnet"))
    axes = fig.subplots(1, max(len(models), 1), sharey=True, squeeze=False)[0]
    diffs = summary[summary["arm"] == "attack_minus_control"]
    preps = _orders(diffs, "preprocessing", PREP_NAMES)
    attacks = _orders(diffs, "attack", ATTACK_NAMES)
    colours = {p: f"C{i}" for i, p in enumerate(preps)}
    markers = dict(zip(attacks, "osD^vPX*"))
    for ax, model in zip(axes, models):
        part = diffs[diffs["model"] == model]
        epsilons = _epsilons(part)
        x = np.arange(len(epsilons))
        pairs = [(p, a) for p in preps for a in attacks
                 if not part[(part["preprocessing"] == p) & (part["attack"] == a)].empty]
        width = 0.8 / max(len(pairs), 1)
        for i, (prep, attack) in enumerate(pairs):
            rows = part[(part["preprocessing"] == prep) & (part["attack"] == attack)].set_index("epsilon")
            rows = rows.reindex(epsilons)
            offset = (i - (len(pairs) - 1) / 2) * width
            ax.errorbar(x + offset, rows["value"], yerr=[rows["value"] - rows["ci_low"],
                                                         rows["ci_high"] - rows["value"]],
                        fmt=markers[attack], color=colours[prep], ms=4, capsize=2, lw=1)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(x, [_eps_text(e) for e in epsilons])
        ax.set_xlabel("per-step ε")
        ax.set_title(f"{model}: attack − preprocessing-only control")
    axes[0].set_ylabel("AUROC difference (95 % CI, subjects + seeds)")
    handles = ([Line2D([], [], color=colours[p], lw=3, label=PREP_NAMES.get(p, p)) for p in preps]
               + [Line2D([], [], color="grey", marker=markers[a], ls="", label=ATTACK_NAMES.get(a, a))
                  for a in attacks])
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()


def summary_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest finished ``federated_control-<dataset>-summary`` run."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=[experiment],
                                  filter_string="tags.stage = 'federated_control' and attributes.status = 'FINISHED'")
    finally:
        mlflow.set_tracking_uri(previous)
    if runs.empty:
        return runs
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    return runs.sort_values("start_time", ascending=False).head(1).reset_index(drop=True)
