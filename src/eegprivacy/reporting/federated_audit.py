"""Study B's one-run audit and deployable-ε federation, drawn and written: ``reports/federated_audit.md``, its
figure (empirical ε lower bound against certified ε, log scale), the metrics of the stage's MLflow summary run,
and the lines ``reports/study-b.md`` and ``federated_accounting`` print from them.

Every audited setting reads: the certified ε of its training per record (RDP, PLD), the one-run empirical lower
bound at the stated confidence and δ with the guesses behind it, their ratio, and what neither covers. The DP-SGD
table reads like ``federated_control``'s: non-member accuracy and the attack − control AUROC per attack with its
subjects+seeds interval and Holm-adjusted p, the empirical ε beside each row.
"""

from __future__ import annotations

import math

import pandas as pd

from eegprivacy.reporting.calibration import tests_lines as calibration_tests
from eegprivacy.reporting.federated_control import ATTACK_NAMES

PROTOCOL_NAMES = {"paper_laplace": "paper: Laplace per step", "dp_sgd": "DP-SGD, total per record"}


def _eps(value: float) -> str:
    return "∞" if not math.isfinite(float(value)) else f"{float(value):g}"


def _big(value: float) -> str:
    value = float(value)
    if not math.isfinite(value):
        return "∞ (no DP)"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def metrics_of(audit: pd.DataFrame, dpsgd: pd.DataFrame) -> dict[str, float]:
    """The summary run's metrics: per audited setting its bound, certificates and guesses; per DP-SGD row each
    arm's value and interval."""
    out = {}
    for r in audit.to_dict("records"):
        key = f"audit/{r['protocol']}/eps{_eps(r['epsilon']).replace('∞', 'inf')}"
        for stat in ("empirical_epsilon", "certified_epsilon_rdp", "certified_epsilon_pld", "empirical_over_certified",
                     "guesses", "right", "canaries", "max_certifiable_epsilon"):
            value = float(r[stat])
            if not math.isnan(value):  # no ratio without a certificate
                out[f"{key}/{stat}"] = value if math.isfinite(value) else -1.0  # MLflow: -1 marks ∞ (no DP)
    for r in dpsgd.to_dict("records"):
        key = f"dpsgd/eps{_eps(r['epsilon']).replace('∞', 'inf')}/{r['attack']}/{r['arm']}"
        for stat in ("value", "ci_low", "ci_high", "p_holm"):
            value = r.get(stat)
            if value is not None and not pd.isna(value):
                out[f"{key}/{stat}"] = float(value)
    return out


def audit_table(audit: pd.DataFrame) -> list[str]:
    """One row per audited setting: certified ε (RDP, PLD), the empirical bound and its guesses, the ratio."""
    lines = ["| protocol | preprocessing | ε (its unit) | σ | certified ε per record, RDP / PLD | empirical ε "
             "(lower bound) | right / guesses (canaries) | most the canaries could show | empirical / certified | "
             "ε leaves out |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in audit.sort_values(["protocol", "epsilon"], ascending=[False, False]).to_dict("records"):
        sigma = r.get("noise_multiplier")
        sigma = f"{sigma:.3g}" if sigma is not None and not pd.isna(sigma) and r["protocol"] == "dp_sgd" else "–"
        unit = "per step" if r["epsilon_unit"] == "per_step" else "total"
        ratio = (f"{r['empirical_over_certified']:.2g}" if math.isfinite(float(r["certified_epsilon_rdp"]))
                 else "– (no certificate)")
        lines.append(f"| {PROTOCOL_NAMES.get(r['protocol'], r['protocol'])} | {r['preprocessing']} | "
                     f"{_eps(r['epsilon'])} ({unit}) | {sigma} | {_big(r['certified_epsilon_rdp'])} / "
                     f"{_big(r['certified_epsilon_pld'])} | **{r['empirical_epsilon']:.2f}** | {int(r['right'])} / "
                     f"{int(r['guesses'])} ({int(r['canaries'])}) | {r['max_certifiable_epsilon']:.2f} | {ratio} | "
                     f"{r['epsilon_excludes']} |")
    return lines


def _ci(r) -> str:
    return f"{r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


def dpsgd_table(dpsgd: pd.DataFrame) -> list[str]:
    """Per total ε: non-member accuracy of the trained model (and its control) and every attack's attack −
    control AUROC with its interval and Holm p."""
    if dpsgd.empty:
        return ["(no DP-SGD rows)"]
    attacks = [a for a in dpsgd["attack"].unique() if a != "utility_accuracy"]
    head = ["total ε per record (δ)", "σ", "non-member accuracy", "control's accuracy", "empirical ε"]
    head += [f"{ATTACK_NAMES.get(a, a)}: attack − control" for a in attacks]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for eps, rows in sorted(dpsgd.groupby("epsilon"), key=lambda item: -item[0]):
        arm = rows.set_index(["attack", "arm"])
        acc, ctrl = arm.loc[("utility_accuracy", "attack")], arm.loc[("utility_accuracy", "control")]
        first = rows.iloc[0]
        sigma = f"{first['noise_multiplier']:.3g}" if math.isfinite(float(eps)) else "–"
        cells = [f"{_eps(eps)}", sigma, _ci(acc), _ci(ctrl), f"{first['empirical_epsilon']:.2f}"]
        for a in attacks:
            d = arm.loc[(a, "attack_minus_control")]
            star = "*" if bool(d.get("significant", False)) else ""
            cells.append(f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]{star}, "
                         f"p_Holm {d['p_holm']:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def dpsgd_sentence(dpsgd: pd.DataFrame) -> str:
    """What is left at the smallest finite total ε in the table beside no DP: utility with intervals, how many
    attack − control cells are significant, and the audit's bound (computed, never written by hand)."""
    acc = dpsgd[dpsgd["attack"].eq("utility_accuracy") & dpsgd["arm"].eq("attack")].set_index("epsilon")
    finite = sorted(e for e in acc.index if math.isfinite(e))
    if not finite or math.inf not in acc.index:
        return ""
    diffs = dpsgd[dpsgd["arm"].eq("attack_minus_control")]
    parts = []
    for eps in sorted(finite, reverse=True):
        n_sig = int(diffs.loc[diffs["epsilon"].eq(eps), "significant"].fillna(False).astype(bool).sum())
        n_all = int(diffs["epsilon"].eq(eps).sum())
        parts.append(f"at ε = {_eps(eps)} non-member accuracy {_ci(acc.loc[eps])} with {n_sig} of {n_all} "
                     f"attack − control cells significant and an empirical ε of "
                     f"{acc.loc[eps, 'empirical_epsilon']:.2f}")
    return (f"Without DP this schedule reaches {_ci(acc.loc[math.inf])} (chance 0.5); " + "; ".join(parts) + ".")


def verdict(audit: pd.DataFrame) -> list[str]:
    """The audit's sentences: whether any bound exceeds its certificate, and how positive the no-DP audit is."""
    exceeded = audit[audit["exceeds_certified"]]
    lines = [f"- **No empirical bound exceeds its certified ε**: the largest ratio is "
             f"{audit['empirical_over_certified'].max():.2g}." if exceeded.empty else
             f"- **{len(exceeded)} empirical bound(s) exceed their certified ε**: the certificate or the noise is "
             "wrong for " + ", ".join(f"{r['protocol']} ε = {_eps(r['epsilon'])}" for _, r in exceeded.iterrows())
             + "."]
    for _, r in audit[~audit["epsilon"].map(math.isfinite)].iterrows():
        lines.append(f"- Without DP ({PROTOCOL_NAMES.get(r['protocol'], r['protocol'])}), the canaries show ε ≥ "
                     f"**{r['empirical_epsilon']:.2f}** ({int(r['right'])} of {int(r['guesses'])} guesses right; "
                     f"{r['max_certifiable_epsilon']:.2f} is the most these guesses could show).")
    return lines


def tests_lines(calibration: str = "calibration.md") -> list[str]:
    """``reports/study-b.md``'s pointer to the measured tests of this section (the study report's calibration
    section gives their size; ``reports/federated_audit.md`` ends with the full list)."""
    from eegprivacy.reporting.calibration import anchor

    return [f"Measured on null federations (stage `calibration`): the ε bound's false-positive rate, "
            f"[`study_b.one_run_bound`]({calibration}#{anchor('study_b.one_run_bound')}), and the DP-SGD table's "
            f"attack − control, [`study_b.dp_sgd_minus_control`]({calibration}"
            f"#{anchor('study_b.dp_sgd_minus_control')}); their size is in the calibration section below."]


def report_md(audit: pd.DataFrame, dpsgd: pd.DataFrame, meta: dict) -> str:
    synthetic = "SYNTHETIC data. " if meta.get("synthetic") else ""
    lines = [f"# Study B: one-run privacy audit and a federation at a deployable ε ({meta['dataset']})", "",
             f"{synthetic}Dataset version `{str(meta['dataset_version'])[:12]}`, profile `{meta['profile']}`, "
             f"{meta['n_subjects']} clients (one per subject), {meta['seeds']} seed(s) per setting.", "",
             "## Empirical ε beside certified ε", "",
             f"Each setting trains once per seed with {meta['canaries_per_client']} canaries planted in every client "
             f"({meta['canaries_per_run']} per run): synthetic out-of-distribution feature vectors after the "
             f"client's preprocessing (radius {meta['canary_radius']:g} per-feature SDs × sqrt(d) from the data's "
             "mean, a direction and a random label each), each included with probability ½. The attacker is the "
             "server, which sees every client update: a canary's score is the sum over its client's rounds of the "
             "rise of its logit margin from the model sent to the model returned. Per run the "
             f"{meta['guesses']} highest scores are guessed in and the {meta['guesses']} lowest out; the runs' "
             "guesses are pooled (each canary enters one run). The bound is Steinke, Nasr and Jagielski's "
             f"(2023, Thm 5.2) at {meta['confidence']:.0%} confidence and δ = {meta['delta']:g}, the certificates' "
             "δ. The certified ε covers the training only, per record over every step of every round (a client "
             "counted in all); the canaries skip the preprocessing too, so both leave out what the last column "
             "says.", "", *audit_table(audit), "", *verdict(audit), "",
             "## DP-SGD at a total per-record ε", "",
             f"Record-level DP-SGD in every client: Poisson sampling at q = {meta['dp_sgd_sample_rate']:g}, "
             f"per-example clip C = {meta['dp_sgd_clip_norm']:g}, Gaussian noise σ·C calibrated by RDP so that "
             f"{meta['dp_sgd_num_rounds']} rounds × {meta['dp_sgd_local_epochs']} local epochs × 1/q steps "
             f"({meta['dp_sgd_steps']} steps a record can be sampled in) spend the row's ε at δ = {meta['delta']:g}. "
             f"Adam at step size {meta['dp_sgd_learning_rate']:g}; every client's features are standardised on "
             "its own calibration block (read outside ε, like the pooled CSP). "
             "The no-DP row trains the same schedule with mini-batches of q·n trials, unclipped. Utility is the "
             "non-member accuracy (chance 0.5); attack − control is the trained model's AUROC minus that of the "
             "federation that never saw the client, both through the client's own preprocessing "
             "(``federated_control``'s arms), with subjects+seeds intervals and Holm over this table's cells; "
             "* marks p_Holm < 0.05.", "", *dpsgd_table(dpsgd), "", dpsgd_sentence(dpsgd), "",
             *calibration_tests("reports/federated_audit.md")]
    return "\n".join(lines)


def draw(audit: pd.DataFrame, dpsgd: pd.DataFrame, fig) -> None:
    """Left: empirical ε lower bound against certified ε (RDP) per setting, log-log, with the y = x line no
    bound may cross. Right: DP-SGD's non-member accuracy against its total ε, with the interval."""
    import numpy as np

    left, right = fig.subplots(1, 2)
    finite = audit[audit["certified_epsilon_rdp"].map(lambda v: math.isfinite(float(v)))]
    for protocol, rows in finite.groupby("protocol"):
        left.scatter(rows["certified_epsilon_rdp"], rows["empirical_epsilon"].clip(lower=1e-2),
                     label=PROTOCOL_NAMES.get(protocol, protocol))
    if not finite.empty:
        top = float(max(finite["certified_epsilon_rdp"].max(), 10))
        grid = np.logspace(-2, math.log10(top), 50)
        left.plot(grid, grid, "k--", lw=0.8, label="empirical = certified")
    for _, r in audit[~audit["epsilon"].map(math.isfinite)].iterrows():
        left.axhline(max(r["empirical_epsilon"], 1e-2), color="grey", lw=0.8, ls=":")
    left.set(xscale="log", yscale="log", xlabel="certified ε per record (RDP)",
             ylabel="one-run empirical ε (lower bound; 0 drawn at 0.01)", title="Audit: empirical vs certified ε")
    left.legend(fontsize=7)
    acc = dpsgd[dpsgd["attack"].eq("utility_accuracy") & dpsgd["arm"].eq("attack")].sort_values("epsilon")
    if not acc.empty:
        x = [e if math.isfinite(e) else 2 * max([v for v in acc["epsilon"] if math.isfinite(v)] or [8]) * 2
             for e in acc["epsilon"]]
        right.errorbar(x, acc["value"], yerr=[acc["value"] - acc["ci_low"], acc["ci_high"] - acc["value"]],
                       fmt="o-", capsize=3)
        right.axhline(0.5, color="grey", ls=":", lw=0.8)
        right.set_xscale("log")
        right.set_xticks(x, [_eps(e) for e in acc["epsilon"]])
    right.set(xlabel="total ε per record (∞: no DP)", ylabel="non-member accuracy",
              title="DP-SGD utility (subjects+seeds 95% CI)")
    fig.tight_layout()


def logged_tables(uri: str, experiment: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series | None]:
    """The audit and DP-SGD tables of the newest finished ``federated_audit`` summary run, read from its logged
    artifacts (the stage's own CSVs), and the run; empty frames and None where the store holds none."""
    import os
    import tempfile

    from mlflow.tracking import MlflowClient

    from eegprivacy.tracking.runs import finished_stage_runs

    runs = finished_stage_runs(uri, experiment, "federated_audit")
    if runs is None or runs.empty:
        return pd.DataFrame(), pd.DataFrame(), None
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    if runs.empty:
        return pd.DataFrame(), pd.DataFrame(), None
    run = runs.sort_values("start_time", ascending=False).iloc[0]
    client = MlflowClient(uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # two small files: no bars in the log
    with tempfile.TemporaryDirectory() as tmp:
        tables = [pd.read_csv(client.download_artifacts(run["run_id"], f"report/{name}", tmp))
                  for name in ("federated_audit.csv", "federated_audit_dpsgd.csv")]
    return tables[0], tables[1], run


def study_b_lines(uri: str, experiment: str) -> list[str]:
    """``reports/study-b.md``'s section: empirical ε beside certified ε for every audited DP setting, and the
    DP-SGD rows (utility, attack − control, empirical ε); nothing before the stage has run."""
    audit, dpsgd, run = logged_tables(uri, experiment)
    if run is None or audit.empty:
        return []
    dataset = str(audit["dataset"].iloc[0])
    canaries = int(audit["canaries"].iloc[0] / max(int(audit["runs"].iloc[0]), 1))
    return [f"## How tight is the guarantee? One-run audits, and DP-SGD at a deployable ε ({dataset}, simplenet)", "",
            (f"Stage `federated_audit`: every DP setting trained once per seed ({int(audit['runs'].iloc[0])} seeds) "
             f"with {canaries} synthetic out-of-distribution canaries per run planted in the clients' training sets "
             "after preprocessing, each included with probability ½; the server scores each canary by how much its "
             "client's updates raised its logit margin, guesses the top and bottom of each run, and Steinke, Nasr and "
             f"Jagielski's bound turns the right guesses into an ε lower bound at {audit['confidence'].iloc[0]:.0%} "
             f"confidence and δ = {audit['delta'].iloc[0]:g}. The certified ε is the training's per record (all "
             "rounds counted); the canaries skip the preprocessing, so neither covers what the last column says "
             "(the paper protocol's end-to-end guarantee stays \"none\")."), "", *audit_table(audit), "",
            *verdict(audit), "", "DP-SGD (record-level Gaussian noise on clipped per-example gradients, Poisson "
            "sampling, σ calibrated by RDP to the total per-record ε at δ, PLD beside it) on pooled-CSP features "
            "standardised on each client's calibration block; attack − control as `federated_control`'s "
            "(subjects+seeds 95 % intervals, Holm over this table):", "", *dpsgd_table(dpsgd), "",
            dpsgd_sentence(dpsgd), "", *tests_lines(), "",
            f"*From MLflow run `{run['tags.mlflow.runName']}` (`runs:/{run['run_id']}`) and its parents, one per "
            "setting; details in `reports/federated_audit.md`.*", ""]
