"""Stage ``federated_mia_report`` (study B): the per-dataset rows of ``federated-mia`` turned into the headline
JSON, an across-rounds summary table, tables in the shape of the paper's Tables 4-9 and the figures.

Two spreads, named apart. ``std`` (the paper's ±) is the standard deviation across federated rounds of one run,
averaged over seeds: how a score moves during training, not uncertainty. ``ci_low``/``ci_high`` is the 95 %
Student-t interval across seeds (split, initialisation, client sampling and DP noise all change with the seed) of
each seed's mean over rounds: the uncertainty of the number. Chance levels stand beside every attack score.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import atomic_path, write_text_atomic  # noqa: E402
from eegprivacy.attacks.membership import loss_gap_regression  # noqa: E402
from eegprivacy.evaluation.intervals import mean_ci  # noqa: E402

NAME = "federated-mia-report"
HELP = "Study B: headline JSON, Tables 4-9-shaped markdown and figures from federated-mia's per-dataset rows."

NOTE = ("ε is per mechanism application (one local optimiser step on one batch gradient), not a cumulative "
        "guarantee over steps, epochs or rounds.")
ATTACKS = ("rla", "fla", "gla_paper", "gla_sound", "cla", "rla_untrained_control", "fla_untrained_control")
KEYS = ["dataset", "synthetic", "model", "epsilon", "attack", "attacker", "metric"]


def add_arguments(parser) -> None:
    parser.add_argument("--inputs", nargs="+", default=["metrics/federated_mia_eegmat.csv",
                                                         "metrics/federated_mia_synthetic_mi.csv"])
    parser.add_argument("--json", default="metrics/federated_mia.json")
    parser.add_argument("--summary", default="metrics/federated_mia.csv")
    parser.add_argument("--tables", default="reports/federated_mia_tables.md")
    parser.add_argument("--figures", default="reports/figures")
    parser.add_argument("--accounting", default="metrics/federated_accounting.csv",
                        help="federated-accounting's rows: cumulative ε beside every per-step ε")


def across_rounds(tidy: pd.DataFrame) -> pd.DataFrame:
    """Per seed: mean and std (ddof 1) over rounds. Across seeds: the mean, the round-std averaged, and the 95 %
    t-interval of the per-seed means (nan with one seed); chance beside."""
    frame = tidy.copy()
    for column in ("attack", "attacker"):
        frame[column] = frame[column].fillna("")
    per_seed = frame.groupby([*KEYS, "seed"], dropna=False).agg(
        mean=("value", "mean"), std=("value", lambda v: v.std(ddof=1) if v.notna().sum() > 1 else np.nan),
        n_rounds=("value", "count"), chance=("chance", "first")).reset_index()
    out = per_seed.groupby(KEYS, dropna=False).agg(
        mean=("mean", "mean"), std=("std", "mean"), n_rounds=("n_rounds", "mean"), chance=("chance", "first"),
        n_seeds=("seed", "nunique")).reset_index()
    intervals = per_seed.groupby(KEYS, dropna=False)["mean"].apply(
        lambda v: mean_ci(v.dropna())[1:] if v.notna().any() else (np.nan, np.nan))
    bounds = pd.DataFrame(intervals.tolist(), index=intervals.index, columns=["ci_low", "ci_high"]).reset_index()
    out = out.merge(bounds, on=KEYS, how="left")
    # A t-interval knows nothing of a score's range: clip scores (not losses, norms or counts) to [0, 1].
    scores = ~out["metric"].str.contains("loss|grad_norm|noise_scale|n_clients", regex=True)
    out.loc[scores, ["ci_low", "ci_high"]] = out.loc[scores, ["ci_low", "ci_high"]].clip(0.0, 1.0)
    return out


def _eps(e: float) -> str:
    return "inf" if not math.isfinite(float(e)) else f"{float(e):g}"


class Cumulative:
    """Cumulative ε after the run's rounds, read from federated-accounting's rows: per example, worst case (a
    client may join every round), the tightest of the accountants that gave a number, for both calibrations.
    Without the rows every lookup says so ("n/a") rather than inventing a number."""

    def __init__(self, path: str | None):
        self.rows = None
        if path and Path(path).exists():
            rows = pd.read_csv(path)
            rows = rows[rows["metric"].isin(["epsilon_cumulative", "epsilon_per_round"])
                        & (rows["protocol"] == "params")
                        & (rows["unit"] == "example") & (rows["rounds_basis"] == "worst_case")]
            self.rows = rows
            self.delta = float(rows["delta"].iloc[0]) if len(rows) else float("nan")

    def value(self, dataset: str, model: str, eps: float, calibration: str,
              metric: str = "epsilon_cumulative") -> float:
        """``metric``: "epsilon_cumulative" (after all rounds) or "epsilon_per_round" (one round's steps)."""
        if self.rows is None:
            return float("nan")
        hit = self.rows[(self.rows["metric"] == metric) & (self.rows["dataset"] == dataset)
                        & (self.rows["model"] == model)
                        & (self.rows["calibration"] == calibration)
                        & np.isclose(self.rows["epsilon"].astype(float), float(eps))]
        if not math.isfinite(float(eps)):
            return math.inf
        values = hit["value"].dropna()
        return float(values.min()) if len(values) else float("nan")

    def text(self, dataset: str, model: str, eps: float, calibration: str = "nominal",
             metric: str = "epsilon_cumulative") -> str:
        v = self.value(dataset, model, eps, calibration, metric)
        return "∞" if v == math.inf else "n/a" if not math.isfinite(v) else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    def note(self) -> str:
        if self.rows is None:
            return "Cumulative ε: n/a (run `eegprivacy federated-accounting` first)."
        return ("ε per round = one round's local steps composed (nominal); "
                f"Σε = cumulative ε after all rounds at δ = {self.delta:g}, per example (one trial), worst case "
                "(its "
                "client joins every round), the tightest of basic/RDP/PLD (reports/federated_accounting.md); "
                "nominal takes the paper's per-step ε at face value, certified is what the noise guarantees "
                "(2·√d·ε per step, d = parameter count). Neither covers EEGNet's un-noised BatchNorm statistics.")


def _clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def headline(summary: pd.DataFrame, regressions: dict) -> dict:
    out: dict = {"epsilon_scope": NOTE, "loss_gap_vs_rla_accuracy": regressions}
    keep = summary[summary["metric"].isin(["utility_accuracy", "utility_f1", "utility_auroc", "accuracy", "auroc"])
                   & ((summary["attack"] == "") | (summary["metric"].isin(["accuracy", "auroc"])))]
    for r in keep.to_dict("records"):
        key = "/".join([r["dataset"], r["model"], f"eps_{_eps(r['epsilon'])}",
                        *([r["attack"], r["attacker"]] if r["attack"] else ["utility"]),
                        r["metric"].removeprefix("utility_")])
        out[key] = {"mean": _clean(float(r["mean"])), "std_across_rounds": _clean(float(r["std"])),
                    "ci95_across_seeds": [_clean(float(r["ci_low"])), _clean(float(r["ci_high"]))],
                    "n_seeds": int(r["n_seeds"]), "chance": _clean(float(r["chance"])),
                    "synthetic": bool(r["synthetic"])}
    return out


def _cell(summary, dataset, model, eps, metric, attack="", attacker="", pct=True) -> str:
    hit = summary[(summary["dataset"] == dataset) & (summary["model"] == model) & (summary["epsilon"] == eps)
                  & (summary["metric"] == metric) & (summary["attack"] == attack)
                  & (summary["attacker"] == attacker)]
    if hit.empty or not np.isfinite(hit["mean"].iloc[0]):
        return "–"
    m, s = float(hit["mean"].iloc[0]), float(hit["std"].iloc[0])
    lo, hi = float(hit["ci_low"].iloc[0]), float(hit["ci_high"].iloc[0])
    k = 100.0 if pct else 1.0
    digits = 1 if pct else 2
    text = f"{k * m:.{digits}f} ± {k * s:.{digits}f}" if np.isfinite(s) else f"{k * m:.{digits}f}"
    return text + (f" [{k * lo:.{digits}f}, {k * hi:.{digits}f}]" if np.isfinite(lo) else "")


def _chance(summary, dataset, metric, attack) -> str:
    hit = summary[(summary["dataset"] == dataset) & (summary["metric"] == metric) & (summary["attack"] == attack)]
    values = hit["chance"].dropna()
    return f"{100 * values.mean():.1f}" if len(values) else "–"


def _methods(model: str, eps: float) -> str:
    name = {"simplenet": "SimpleNet", "eegnet": "EEGNet"}.get(model, model)
    return f"FL-{name}" if not math.isfinite(eps) else f"DP-FL-{name}"


def _eps_cells(cum: Cumulative, dataset: str, model: str, e: float) -> str:
    per_step = "–" if not math.isfinite(e) else f"{e:g}"
    return (f"{per_step} | {cum.text(dataset, model, e, 'nominal', 'epsilon_per_round')} | "
            f"{cum.text(dataset, model, e, 'nominal')} | {cum.text(dataset, model, e, 'certified')}")


def tables_md(summary: pd.DataFrame, regressions: dict, cum: Cumulative | None = None) -> str:
    cum = cum or Cumulative(None)
    lines = ["# Study B: federated membership inference — tables", "",
             "Each cell: mean ± std across federated rounds (the paper's ±: how a score moves during one run, "
             "averaged over seeds) [95 % t-interval across seeds of each seed's mean over rounds: the uncertainty; "
             "clipped to the score's range]. "
             f"Scores in %, losses as they are. {NOTE} Chance levels in the last row of each attack table "
             "(accuracy chance is the majority share of the attacker-test half: members are 80 % of the trials, "
             "so RLA/FLA accuracy near 80 % is no leakage; read AUROC and TPR at low FPR).", "",
             "GLA (paper) classifies real client updates against Gaussian vectors matched to their mean and "
             "variance. It can score near 100 % with no membership signal at all: it detects that an update is a "
             "real update rather than noise (structure, correlations, tails the matching leaves out), which holds "
             "for updates computed on non-members just as well; under DP the noised updates look more like noise, "
             "so its fall says nothing about membership either. GLA (sound) compares updates of the same global "
             "model on equally many member and non-member trials, split by client, so membership is the only "
             "difference it can learn.", "", "ε is per step; " + cum.note(), ""]
    for dataset in sorted(summary["dataset"].unique()):
        part = summary[summary["dataset"] == dataset]
        synthetic = bool(part["synthetic"].iloc[0])
        title = f"{'SYNTHETIC ' if synthetic else ''}{dataset}"
        order = [(m, e) for e in sorted(part["epsilon"].unique(), key=lambda x: (math.isfinite(x), -x))
                 for m in part["model"].unique()]
        lines += [f"## {title}: classification (shape of Tables 4/7)", "",
                  "| Methods | ε per step | ε per round | Σε nominal | Σε certified | Acc | Precision | Recall | F1 | "
                  "AUROC | "
                  "Avg training loss | Avg testing loss |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m, e in order:
            cells = [_cell(part, dataset, m, e, f"utility_{k}") for k in ("accuracy", "precision", "recall", "f1",
                                                                        "auroc")]
            cells += [_cell(part, dataset, m, e, k, pct=False) for k in ("train_loss", "test_loss")]
            lines.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | " + " | ".join(cells) + " |")
        lines.append("")
        for attacker in sorted(a for a in part["attacker"].unique() if a):
            lines += [f"## {title}: attacks, {attacker.upper()} attacker (shape of Tables 5/6, 8/9)", "",
                      "| Methods | ε per step | ε per round | Σε nominal | Σε certified | RLA Acc | RLA AUROC | FLA Acc | FLA AUROC | GLA (paper) Acc | GLA (paper) AUROC | "
                      "GLA (paper) TPR@1%FPR | GLA (sound) Acc | GLA (sound) AUROC | GLA (sound) TPR@1%FPR | "
                      "CLA Acc | CLA AUROC |",
                      "| --- | --- | --- | --- | --- |" + " --- |" * 12]
            spec = [("rla", "accuracy"), ("rla", "auroc"), ("fla", "accuracy"), ("fla", "auroc"),
                    ("gla_paper", "accuracy"), ("gla_paper", "auroc"), ("gla_paper", "tpr_at_fpr_0.01"),
                    ("gla_sound", "accuracy"), ("gla_sound", "auroc"), ("gla_sound", "tpr_at_fpr_0.01"),
                    ("cla", "accuracy"), ("cla", "auroc")]
            for m, e in order:
                cells = [_cell(part, dataset, m, e, metric, attack, attacker) for attack, metric in spec]
                lines.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | " + " | ".join(cells) + " |")
            lines.append("| chance | | | | | " + " | ".join(_chance(part, dataset, metric, attack) for attack, metric in spec)
                         + " |")
            lines.append("")
            control = [("rla_untrained_control", "auroc"), ("fla_untrained_control", "auroc")]
            if (part["attack"] == control[0][0]).any():
                lines += [f"Negative control, {attacker.upper()} attacker: RLA and FLA on the untrained initial "
                          "model (it has seen no trial; anything above chance comes from each client's "
                          "member-fitted CSP, not from training).", "",
                          "| Methods | ε per step | ε per round | Σε nominal | Σε certified | "
                          "RLA AUROC (untrained) | "
                          "FLA AUROC (untrained) |", "| --- | --- | --- | --- | --- | --- | --- |"]
                for m, e in order:
                    cells = [_cell(part, dataset, m, e, metric, attack, attacker) for attack, metric in control]
                    lines.append(f"| {_methods(m, e)} | {_eps_cells(cum, dataset, m, e)} | "
                                 + " | ".join(cells) + " |")
                lines.append("")
        for attacker, metric in REGRESSIONS:
            reg = regressions.get(f"{dataset}/rla_{metric}_{attacker}")
            what = f"RLA {metric} ({attacker.upper()} attacker)"
            if reg and "error" in reg:
                lines += [f"Loss gap vs {what}: no regression ({reg['error']}).", ""]
            elif reg:
                lines += [f"Loss gap (test − train loss) vs {what}, OLS over rounds and cells: slope "
                          f"{reg['slope']:.3g}, R² = {reg['r2']:.3f}, p = {reg['p_value']:.3g}, n = {reg['n']} "
                          "(successive rounds are autocorrelated: p is optimistic).", ""]
    return "\n".join(lines) + "\n"


# (attacker, RLA metric) pairs regressed on the loss gap: RF accuracy, because LR's accuracy mostly sits at the
# majority guess (members are 80 %) and has nothing to regress; LR AUROC, which does not move with the ratio.
REGRESSIONS = (("rf", "accuracy"), ("lr", "auroc"))


def regressions_by_dataset(tidy: pd.DataFrame) -> dict:
    """OLS of RLA scores on the loss gap over every (model, ε, seed, round) of a dataset."""
    out = {}
    for dataset, part in tidy.groupby("dataset"):
        gap = part[part["metric"] == "loss_gap"].set_index(["model", "epsilon", "seed", "round"])["value"]
        for attacker, metric in REGRESSIONS:
            rla = part[(part["attack"] == "rla") & (part["attacker"] == attacker) & (part["metric"] == metric)]
            rla = rla.set_index(["model", "epsilon", "seed", "round"])["value"]
            joined = pd.concat([gap.rename("gap"), rla.rename("rla")], axis=1).dropna()
            key = f"{dataset}/rla_{metric}_{attacker}"
            if len(joined) and np.ptp(joined["rla"].to_numpy()) == 0:
                out[key] = {"error": f"RLA {metric} ({attacker}) is the same in every round: nothing to regress"}
                continue
            try:
                out[key] = {**loss_gap_regression(joined["gap"], joined["rla"]),
                            "points": joined.reset_index().to_dict("list")}
            except ValueError as err:  # too few rounds or a constant gap: say so instead of failing the report
                out[key] = {"error": str(err)}
    return out


def _suffix(synthetic: bool) -> str:
    return " (SYNTHETIC)" if synthetic else ""


def figures(tidy: pd.DataFrame, regressions: dict, folder: Path, cum: Cumulative | None = None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cum = cum or Cumulative(None)

    def eps_label(d, m, e):  # per-step ε with the per-round and cumulative (nominal, worst case) beside it
        return f"ε={_eps(e)}/step, {cum.text(d, m, e, 'nominal', 'epsilon_per_round')}/round, Σε={cum.text(d, m, e)}"

    datasets = sorted(tidy["dataset"].unique())
    models = list(dict.fromkeys(tidy["model"]))
    synth = {d: bool(tidy[tidy["dataset"] == d]["synthetic"].iloc[0]) for d in datasets}
    paths = []

    # RLA accuracy across rounds for ε ∈ {∞, 5, 1}
    fig, axes = plt.subplots(len(datasets), len(models), figsize=(4.5 * len(models), 3.2 * len(datasets)),
                             squeeze=False)
    for i, d in enumerate(datasets):
        for j, m in enumerate(models):
            ax = axes[i, j]
            rla = tidy[(tidy["dataset"] == d) & (tidy["model"] == m) & (tidy["attack"] == "rla")
                       & (tidy["metric"] == "accuracy")]
            for k, e in enumerate((math.inf, 5.0, 1.0)):
                for attacker, style in (("lr", "-"), ("rf", "--")):
                    one = rla[(rla["epsilon"] == e) & (rla["attacker"] == attacker)]
                    line = one.groupby("round")["value"].mean()
                    if len(line):
                        ax.plot(line.index, line.values, style, color=f"C{k}", marker="o", ms=3,
                                label=f"{eps_label(d, m, e)}, {attacker.upper()}")
            if len(rla):
                ax.axhline(rla["chance"].mean(), color="grey", ls="--", lw=1, label="chance (majority)")
            ax.set(title=f"{d}{_suffix(synth[d])}: {m}", xlabel="round", ylabel="RLA accuracy")
            ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.text(0.01, 0.01, "per round: one round's local steps composed; Σε: cumulative ε after all rounds (nominal, "
             "per example, worst case); see "
             "reports/federated_accounting.md", fontsize=7)
    paths.append(_save(fig, folder / "federated_mia_rla_rounds.png"))

    # member vs non-member per-sample gradient norms (last round, quantiles)
    qs = tidy[tidy["metric"].str.match(r"grad_norm_(member|nonmember)_q\d+")]
    epsilons = sorted(tidy["epsilon"].unique(), key=lambda x: (math.isfinite(x), -x))
    fig, axes = plt.subplots(len(datasets) * len(models), len(epsilons),
                             figsize=(3.2 * len(epsilons), 2.6 * len(datasets) * len(models)), squeeze=False)
    for i, (d, m) in enumerate([(d, m) for d in datasets for m in models]):
        for j, e in enumerate(epsilons):
            ax = axes[i, j]
            part = qs[(qs["dataset"] == d) & (qs["model"] == m) & (qs["epsilon"] == e)]
            for who, color in (("member", "C0"), ("nonmember", "C1")):
                p = part[part["metric"].str.startswith(f"grad_norm_{who}_q")]
                if len(p):
                    p = p.assign(q=p["metric"].str[-3:].astype(int) / 100).groupby("q")["value"].mean()
                    ax.plot(p.values, p.index, color=color, label=who)
            ax.set_title(f"{d}{_suffix(synth[d])}\n{m} {eps_label(d, m, e)} (last round)", fontsize=8)
            ax.set(xlabel="per-sample gradient norm", ylabel="CDF")
            if len(part):
                ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(_save(fig, folder / "federated_mia_grad_norms.png"))

    # per-client accuracy boxplots per (model, ε), last round
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 3.6), squeeze=False)
    for i, d in enumerate(datasets):
        part = tidy[(tidy["dataset"] == d) & (tidy["metric"] == "client_accuracy")]
        last = part[part["round"] == part["round"].max()]
        groups = [(m, e) for m in models for e in epsilons]
        data = [last[(last["model"] == m) & (last["epsilon"] == e)]["value"].to_numpy() for m, e in groups]
        axes[0, i].boxplot(data, tick_labels=[f"{m}\nε={_eps(e)}\nΣε={cum.text(d, m, e)}" for m, e in groups])
        axes[0, i].axhline(0.5, color="grey", ls="--", lw=1)
        axes[0, i].set(title=f"{d}{_suffix(synth[d])}: per-client accuracy (last round)", ylabel="accuracy")
        axes[0, i].tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    paths.append(_save(fig, folder / "federated_mia_client_accuracy.png"))

    # loss gap vs RLA score with OLS
    fig, axes = plt.subplots(len(REGRESSIONS), len(datasets), figsize=(4.8 * len(datasets), 3.4 * len(REGRESSIONS)),
                             squeeze=False)
    for i, d in enumerate(datasets):
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
            ax.set(title=f"{d}{_suffix(synth[d])}", xlabel="loss gap (test − train)",
                   ylabel=f"RLA {metric} ({attacker.upper()})")
    fig.tight_layout()
    paths.append(_save(fig, folder / "federated_mia_loss_gap.png"))
    return paths


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path


def run(args) -> int:
    frames = []
    for path in args.inputs:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run `eegprivacy federated-mia --dataset ...` first")
        frames.append(pd.read_csv(path, float_precision="round_trip"))
    tidy = pd.concat(frames, ignore_index=True)
    summary = across_rounds(tidy)
    regressions = regressions_by_dataset(tidy)
    with atomic_path(args.summary) as tmp:
        summary.to_csv(tmp, index=False)
    json_regs = {d: {k: v for k, v in r.items() if k != "points"} for d, r in regressions.items()}
    cum = Cumulative(getattr(args, "accounting", None))
    top = headline(summary, json_regs)
    top["cumulative_epsilon"] = {
        f"{d}/{m}/eps_{_eps(e)}": {c: _clean(cum.value(d, m, e, c)) for c in ("nominal", "certified")}
        for d, m, e in summary[["dataset", "model", "epsilon"]].drop_duplicates().itertuples(index=False)}
    top["cumulative_epsilon_scope"] = cum.note()
    write_text_atomic(args.json, json.dumps(top, indent=1, sort_keys=True) + "\n")
    write_text_atomic(args.tables, tables_md(summary, json_regs, cum))
    paths = figures(tidy, regressions, Path(args.figures), cum)
    print(f"federated-mia report: {len(summary)} summary rows -> {args.json}, {args.tables}, "
          f"{len(paths)} figures in {args.figures}")
    return 0
