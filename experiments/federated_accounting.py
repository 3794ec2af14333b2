"""Stage ``federated_accounting`` (study B): what the per-step Laplace gradient DP adds up to over a whole run.

Every (dataset, model, ε) of params/federated_mia.yaml's grid, plus the paper's protocol (20 rounds × 20 local
epochs; always includes the closing note's per-step ε = 5), is written as dp_accounting events — one Laplace
event per local step, self-composed over a round's steps and over the rounds — for two privacy units (an example,
a client) and two calibrations (nominal: the paper's ε per step; certified: 2·sqrt(d)·ε, what L2 clipping with
coordinate-wise Laplace actually certifies). Each is composed under basic composition, RDP and PLD at the stated
δ. Per-step, per-round and cumulative ε sit side by side in every output; the cumulative ε is given after every
round (the figure's curves) and, labelled as not a guarantee, at the expected number of rounds a client joins.

No training runs: the step count needs only each client's member count (the same ``member_split`` as
federated_mia) and the gradient dimension d, which is counted on a freshly built model whose input shape comes
from one client's CSP, as in ``Federation``.
"""

from __future__ import annotations

import json
import math
import time
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from eegprivacy.atomic import atomic_paths  # noqa: E402
from eegprivacy.params import ParamsError, load_params  # noqa: E402
from eegprivacy.privacy.accounting import (  # noqa: E402
    CALIBRATIONS,
    PRIVACY_UNITS,
    ROUND_BASES,
    FederatedSchedule,
    expected_rounds,
    federated_round_event,
    make_accountant,
    per_step_epsilon,
)
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run  # noqa: E402

NAME = "federated-accounting"
HELP = ("Study B: cumulative ε of the per-step Laplace gradient DP over local steps and rounds (basic, RDP, PLD "
        "at a stated δ), per privacy unit (example, client) and calibration (nominal, certified); no training.")

STAGE = "federated_accounting"
CURVE_COLUMNS = ["protocol", "dataset", "synthetic", "model", "dim", "epsilon", "calibration", "unit", "accountant",
                 "round", "value"]
CLOSING_NOTE_EPSILON = 5.0  # the closing note's configuration: per-step nominal ε = 5, paper protocol
COVERAGE_NOTE = (
    "Not covered by any of these numbers: BatchNorm running statistics (EEGNet) are computed from the client's "
    "data in the forward pass and sent with the weights without noise; the client's reply also carries its "
    "train loss, its number of examples and the pre-clip gradient norms (mean, max) unnoised. As implemented, "
    "EEGNet therefore has no formal DP guarantee at any epsilon, and both models leak those metrics.")
UNIT_NOTE = (
    "Privacy unit the clip protects: the batch. Each step clips the client's batch gradient (not each example's) "
    "to L2 <= C, so replacing one trial or the whole batch moves it by the same <= 2C; an example therefore gets "
    "no more protection than its entire batch, and the noise is not reduced by the batch size as per-example "
    "clipping would allow. An example is in one batch per local epoch (local_epochs steps per round joined); a "
    "client pays every step of every round it joins. With one batch per epoch (members <= batch_size) the two "
    "coincide: a single trial and the whole subject get the same epsilon.")


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/federated_accounting.yaml", help="accounting knobs (δ, ...)")
    parser.add_argument("--grid", default="params/federated_mia.yaml", help="study B grid (federated_mia)")
    parser.add_argument("--datasets", nargs="*", help="subset of the grid's datasets (default: all)")
    parser.add_argument("--out", default="metrics/federated_accounting.csv", help="tidy rows")
    parser.add_argument("--summary", default="metrics/federated_accounting.json", help="headline numbers")
    parser.add_argument("--curves", default="plots/federated_accounting_curves.csv",
                        help="cumulative ε after every round (plot data)")
    parser.add_argument("--report", default="reports/federated_accounting.md", help="markdown tables")
    parser.add_argument("--figure", default="reports/figures/federated_accounting.png")


# ---- inputs: step counts and dimensions, no training -----------------------------------------------------------

def federation_shape(name: str, spec: dict, grid: dict) -> dict:
    """Member counts per client and each model's gradient dimension d (trainable parameters; the DP step noises
    exactly those) for one dataset of the grid, split and CSP'd as federated_mia does."""
    from eegprivacy.federated.splits import member_split
    from eegprivacy.federated.torch_task import TorchTask
    from eegprivacy.signal.csp import MODEL_INPUT, ClientCSP

    from experiments.federated_mia import load_trials

    dataset, trials = load_trials(name, spec)
    member = member_split(trials.y, trials.metadata["subject"], float(grid["test_size"]), int(grid["split_seed"]))
    subjects = trials.metadata["subject"].to_numpy()
    rows_of = [subjects == s for s in trials.subjects()]  # subject ids stay here; clients are indices
    members = [int((rows & member).sum()) for rows in rows_of]
    first = rows_of[0] & member
    models = {}
    for model in grid["models"]:
        csp = ClientCSP(n_components=int(grid["csp_components"]), output=MODEL_INPUT[model])
        shape = csp.fit(trials.X[first], trials.y[first]).transform(trials.X[first][:1]).shape[1:]
        net = TorchTask(model, shape).build(0)
        models[model] = {
            "dim": int(sum(p.numel() for p in net.parameters() if p.requires_grad)),
            "input_shape": [int(s) for s in shape],
            "unnoised_buffer_values": int(sum(b.numel() for b in net.buffers() if b.is_floating_point()))}
    return {"version": dataset.version(), "synthetic": bool(trials.synthetic), "n_clients": len(members),
            "members_min": min(members), "members_max": max(members), "models": models}


def protocols(grid: dict, acc: dict) -> list[dict]:
    """The params grid's (rounds, epochs, ε) and the paper protocol, which always carries the closing-note ε."""
    paper = acc["paper_protocol"]
    paper_eps = sorted({float(e) for e in paper["epsilons"]} | {CLOSING_NOTE_EPSILON}, reverse=True)
    return [{"protocol": "params", "num_rounds": int(grid["num_rounds"]), "local_epochs": int(grid["local_epochs"]),
             "epsilons": [float(e) for e in grid["epsilons"]]},
            {"protocol": "paper", "num_rounds": int(paper["num_rounds"]), "local_epochs": int(paper["local_epochs"]),
             "epsilons": paper_eps}]


# ---- accounting ----------------------------------------------------------------------------------------------

class CurveCache:
    """Curves depend only on (accountant, per-step ε, steps per round, rounds, δ); datasets, models and units
    share many of them (e.g. example = client with one batch per epoch), so each is computed once."""

    def __init__(self, accountants: dict, delta: float):
        self.accountants, self.delta, self._memo = accountants, delta, {}

    def curve(self, name: str, event, key: tuple):
        if (name, key) not in self._memo:
            rounds = key[-1]
            self._memo[(name, key)] = self.accountants[name].curve(event, list(range(1, rounds + 1)), self.delta)
        return self._memo[(name, key)]


def cell_rows(cache: CurveCache, base: dict, *, epsilon: float, dim: int, calibration: str, unit: str,
              schedule: FederatedSchedule, rounds_expected: int, clip_norm: float) -> list[dict]:
    """Per-step ε, then per accountant: per-round ε, cumulative ε after every round, and at the expected
    participation."""
    step_eps = per_step_epsilon(epsilon, calibration, dim, clip_norm)
    steps = schedule.steps_per_round(unit)
    event = federated_round_event(epsilon, calibration=calibration, unit=unit, dim=dim, schedule=schedule,
                                  clip_norm=clip_norm)
    common = {**base, "epsilon": epsilon, "dim": dim, "calibration": calibration, "unit": unit,
              "num_rounds": schedule.num_rounds, "local_epochs": schedule.local_epochs,
              "batches_per_epoch": schedule.batches_per_epoch, "steps_per_round": steps}
    rows = [{**common, "metric": "epsilon_per_step", "accountant": "none", "round": float("nan"),
             "value": step_eps, "rounds_basis": "none", "detail": "one local step"}]
    for name in cache.accountants:
        curve = cache.curve(name, event, (step_eps, steps, schedule.num_rounds))
        for r, bound in enumerate(curve, start=1):
            rows.append({**common, "metric": "epsilon_cumulative", "accountant": name, "round": r,
                         "value": bound.epsilon, "rounds_basis": "worst_case", "detail": bound.detail,
                         "seconds": bound.seconds})
            if r == 1:  # one round's steps: the per-round ε, reported beside the cumulative one
                rows.append({**rows[-1], "metric": "epsilon_per_round"})
        expected = curve[rounds_expected - 1]
        rows.append({**common, "metric": "epsilon_cumulative_expected", "accountant": name,
                     "round": rounds_expected, "value": expected.epsilon, "rounds_basis": "expected",
                     "detail": "NOT a guarantee: mean participation, no sampling amplification; " + expected.detail,
                     "seconds": expected.seconds})
    return rows


# ---- outputs -------------------------------------------------------------------------------------------------

def _num(value: float):
    """JSON has no infinity or NaN: ε = ∞ (no noise) is written as "inf", a skipped accountant as null (its
    reason is in ``skipped``)."""
    if math.isnan(value):
        return None
    return "inf" if math.isinf(value) else round(float(value), 4)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "skipped†"
    if math.isinf(value):
        return "∞"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def finals(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per cell with per-step, per-round (per accountant), cumulative (per accountant, last round) and
    expected-participation ε."""
    keys = ["protocol", "dataset", "synthetic", "model", "dim", "epsilon", "calibration", "unit", "num_rounds",
            "local_epochs", "steps_per_round"]
    last = tidy[(tidy.metric == "epsilon_cumulative") & (tidy["round"] == tidy["num_rounds"])]
    wide = last.pivot_table(index=keys, columns="accountant", values="value", aggfunc="first")
    wide.columns = [f"cumulative_{c}" for c in wide.columns]
    per_round = tidy[tidy.metric == "epsilon_per_round"].pivot_table(index=keys, columns="accountant",
                                                                     values="value", aggfunc="first")
    per_round.columns = [f"per_round_{c}" for c in per_round.columns]
    expected = tidy[tidy.metric == "epsilon_cumulative_expected"].pivot_table(
        index=keys, columns="accountant", values=["value", "round"], aggfunc="first")
    expected_cols = {f"expected_{c}": expected[("value", c)] for c in expected["value"].columns}
    expected_cols["expected_rounds"] = expected["round"].iloc[:, 0]
    step = tidy[tidy.metric == "epsilon_per_step"].set_index(keys)["value"].rename("per_step")
    return pd.concat([step, per_round, wide, pd.DataFrame(expected_cols)], axis=1).reset_index()


def summary_json(tidy: pd.DataFrame, shapes: dict, acc: dict, accountants: dict, timings: dict) -> dict:
    table = finals(tidy)
    names = list(accountants)
    results = {}
    for row in table.itertuples(index=False):
        cell = results.setdefault(row.protocol, {}).setdefault(row.dataset, {}).setdefault(row.model, {}) \
            .setdefault(f"epsilon_{row.epsilon:g}", {}).setdefault(row.calibration, {})
        cell[row.unit] = {
            "num_rounds": int(row.num_rounds), "local_epochs": int(row.local_epochs),
            "steps_per_round": int(row.steps_per_round), "epsilon_per_step": _num(row.per_step),
            "epsilon_per_round": {n: _num(getattr(row, f"per_round_{n}")) for n in names},
            "epsilon_cumulative": {n: _num(getattr(row, f"cumulative_{n}")) for n in names},
            "expected_rounds": int(row.expected_rounds),
            "epsilon_cumulative_expected_not_guaranteed": {n: _num(getattr(row, f"expected_{n}")) for n in names}}
    for row in tidy[tidy.detail.astype(str).str.startswith("skipped")].drop_duplicates(
            ["protocol", "dataset", "model", "epsilon", "calibration", "unit", "accountant"]).itertuples(index=False):
        cell = results[row.protocol][row.dataset][row.model][f"epsilon_{row.epsilon:g}"][row.calibration][row.unit]
        cell.setdefault("skipped", {})[row.accountant] = row.detail
    closing = {ds: {m: by_eps.get(f"epsilon_{CLOSING_NOTE_EPSILON:g}")
                    for m, by_eps in by_model.items()} for ds, by_model in results.get("paper", {}).items()}
    return {"study": "b", "delta": float(acc["delta"]),
            "accountants": {n: {"class": type(a).__name__, **a.settings()} for n, a in accountants.items()},
            "privacy_units": PRIVACY_UNITS, "calibrations": CALIBRATIONS, "round_bases": ROUND_BASES,
            "unit_note": UNIT_NOTE, "coverage_note": COVERAGE_NOTE,
            "datasets": shapes, "closing_note": {
                "configuration": f"per-step nominal epsilon {CLOSING_NOTE_EPSILON:g}, paper protocol, worst case "
                                 "(every round joined)", "results": closing},
            "results": results, "timings_s": timings}


def _settings_text(name: str, settings: dict) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in settings.items() if k != "class")
    return f"{name} ({knobs})" if knobs else name


def markdown(tidy: pd.DataFrame, summary: dict) -> str:
    table = finals(tidy)
    names = list(summary["accountants"])
    delta = summary["delta"]
    lines = ["# Study B: cumulative ε of the per-step Laplace gradient DP", "",
             f"δ = {delta:g} for RDP and PLD (basic composition is pure ε, δ = 0). Per-step ε is per local "
             "optimiser step; per-round ε composes one round's steps for the unit; cumulative ε composes all "
             "rounds (worst case: the client joins every round). Accountants: "
             + "; ".join(_settings_text(n, s) for n, s in summary["accountants"].items()) + ".", "",
             f"- **Privacy unit.** {UNIT_NOTE}",
             "- **Calibration.** " + " ".join(f"*{k}*: {v}." for k, v in CALIBRATIONS.items()),
             "- **Rounds.** " + " ".join(f"*{k}*: {v}." for k, v in ROUND_BASES.items()),
             f"- **Coverage.** {COVERAGE_NOTE}", ""]
    for ds, info in summary["datasets"].items():
        label = "SYNTHETIC " if info["synthetic"] else ""
        dims = ", ".join(f"{m} d = {v['dim']:,} (unnoised buffers: {v['unnoised_buffer_values']})"
                         for m, v in info["models"].items())
        lines.append(f"- {label}{ds}: {info['n_clients']} clients, {info['members_min']}–{info['members_max']} "
                     f"member trials each; {dims}.")
    lines.append("")
    for protocol, part in table.groupby("protocol", sort=False):
        first = part.iloc[0]
        title = ("Closing note and paper protocol" if protocol == "paper" else "params/federated_mia.yaml grid")
        lines += [f"## {title}: {int(first.num_rounds)} rounds × {int(first.local_epochs)} local epochs", ""]
        head = (["dataset", "model", "d", "ε (nominal, per step)", "calibration", "unit", "steps/round",
                 "per-step ε"] + [f"per-round ε {n}" for n in names] + [f"cumulative ε {n}" for n in names]
                + ["expected rounds", "cumulative ε pld at expected rounds (not a guarantee)"])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in part.sort_values(["dataset", "model", "epsilon", "calibration", "unit"],
                                    ascending=[True, True, False, False, True]).itertuples(index=False):
            ds = f"{row.dataset} (SYNTHETIC)" if row.synthetic else row.dataset
            exp_name = "pld" if "pld" in names else names[-1]
            cells = ([ds, row.model, f"{int(row.dim):,}", _fmt(row.epsilon), row.calibration, row.unit,
                      str(int(row.steps_per_round)), _fmt(row.per_step)]
                     + [_fmt(getattr(row, f"per_round_{n}")) for n in names]
                     + [_fmt(getattr(row, f"cumulative_{n}")) for n in names]
                     + [str(int(row.expected_rounds)), _fmt(getattr(row, f"expected_{exp_name}"))])
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    skipped = sorted(set(tidy.loc[tidy.detail.astype(str).str.startswith("skipped"), "detail"]))
    if skipped:
        lines += ["† " + "; ".join(d.removeprefix("skipped: ") for d in skipped) + ".", ""]
    lines += [f"Timings (s): {json.dumps(summary['timings_s'])}", ""]
    return "\n".join(lines)


def figure(tidy: pd.DataFrame, summary: dict):
    """Cumulative ε vs rounds (log y) at the closing-note ε under the paper protocol: colour = accountant,
    solid = nominal, dashed = certified; grey dotted = the per-round ε (PLD) of each calibration."""
    part = tidy[(tidy.protocol == "paper") & (tidy.epsilon == CLOSING_NOTE_EPSILON)]
    panels = part[["dataset", "model"]].drop_duplicates().itertuples(index=False)
    panels = list(panels)
    units = [u for u in PRIVACY_UNITS if u in set(part.unit)]
    fig, axes = plt.subplots(len(panels), len(units), figsize=(5.4 * len(units), 3.6 * len(panels)),
                             squeeze=False, sharex=True)
    colours = {"basic": "tab:blue", "rdp": "tab:orange", "pld": "tab:green"}
    styles = {"nominal": "-", "certified": "--"}
    widths = {"basic": 2.6, "rdp": 1.8, "pld": 1.1}  # wide to narrow, so curves that coincide all show
    reference = {"nominal": ":", "certified": "-."}
    for i, (ds, model) in enumerate(panels):
        synthetic = summary["datasets"][ds]["synthetic"]
        for j, unit in enumerate(units):
            ax = axes[i][j]
            cell = part[(part.dataset == ds) & (part.model == model) & (part.unit == unit)]
            curves = cell[cell.metric == "epsilon_cumulative"]
            for (calibration, accountant), rows in curves.groupby(["calibration", "accountant"], sort=False):
                ax.plot(rows["round"], rows["value"], color=colours.get(accountant, "black"),
                        ls=styles.get(calibration, ":"), lw=widths.get(accountant, 1.2),
                        label=f"{accountant}, {calibration}")
            for calibration, rows in cell[cell.metric == "epsilon_per_round"].groupby("calibration"):
                ref = rows[rows.accountant == ("pld" if "pld" in set(rows.accountant) else rows.accountant.iloc[0])]
                ax.axhline(float(ref["value"].iloc[0]), color="grey", ls=reference.get(calibration, ":"), lw=1,
                           label=f"per-round ε ({calibration})")
            dim = int(cell["dim"].iloc[0])
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(f"{'SYNTHETIC ' if synthetic else ''}{ds}, {model} (d = {dim:,}), unit: {unit}",
                         fontsize=9)
            ax.grid(alpha=0.3, which="both")
            if i == len(panels) - 1:
                ax.set_xlabel("rounds the client joined")
            if j == 0:
                ax.set_ylabel("cumulative ε")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    first = part.iloc[0]
    fig.suptitle(f"Per-step Laplace gradient DP, nominal ε = {CLOSING_NOTE_EPSILON:g} per step, "
                 f"{int(first.local_epochs)} local epochs/round; δ = {summary['delta']:g} (RDP, PLD); "
                 "worst case (every round joined)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    return fig


# ---- the stage -----------------------------------------------------------------------------------------------

def run(args) -> int:
    from experiments.federated_mia import validate

    acc = load_params(args.params, STAGE)
    grid = load_params(args.grid, "federated_mia")
    validate(grid, args.grid)
    datasets = args.datasets or list(grid["datasets"])
    unknown = [d for d in datasets if d not in grid["datasets"]]
    if unknown:
        raise ParamsError(f"{args.grid}: federated_mia.datasets has no entry for {unknown}")
    delta, clip_norm = float(acc["delta"]), float(grid["clip_norm"])
    pld_knobs = dict(acc.get("pld") or {})
    options = {"rdp": {"orders": acc.get("rdp_orders")}, "pld": pld_knobs}
    accountants = {n: make_accountant(n, **options.get(n, {})) for n in acc["accountants"]}
    cache = CurveCache(accountants, delta)
    timings, shapes, rows = {}, {}, []
    for ds in datasets:
        started = time.perf_counter()
        shape = shapes[ds] = federation_shape(ds, grid["datasets"][ds], grid)
        timings[f"load_{ds}"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        r_exp = {}
        for proto in protocols(grid, acc):
            schedule = FederatedSchedule.for_client(proto["num_rounds"], proto["local_epochs"],
                                                    shape["members_max"], int(grid["batch_size"]))
            rounds_expected = expected_rounds(proto["num_rounds"], int(grid["clients_per_round"]),
                                              shape["n_clients"])
            r_exp[proto["protocol"]] = rounds_expected
            for model, info in shape["models"].items():
                base = {"study": "b", "dataset": ds, "dataset_version": shape["version"],
                        "synthetic": shape["synthetic"], "protocol": proto["protocol"], "model": model,
                        "delta": delta, "clip_norm": clip_norm, "n": shape["n_clients"], "ci_low": float("nan"),
                        "ci_high": float("nan")}
                for eps in proto["epsilons"]:
                    for calibration in acc["calibrations"]:
                        for unit in acc["units"]:
                            rows += cell_rows(cache, base, epsilon=eps, dim=info["dim"], calibration=calibration,
                                              unit=unit, schedule=schedule, rounds_expected=rounds_expected,
                                              clip_norm=clip_norm)
        shape["expected_rounds"] = r_exp
        shape["batch_size"] = int(grid["batch_size"])
        shape["clients_per_round"] = int(grid["clients_per_round"])
        timings[f"accounting_{ds}"] = round(time.perf_counter() - started, 2)
    tidy = pd.DataFrame(rows)
    summary = summary_json(tidy, shapes, acc, accountants, timings)
    curve = tidy.metric == "epsilon_cumulative"
    headline = tidy[~curve | (tidy["round"] == tidy["num_rounds"])]  # per-step, per-round, final, expected
    curves = tidy.loc[curve & np.isfinite(tidy.value), CURVE_COLUMNS]
    with atomic_paths(args.out, args.curves, args.summary, args.report, args.figure) as (out, cv, js, md, png):
        headline.to_csv(out, index=False)
        curves.to_csv(cv, index=False)
        js.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        md.write_text(markdown(tidy, summary))
        fig = figure(tidy, summary)
        fig.savefig(png, dpi=110)
        plt.close(fig)
    log_to_mlflow(tidy, summary, acc, grid, args)
    for ds, by_model in summary["closing_note"]["results"].items():
        for model, cell in by_model.items():
            if cell:
                for calibration, by_unit in cell.items():
                    print(f"{'SYNTHETIC ' if shapes[ds]['synthetic'] else ''}{ds} {model} {calibration}: "
                          + "; ".join(f"{u}: " + ", ".join(f"{n} {v}" for n, v in r["epsilon_cumulative"].items())
                                      for u, r in by_unit.items()))
    print(f"federated-accounting: {len(headline)} rows -> {args.out}, {len(curves)} curve points -> {args.curves} "
          f"(δ = {delta:g}; timings {timings})")
    return 0


def log_to_mlflow(tidy: pd.DataFrame, summary: dict, acc: dict, grid: dict, args) -> None:
    """One parent run per dataset (artifacts), one child per (model, ε) with its final numbers as metrics."""
    table = finals(tidy)
    params = {"federated_accounting": acc, "federated_mia_grid": {k: grid[k] for k in (
        "models", "epsilons", "clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round",
        "num_rounds", "local_epochs", "batch_size")}}
    names = list(summary["accountants"])
    for ds, info in summary["datasets"].items():
        def tags(**extra):
            return required_tags(study="b", stage=STAGE, dataset=ds, dataset_version=info["version"],
                                 synthetic=info["synthetic"], seed=None, dvc_stage=STAGE,
                                 delta=f"{summary['delta']:g}", **extra)

        with start_run(study="b", tags=tags(), run_name=f"{STAGE}-{ds}", params=params):
            log_metrics({"n_clients": info["n_clients"], "members_max": info["members_max"]})
            for path, folder in ((args.out, "metrics"), (args.curves, "plots"), (args.summary, "metrics"),
                                 (args.report, "reports"), (args.figure, "figures")):
                log_artifact(path, folder)
            part = table[table.dataset == ds]
            for (model, eps), cells in part.groupby(["model", "epsilon"], sort=False):
                mechanism = "laplace_gradient" if math.isfinite(eps) else "none"
                with start_run(study="b", run_name=f"{STAGE}-{ds}-{model}-eps{eps:g}",
                               tags=tags(model=model, epsilon="inf" if math.isinf(eps) else f"{eps:g}",
                                         mechanism=mechanism),
                               params={"dim": int(cells["dim"].iloc[0])}):
                    metrics = {}
                    for row in cells.itertuples(index=False):
                        key = f"{row.protocol}/{row.calibration}/{row.unit}"
                        metrics[f"{key}/epsilon_per_step"] = row.per_step
                        for n in names:
                            metrics[f"{key}/{n}/epsilon_per_round"] = getattr(row, f"per_round_{n}")
                            metrics[f"{key}/{n}/epsilon_cumulative"] = getattr(row, f"cumulative_{n}")
                    finite = {k: v for k, v in metrics.items() if math.isfinite(v)}  # no ∞ (no DP), no skips
                    if finite:
                        log_metrics(finite)
