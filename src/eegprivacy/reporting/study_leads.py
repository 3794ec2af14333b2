"""The lead sections of the study reports, each with its figure where it has one: the one job of this module.

A lead section stands before a report's headline table and is read from its own stage's runs in the study's
experiment: study A's end-to-end private releases (``dp_end_to_end``, with the power the calibration stage measured
at the MDE) and its sample size (``dp_sample_size``), study B's controlled membership table (``federated_control``)
and its strongest attacks at low FPR (``federated_lira``), study C's claims (logged on its ``embedding_audit``
parents), and every study's measured test calibration (``calibration``). Each returns Markdown lines, nothing where
the store holds no such runs (an old figure is then removed); :func:`eegprivacy.reporting.study_reports.write_report`
puts them together.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pandas as pd

from eegprivacy.reporting.study_figures import write_png
from eegprivacy.reporting.study_runs import c_weights
from eegprivacy.tracking.runs import EXPERIMENTS


def end_to_end_lead(study: str, rows: pd.DataFrame, uri: str, out_dir: Path) -> list[str]:
    """Study A's lead section and its figure (``study-a-end-to-end.png``) from the ``dp_end_to_end`` summary runs;
    nothing for the other studies or a store without such runs (an old figure is then removed)."""
    from eegprivacy.reporting import end_to_end

    png = Path(out_dir) / f"study-{study}-end-to-end.png"
    runs = _study_a_figure(end_to_end, study, uri, png)
    if runs.empty:
        return []
    paper = {}
    if not rows.empty and "horizon" in rows:
        found = rows[(rows["arm"] == "release_minus_null") & (rows["metric"] == "auroc") & (rows["horizon"] != "")]
        paper = {(r["dataset"], r["mechanism"]): str(r["horizon"]) for _, r in found.iterrows()}
    return [*end_to_end.lead_lines(runs, paper, mde_power=mde_power(uri, EXPERIMENTS[study])),
            f"![end-to-end private releases]({png.name})", "", *sample_size_lead(study, uri, out_dir)]


def mde_power(uri: str, experiment: str) -> dict[float, float]:
    """{multiple of the MDE: power} the calibration stage measured for the lead table's MDE column
    (``study_a.end_to_end_mde``); {} before that stage has run."""
    from eegprivacy.reporting.calibration import calibration_runs

    runs = calibration_runs(uri, experiment)
    if runs.empty:
        return {}
    case = runs[runs["params.case"] == "study_a.end_to_end_mde"]
    if case.empty:
        return {}
    out = {}
    for column, value in case.iloc[0].items():
        if str(column).startswith("metrics.power_at_") and pd.notna(value):
            out[float(str(column).removeprefix("metrics.power_at_"))] = float(value)
    return dict(sorted(out.items()))


def sample_size_lead(study: str, uri: str, out_dir: Path) -> list[str]:
    """Study A's sample-size section and its figure (``study-a-sample-size.png``, SYNTHETIC) from the
    ``dp_sample_size`` summary runs; nothing without such runs (an old figure is then removed)."""
    from eegprivacy.reporting import sample_size

    png = Path(out_dir) / f"study-{study}-sample-size.png"
    runs = _study_a_figure(sample_size, study, uri, png)
    if runs.empty:
        return []
    return [*sample_size.lead_lines(runs), f"![SYNTHETIC: patients a private release needs]({png.name})", ""]


def _study_a_figure(module: ModuleType, study: str, uri: str, png: Path) -> pd.DataFrame:
    """Study A's summary runs of a lead stage (``module.summary_runs``: :mod:`eegprivacy.reporting.end_to_end` or
    :mod:`eegprivacy.reporting.sample_size`), drawn to ``png`` (``module.draw``); empty, and an old ``png``
    removed, for the other studies or a store without such runs."""
    runs = module.summary_runs(uri, EXPERIMENTS[study]) if study == "a" else pd.DataFrame()
    if runs.empty:
        png.unlink(missing_ok=True)
    else:
        write_png(module.draw, runs, png)
    return runs


def claims_lead(study: str, runs: pd.DataFrame) -> list[str]:
    """Study C's lead section: every claim with the test, p, Holm family and verdict its embedding_audit parent
    run logged (:func:`eegprivacy.studies.embedding_audit.claims.claims_from_runs`), rendered by the renderer the
    cohort reports use; nothing for the other studies or runs without claims."""
    from eegprivacy.reporting.claims import claims_lines
    from eegprivacy.studies.embedding_audit.claims import claims_from_runs
    from eegprivacy.studies.embedding_audit.units import encoder_label

    if study != "c" or runs.empty:
        return []
    runs = runs[runs.get("tags.encoder", pd.Series(index=runs.index, dtype=object)) != "all"]
    runs = runs.assign(weights=[c_weights(str(n), str(d), str(e)) for n, d, e in
                                zip(runs["tags.mlflow.runName"], runs["tags.dataset"], runs["tags.encoder"])])
    claims = claims_from_runs(runs, encoder_label)
    if claims.empty:
        return []
    cohorts = [c for c in ("eegmat", "msu_schizophrenia", "eegmmidb") if c in set(claims["cohort"])]
    return claims_lines(claims, cohorts + sorted(set(claims["cohort"]) - set(cohorts)))


def calibration_lead(study: str, uri: str) -> list[str]:
    """The measured size and coverage of the study's tests (stage ``calibration``'s runs in the study's experiment,
    :func:`eegprivacy.reporting.calibration.section_lines`); nothing before the stage has run."""
    from eegprivacy.reporting.calibration import NOT_MEASURED_MARK, calibration_runs, not_measured_lines, section_lines

    lines = section_lines(calibration_runs(uri, EXPERIMENTS[study]))
    unmeasured = not_measured_lines(f"reports/study-{study}.md")
    if lines and unmeasured:
        lines += [f"Printed here and not measured ({NOT_MEASURED_MARK}; each row of `calibration.md` says why):", "",
                  *unmeasured, ""]
    return lines


def lira_lead(study: str, uri: str) -> list[str]:
    """Study B's strongest attacks at low FPR (RMIA, LiRA, loss by number of reference models,
    :func:`eegprivacy.reporting.lira.study_b_lines`) from the ``federated_lira`` parent runs."""
    from eegprivacy.reporting.lira import study_b_lines

    return study_b_lines(uri, EXPERIMENTS[study]) if study == "b" else []


def audit_lead(study: str, uri: str) -> list[str]:
    """Study B's one-run audits beside the certified ε and its DP-SGD rows
    (:func:`eegprivacy.reporting.federated_audit.study_b_lines`) from the newest ``federated_audit`` summary run."""
    from eegprivacy.reporting.federated_audit import study_b_lines

    return study_b_lines(uri or tracking_uri(), EXPERIMENTS[study]) if study == "b" else []


def control_lead(study: str, uri: str, out_dir: Path) -> list[str]:
    """Study B's lead section, the controlled membership table (attack − preprocessing-only control,
    :mod:`eegprivacy.reporting.federated_control`), and its figure ``study-b-control.png``, from the newest
    ``federated_control`` summary run; nothing for the other studies or a store without one (an old figure is
    then removed)."""
    from eegprivacy.reporting import federated_control

    png = Path(out_dir) / f"study-{study}-control.png"
    runs = federated_control.summary_runs(uri, EXPERIMENTS[study]) if study == "b" else pd.DataFrame()
    summary = federated_control.tidy_run(runs.iloc[0]) if not runs.empty else pd.DataFrame()
    if summary.empty:
        png.unlink(missing_ok=True)
        return []
    write_png(federated_control.draw, summary, png, figsize=(11, 4.5), bbox_inches="tight")
    run = runs.iloc[0]
    meta = {"protocols": _control_protocols(run), "profile": run.get("params.federated_control.profile")}
    return [*federated_control.lead_lines(summary, meta), f"![attack − preprocessing-only control]({png.name})",
            "", f"*From MLflow run `{run['tags.mlflow.runName']}` (`runs:/{run['run_id']}`); every arm's AUROC in "
                "`reports/federated_control.md`.*", ""]


def _control_protocols(run: pd.Series) -> dict:
    """The per-model protocol (seeds, rounds, local epochs, ε grid) the summary run logged as a JSON param."""
    import json

    text = run.get("params.federated_control.per_model") or run.get("params.per_model")
    try:
        return json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
