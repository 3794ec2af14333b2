"""Study B's controlled membership table, drawn and written: ``reports/federated_control.md``, its figure, the
metrics of the stage's MLflow summary run, and the lead section of ``reports/study-b.md`` rebuilt from that run.

Per model, a headline table (rows: preprocessing; columns: the per-step ε; each cell the non-member accuracy and the
loss-threshold attack − control AUROC, each with its subjects+seeds interval) and the table of every attack (the
Holm family): attack − control AUROC (the trained model minus the model that never saw the client, both through
the client's own preprocessing and normalisation) with ``*`` where the Holm-adjusted two-sided p < 0.05, and
``▼`` where the control scores significantly *above* the attack (a failed control: the arms differ in more than
membership).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from eegprivacy.reporting.calibration import tests_lines
from eegprivacy.tracking.runs import finished_stage_runs

ALPHA = 0.05
ATTACK_NAMES = {"loss": "loss threshold", "rla_lr": "RLA (lr)", "fla_lr": "FLA (lr)", "gla_lr": "GLA sound (lr)",
                "rla_rf": "RLA (rf)", "fla_rf": "FLA (rf)", "gla_rf": "GLA sound (rf)", "rla_mlp": "RLA (mlp)",
                "fla_mlp": "FLA (mlp)", "gla_mlp": "GLA sound (mlp)"}
HEADLINE_ATTACK = "loss"  # no attacker to fit: the attack a reader can check by hand
STATS = ("value", "ci_low", "ci_high", "p_value", "p_holm", "control_share", "certified_epsilon")


def _labels() -> dict[str, str]:
    """Each preprocessing option's table label, from its registry entry (one list of names)."""
    from eegprivacy.federated.preprocessing import PREPROCESSING

    return {name: entry.label for name, entry in PREPROCESSING.items()}
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
        out["failed_control"] = out["significant"] & out["value"].lt(0)
    return out


def _cell(row, signed: bool = True) -> str:
    if row is None or not np.isfinite(row["value"]):
        return "—"
    fmt = "{:+.3f}" if signed else "{:.3f}"
    text = f"{fmt.format(row['value'])} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    if bool(row.get("significant", False)):
        text += " ▼" if row["value"] < 0 else " *"
    return text


def _certified(value, step_epsilon: float) -> str:
    """The certified ε cell: ∞ without DP (MLflow keeps no infinite metric, so it is read off the step ε), "not
    certified" where the option lets a trial travel un-noised (NaN)."""
    if math.isinf(step_epsilon):
        return "∞"
    if value is None or not np.isfinite(value):
        return "not certified"
    return f"{value:,.0f}"


def _epsilons(summary: pd.DataFrame) -> list[float]:
    return sorted(summary["epsilon"].unique(), key=lambda e: (-math.inf if math.isinf(e) else -e))


def _orders(summary: pd.DataFrame, column: str, known) -> list[str]:
    present = list(dict.fromkeys(summary[column]))
    return [k for k in known if k in present] + [k for k in present if k not in known]


def headline_table(summary: pd.DataFrame, model: str) -> list[str]:
    """One model's headline: a row per preprocessing, a column per per-step ε; each cell the non-member accuracy
    and the loss-threshold attack − control, each with its subjects+seeds interval (and the Holm mark of the
    difference, from the model's family)."""
    part = summary[summary["model"] == model]
    epsilons = _epsilons(part)
    labels = _labels()
    index = {(r["preprocessing"], r["epsilon"], r["attack"], r["arm"]): r for _, r in part.iterrows()}
    lines = ["| preprocessing | fitted on | " + " | ".join(f"ε = {_eps_text(e)}" for e in epsilons) + " |",
             "|---|---|" + "---|" * len(epsilons)]
    from eegprivacy.federated.preprocessing import PREPROCESSING

    for prep in _orders(part, "preprocessing", labels):
        cells = []
        for e in epsilons:
            util = index.get((prep, e, "utility_accuracy", "attack"))
            diff = index.get((prep, e, HEADLINE_ATTACK, "attack_minus_control"))
            cells.append(f"accuracy {_cell(util, signed=False)}<br>loss attack − control {_cell(diff)}"
                         if util is not None else "—")
        fits = PREPROCESSING[prep].fits_on if prep in PREPROCESSING else "?"
        lines.append(f"| {labels.get(prep, prep)} | {fits} | " + " | ".join(cells) + " |")
    return lines


def model_table(summary: pd.DataFrame, model: str) -> list[str]:
    """One model's table of every attack: a utility row and each attack's attack − control row per preprocessing
    option, and the certified ε per member trial."""
    part = summary[summary["model"] == model]
    epsilons = _epsilons(part)
    index = {(r["preprocessing"], r["epsilon"], r["attack"], r["arm"]): r for _, r in part.iterrows()}
    header = "| preprocessing | row | " + " | ".join(f"ε = {_eps_text(e)}" for e in epsilons) + " |"
    lines = [header, "|---|---|" + "---|" * len(epsilons)]
    attacks = _orders(part[part["arm"] == "attack_minus_control"], "attack", ATTACK_NAMES)
    labels = _labels()
    for prep in _orders(part, "preprocessing", labels):
        util = [index.get((prep, e, "utility_accuracy", "attack")) for e in epsilons]
        lines.append(f"| {labels.get(prep, prep)} | non-member accuracy | "
                     + " | ".join(_cell(u, signed=False) for u in util) + " |")
        for attack in attacks:
            cells = [index.get((prep, e, attack, "attack_minus_control")) for e in epsilons]
            lines.append(f"| | {ATTACK_NAMES.get(attack, attack)}: attack − control | "
                         + " | ".join(_cell(c) for c in cells) + " |")
        eps_row = [index.get((prep, e, "utility_accuracy", "attack")) for e in epsilons]
        certified = [r.get("certified_epsilon", np.nan) if r is not None else np.nan for r in eps_row]
        lines.append(f"| | certified ε per member trial, whole run (RDP, replace-one) | "
                     + " | ".join(_certified(c, e) for c, e in zip(certified, epsilons)) + " |")
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
    labels = _labels()
    for prep in _orders(part, "preprocessing", labels):
        for attack in _orders(part, "attack", ATTACK_NAMES):
            for arm in ("attack", "control", "untrained"):
                cells = [index.get((prep, attack, arm, e)) for e in epsilons]
                if all(c is None for c in cells):
                    continue
                lines.append(f"| {labels.get(prep, prep)} | {ATTACK_NAMES.get(attack, attack)} | {arm} | "
                             + " | ".join(_cell({**c, 'significant': False}, signed=False) if c is not None
                                          else "—" for c in cells) + " |")
    return lines


def family_note(summary: pd.DataFrame, model: str) -> str:
    cells = summary[(summary["model"] == model) & (summary["arm"] == "attack_minus_control")]
    significant = cells["significant"].fillna(False).astype(bool) if "significant" in cells else cells["value"] * 0
    n_up = int((significant & cells["value"].gt(0)).sum())
    n_down = int((significant & cells["value"].lt(0)).sum())
    return (f"*{model}: attack − control AUROC, paired (same clients, seeds, preprocessing, normalisation and "
            f"cross-fitted attacker), 95 % interval from a cluster bootstrap over subjects + seeds; two-sided "
            f"bootstrap test, Holm over this model's {len(cells)} attack − control cells (the family; controls and "
            f"the untrained model are never tested): `*` training leaks (p_Holm < 0.05, attack above control), "
            f"`▼` failed control (p_Holm < 0.05, control above attack). {n_up} `*` and {n_down} `▼` of "
            f"{len(cells)} cells.*")


def failed_control_lines(summary: pd.DataFrame, model: str) -> list[str]:
    """Every cell where the control scores significantly above the attack, with its likely cause: the arms then
    differ in more than membership, so the cell says nothing about what training leaks."""
    cells = summary[(summary["model"] == model) & (summary["arm"] == "attack_minus_control")]
    if "failed_control" not in cells:
        return []
    failed = cells[cells["failed_control"].fillna(False).astype(bool)]
    labels = _labels()
    out = []
    for _, row in failed.iterrows():
        out.append(f"- **failed control** — {labels.get(row['preprocessing'], row['preprocessing'])}, "
                   f"{ATTACK_NAMES.get(row['attack'], row['attack'])}, ε = {_eps_text(row['epsilon'])}: "
                   f"{row['value']:+.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]. The model that never saw the "
                   "client separates its members better than the model trained on it: likely the control "
                   "federations (12 of 16 clients) generalise differently from the full one, so the control is "
                   "not equal to the attack in all but membership for this attack.")
    return out


def lead_lines(summary: pd.DataFrame, meta: dict | None = None) -> list[str]:
    """The section ``reports/study-b.md`` opens with."""
    if summary.empty:
        return []
    meta = meta or {}
    protocols = meta.get("protocols", {})
    lines = ["## How much membership federated training leaks, apart from preprocessing (eegmmidb)", "",
             "The attacks below are each read against a **preprocessing-only control**: the same protocol "
             "trained without the attacked client (its fold of client folds left out), scored through that "
             "client's own preprocessing, and (EEGNet) with BatchNorm statistics computed the same way in both arms, "
             "from the client's calibration block. Attack − control is what training on the client adds. Members "
             "are 60 % of each subject's trials, calibration trials 20 % (never trained on or attacked), "
             "non-members the paper's 20 %. ε is per local step (Laplace gradient DP), not a cumulative "
             "guarantee; the certified row composes every step (and DP-CSP's Gaussian release) per member trial "
             "under replace-one, δ = DP-CSP's δ.",
             ""]
    from eegprivacy.federated.preprocessing import PREPROCESSING

    labels = _labels()
    present = _orders(summary, "preprocessing", labels)
    lines += ["What each preprocessing is fitted on, and what ε leaves out (the certified row counts only what it "
              "covers; \"not certified\" where a trial travels un-noised beyond its client):", "",
              *(f"- {labels.get(p, p)} (fitted on {PREPROCESSING[p].fits_on}): {PREPROCESSING[p].outside_epsilon}."
                for p in present if p in PREPROCESSING), ""]
    profile = meta.get("profile")
    for model in _orders(summary, "model", ("simplenet", "eegnet")):
        proto = protocols.get(model, {})
        detail = ""
        if proto:
            eps = proto.get("epsilons")
            detail = (f" ({proto.get('num_rounds')} rounds × {proto.get('local_epochs')} local epochs, "
                      f"{proto.get('seeds')} seed{'s' if proto.get('seeds') != 1 else ''}"
                      + (f", ε ∈ {{{', '.join(_eps_text(float(e)) for e in eps)}}}" if eps else "")
                      + (f"; profile `{profile}`" if profile else "") + ")")
        lines += [f"### {model}{detail}", "",
                  "Headline: non-member accuracy (chance 0.5) and the loss-threshold attack − control AUROC, each "
                  "with its 95 % subjects+seeds interval.", "", *headline_table(summary, model), "",
                  "Every attack (the Holm family):", "", *model_table(summary, model), "",
                  family_note(summary, model), ""]
        failed = failed_control_lines(summary, model)
        if failed:
            lines += failed + [""]
        explained = explained_sentences(summary, model)
        if explained:
            lines += ["Member-fitted CSP: how much of the raw attack AUROC the preprocessing-only control explains —",
                      "", *explained, ""]
    return lines


def report_md(summary: pd.DataFrame, meta: dict) -> str:
    """``reports/federated_control.md``: the lead tables, then every arm's raw AUROC."""
    lines = ["# Study B — attack − preprocessing-only control", "",
             f"Dataset {meta.get('dataset')} (version `{str(meta.get('dataset_version'))[:12]}`), "
             f"{meta.get('n_subjects')} subjects (one client each), {meta.get('control_folds')} client folds for "
             f"the controls, {meta.get('bootstrap')} bootstrap resamples over subjects + seeds. DP-CSP: ε = "
             f"{meta.get('dp_csp_epsilon')}, δ = {meta.get('dp_csp_delta')} per trial, replace-one (σ for L2 "
             "sensitivity √2).", "",
             *lead_lines(summary, meta)]
    for model in _orders(summary, "model", ("simplenet", "eegnet")):
        lines += [f"## {model}: every arm's AUROC", "",
                  "*The untrained model is shown, never tested: its outputs are nearly constant, so it cannot show "
                  "what member-fitted preprocessing leaks.*", "", *arm_table(summary, model), ""]
    return "\n".join(lines + tests_lines("reports/federated_control.md")) + "\n"


def draw(summary: pd.DataFrame, fig) -> None:
    """Attack − control against ε, one panel per model: colour = preprocessing, marker = attack, 95 % intervals."""
    from matplotlib.lines import Line2D

    models = _orders(summary, "model", ("simplenet", "eegnet"))
    axes = fig.subplots(1, max(len(models), 1), sharey=True, squeeze=False)[0]
    diffs = summary[summary["arm"] == "attack_minus_control"]
    labels = _labels()
    preps = _orders(diffs, "preprocessing", labels)
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
    handles = ([Line2D([], [], color=colours[p], lw=3, label=labels.get(p, p)) for p in preps]
               + [Line2D([], [], color="grey", marker=markers[a], ls="", label=ATTACK_NAMES.get(a, a))
                  for a in attacks])
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()


def summary_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest finished ``federated_control-<dataset>-summary`` run."""
    runs = finished_stage_runs(uri, experiment, "federated_control")
    if runs.empty:
        return runs
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    return runs.sort_values("start_time", ascending=False).head(1).reset_index(drop=True)
