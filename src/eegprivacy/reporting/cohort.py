"""Drawing for the cohort audit: figures and the HTML report (``mne.Report``) from its summary rows alone.

Nothing here computes a statistic: every number drawn or printed is a value of the summary rows that
:func:`eegprivacy.studies.cohort_audit.run_audit` logged to MLflow (``rows``) or of ``summary.json`` (``summary``).

One idea over about 700 lines: the cohort audit's report, drawn from its summary rows alone; its figures and HTML
sections follow the verdict's layout.
"""

from __future__ import annotations

import html
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.privacy.mechanisms import guarantee_label  # noqa: E402
from eegprivacy.reporting.figures import titled  # noqa: E402
from eegprivacy.reporting.release_figures import mechanism_colour  # noqa: E402

VERDICT_TITLE = "Verdict: what this release gives away and what it keeps"
# The report's sections show no tag badge (MNE draws one per tag in each header; the tags still filter the page).
HIDE_BADGES = "<style>#content .accordion-header .badge[data-mne-tag] { display: none !important; }</style>"
METRIC_LABELS = {"auroc": "LOSO AUROC (threshold-free)", "balanced_accuracy": "balanced accuracy (nested threshold)"}


def _rows(rows: pd.DataFrame, arm: str, metric: str, mechanism: str | None = None) -> pd.DataFrame:
    part = rows[(rows["arm"] == arm) & (rows["metric"] == metric)]
    if mechanism is not None:
        part = part[part["mechanism"] == mechanism]
    return part.sort_values("epsilon")


def _band(ax, row: pd.Series, colour: str, label: str) -> None:
    """A horizontal line with its interval as a band (the baseline and the permuted control)."""
    ax.axhline(row["value"], color=colour, lw=1.2, label=label)
    if np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"]):
        ax.axhspan(row["ci_low"], row["ci_high"], color=colour, alpha=0.15, lw=0)


def _curve(ax, part: pd.DataFrame, colour: str, label: str, style: str = "-") -> None:
    if part.empty:
        return
    ax.plot(part["epsilon"], part["value"], style, marker="o", ms=3, color=colour, label=label)
    ax.fill_between(part["epsilon"], part["ci_low"], part["ci_high"], color=colour, alpha=0.18, lw=0)


# The non-private arms drawn as bands (any other arm at ε = ∞ gets the last colour).
CONTROL_BANDS = (("baseline", "#4D4D4D", "non-private baseline"),
                 ("clipped", "#1B9E77", "scaled + clipped, no noise"),
                 ("permuted", "#B0B0B0", "permuted-label control"))


def _legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for the whole figure, outside every axes (below them: constrained layout makes room), so no
    legend hides a curve; an entry drawn in several panels is listed once."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(ncol, len(handles)),
                   fontsize=7, frameon=False)


def utility_figure(rows: pd.DataFrame, summary: dict):
    """Per mechanism (columns) and metric (rows): release and matched-null curves with intervals, the non-private
    baseline, the noise-free clipped table and the permuted-label control as bands, chance, and the utility
    horizon of the fixed-sequence test."""
    mechanisms = list(summary["config"]["mechanisms"])
    metrics = [m for m in ("auroc", "balanced_accuracy") if not _rows(rows, "release", m).empty]
    width = max(4.6 * len(mechanisms), 8.0)  # room for the title and the legend below, with one mechanism too
    fig, axes = plt.subplots(len(metrics), len(mechanisms), figsize=(width, 3.4 * len(metrics) + 1.0), squeeze=False,
                             sharey="row", layout="constrained")
    for i, metric in enumerate(metrics):
        for j, mechanism in enumerate(mechanisms):
            ax = axes[i, j]
            colour = mechanism_colour(mechanism)
            for arm, colour_, label in CONTROL_BANDS:
                part = _rows(rows, arm, metric)
                if len(part):
                    _band(ax, part.iloc[0], colour_, label)
            # one legend for the figure: each mechanism's release (and horizon) is its own entry, in its colour
            named = f" ({mechanism})" if len(mechanisms) > 1 else ""
            _curve(ax, _rows(rows, "release", metric, mechanism), colour, "DP release" + named)
            _curve(ax, _rows(rows, "matched_null", metric, mechanism), "#000000", "matched null (zero signal)", "--")
            ax.axhline(0.5, color="k", lw=0.6, ls=":", label="chance")
            test = summary.get("horizon_tests", {}).get(mechanism, {}).get(metric) or {}
            horizon = test.get("value")
            if isinstance(horizon, float):
                ax.axvline(horizon, color=colour, lw=1, ls="-.", label=f"horizon ε = {horizon:g}{named}")
            ax.set_xscale("log")
            ax.set_xlabel(f"ε (per {summary['eps_unit']})")
            flag = summary.get("mechanism_flags", {}).get(mechanism)
            ax.set_title(mechanism + (f"\n({flag})" if flag else ""), fontsize=9 if flag else 10)
            if j == 0:
                ax.set_ylabel(METRIC_LABELS[metric])
    fig.suptitle(textwrap.fill(titled(f"{summary['dataset']}: utility of the DP release vs ε, beside its matched null "
                                      f"(intervals over {rows['ci_over'].iloc[0] if len(rows) else 'subjects+seeds'})",
                                      summary["synthetic"]), int(width * 13)), fontsize=10)
    _legend_below(fig, axes.ravel(), ncol=int(width // 2.4))
    return fig


def attack_figure(rows: pd.DataFrame, summary: dict):
    """Re-identification top-1 accuracy and membership AUROC vs ε, beside chance and the noiseless table."""
    mechanisms = list(summary["config"]["mechanisms"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), layout="constrained")
    panels = ((axes[0], "reidentification", "top1_accuracy", "re-identification top-1 accuracy"),
              (axes[1], "membership", "auroc_likelihood", "membership AUROC (likelihood attack)"))
    for ax, arm, metric, label in panels:
        part = rows[(rows["arm"] == arm) & (rows["metric"] == metric)]
        if part.empty:
            reason = summary["attacks"].get(arm, {}).get("reason") or "not run"
            ax.text(0.5, 0.5, f"does not apply:\n{reason}", ha="center", va="center", wrap=True, fontsize=8,
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        for mechanism in mechanisms:
            _curve(ax, part[part["mechanism"] == mechanism].sort_values("epsilon"), mechanism_colour(mechanism),
                   mechanism)
        noiseless = rows[(rows["arm"] == arm) & (rows["mechanism"] == "none")
                         & (rows["metric"] == (metric if arm == "reidentification" else "auroc_distance"))]
        if len(noiseless):
            _band(ax, noiseless.iloc[0], "#4D4D4D", "no noise (scaled, clipped)")
        chance = float(part["chance"].dropna().iloc[0])
        ax.axhline(chance, color="k", lw=0.6, ls=":", label=f"chance ({chance:.3g})")
        ax.set_xscale("log")
        ax.set_xlabel(f"ε (per {summary['eps_unit']})")
        kind = summary["attacks"].get(arm, {}).get("kind")
        ax.set_title(label + (f"\n({kind})" if kind else ""), fontsize=9)
    fig.suptitle(titled(f"{summary['dataset']}: attacks on the released patient table", summary["synthetic"]),
                 fontsize=10)
    _legend_below(fig, axes)
    return fig


def figures(rows: pd.DataFrame, summary: dict) -> dict:
    return {"utility": utility_figure(rows, summary), "attacks": attack_figure(rows, summary)}


def close(figs: dict) -> None:
    for fig in figs.values():
        plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# Verdict: the report's first section, for a data steward or clinician
# ---------------------------------------------------------------------------------------------------------------
_REID_ATTACKER = {"same-session halves": "the second half of each patient's recording (the same session: easier for "
                                         "the attacker than a recording from another visit)",
                  "cross-session": "a recording of each patient from another session",
                  "cross-run": "another run of each patient's recording",
                  "cross-recording": "a second recording of each patient"}


def _g(value) -> str:
    return f"{float(value):g}"


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _interval(entry: dict, fmt: str, level: float = 0.95) -> str:
    """`` (95% interval low to high)`` of a summary entry, or "" where it has none (the attack tables' intervals
    are 95%; the utility intervals are at the audit's ``confidence``)."""
    low, high = entry.get("ci_low"), entry.get("ci_high")
    if low is None or high is None:
        return ""
    return f" ({level:.0%} interval {format(low, fmt)} to {format(high, fmt)})"


def _not_covered(note: str) -> list[str]:
    """What a release's ε leaves out, in plain words, read off the summary's ``eps_covers_note``."""
    out = []
    if "in the clear" in note:
        out.append("the labels, which are published as they are")
    if "scaling" in note and "outside ε" in note:
        out.append("the scaling of each feature (its median and spread), which is computed from these same "
                   "patients' data without noise")
    return out


def _labels(summary: dict) -> tuple[str, str]:
    """(positive, negative) as the verdict names them: the names given (``--label-map SZ=1 HC=0``, or the tree's
    Levels), else "label 1" and "label 0"."""
    names = summary["cohort"].get("label_names") or {}
    return names.get("1") or "label 1", names.get("0") or "label 0"


_WHY = {"horizon": "the smallest ε that keeps utility", "largest": "the largest ε tried, since none keeps utility",
        "not tested": "the largest ε tried; utility not tested: too few noise draws"}


def _lead(summary: dict, point: dict) -> str:
    """One lead sentence: at the point's ε (study A's :func:`~eegprivacy.studies.cohort.verdict.headline`), what
    a classifier still finds in the release beside its matched null, and how many patients an attacker
    re-identifies against chance (or, where that cannot be tested, why), with the membership AUROC."""
    confidence = float(summary["config"]["confidence"])
    unit = "patient" if summary["eps_unit"] == "subject" else summary["eps_unit"]
    names = summary["cohort"].get("label_names") or {}
    positive, negative = _labels(summary)
    what = f"{positive} from {negative}" if {"0", "1"} <= set(names) else "the label"
    release, null = point.get("release_auroc") or {}, point.get("matched_null_auroc") or {}
    test = point.get("release_minus_null_auroc") or {}
    at = (f"At ε = {_g(point['epsilon'])} per {unit} with {_mechanism(summary, point['mechanism'])} "
          f"({_WHY[point['why']]}): ")
    verb = "tells" if what != "the label" else "finds"
    if release.get("value") is None:
        utility = "the release's utility was not computed at this ε"
    else:
        found = (f"a classifier trained on the released vectors {{still}}{verb} {what} with AUROC "
                 f"{release['value']:.2f}{_interval(release, '.2f', confidence)}")
        null_text = f"its matched null's {null['value']:.2f} (the same noise on a blank table"
        if point["why"] == "not tested" or not test.get("tested", True):
            utility = f"{found.format(still='')}, against {null_text}; not tested)"
        elif test.get("keeps_utility"):
            utility = (f"{found.format(still='still ')}, better than {null_text}) by a test at the "
                       f"{1 - confidence:.0%} level")
        else:
            utility = (f"{found.format(still='')}, no better than {null_text}) by a test at the "
                       f"{1 - confidence:.0%} level")
    reid_info = summary["attacks"].get("reidentification") or {}
    top1, noiseless = point.get("reidentification") or {}, point.get("reidentification_none") or {}
    if reid_info.get("applies") and top1.get("value") is not None:
        attacker = _REID_ATTACKER.get(reid_info.get("kind"), "a second recording of each patient")
        leak = (f"an attacker holding {attacker} re-identifies {top1['value']:.0%} of the patients"
                f"{_interval(top1, '.0%')}, against {top1['chance']:.0%} by chance"
                + (f" ({noiseless['value']:.0%} without any noise)" if noiseless.get("value") is not None else ""))
    else:
        reason = (reid_info.get("reason") or "it was not run").removeprefix("re-identification does not apply: ")
        if reason == "one recording per subject":
            reason = "each patient has only one recording, so an attacker has no second recording to match against"
        leak = f"re-identification (matching a released vector back to a patient) could not be tested: {reason}"
    member = point.get("membership") or {}
    if member.get("value") is not None:
        low, high = member.get("ci_low"), member.get("ci_high")
        within = f"95% interval {low:.2f} to {high:.2f}; " if low is not None and high is not None else ""
        leak += f"; membership AUROC {member['value']:.2f} ({within}{_g(member.get('chance', 0.5))} is guessing)"
    return f"{at}{utility}, and {leak}." if "could not be tested" not in leak else f"{at}{utility}; {leak}."


def _caution(summary: dict) -> str | None:
    """A caution when a class has fewer patients than ``config["caution_per_class"]``: with so few, the intervals
    are too wide to decide (None otherwise)."""
    cohort = summary["cohort"]
    limit = summary["config"].get("caution_per_class")
    if limit is None:
        return None
    positive, negative = _labels(summary)
    named = {"0", "1"} <= set(cohort.get("label_names") or {})
    small = [(n, name) for n, name in ((cohort["n_label_1"], positive), (cohort["n_label_0"], negative)) if n < limit]
    if not small:
        return None
    which = " and ".join(f"{n} {name} patients" if named else f"{n} patients with {name}" for n, name in small)
    return (f"Caution: only {which} (fewer than {limit} per class): the intervals below are too wide to decide "
            "either way; read these numbers as a first look, and audit a larger cohort before releasing.")


def verdict_text(summary: dict) -> list[str]:
    """The report's verdict for a data steward or clinician, the leak in the headline: first one sentence per
    mechanism, at the ε a steward would pick (its utility horizon, else the largest ε tried: ``summary["headline"]``,
    :func:`eegprivacy.studies.cohort.verdict.headline`), holding both what a classifier still finds in the release
    (AUROC beside its matched null, and the test's decision) and how many patients an attacker re-identifies
    against chance; a caution where a class is small; then what was released (the labels by the names given), at
    which ε per patient, what ε covers and, plainly, what it does NOT, and whether any mechanism keeps utility with
    the non-private reference. Every number is a value of ``summary`` (summary.json); a synthetic cohort's first
    sentence says SYNTHETIC."""
    cohort, config = summary["cohort"], summary["config"]
    unit = "patient" if summary["eps_unit"] == "subject" else summary["eps_unit"]
    note = summary.get("eps_covers_note") or ""
    confidence = float(config["confidence"])
    mechanisms = [_mechanism(summary, m) for m in config["mechanisms"]]
    sentences = lead_text(summary)

    if "in the clear" in note:
        labels = "with each patient's 0/1 label released as it is (not noised)"
    elif "randomized response" in note:
        labels = "with each patient's 0/1 label randomly flipped before release (randomized response)"
    else:
        labels = "with each patient's label as the note on ε below says"
    names = cohort.get("label_names") or {}
    positive, negative = _labels(summary)
    counts = (f"{cohort['n_label_1']} {positive}, {cohort['n_label_0']} {negative}" if {"0", "1"} <= set(names)
              else f"{cohort['n_label_1']} with label 1, {cohort['n_label_0']} with label 0")
    left_out = left_out_sentence(summary)
    sentences.append(
        f"What was released: one noised vector of {cohort['n_features']} EEG features per patient for the "
        f"{cohort['n_patients']} patients of {summary['dataset']} ({counts}), {labels}."
        + (f" {left_out}" if left_out else ""))
    sentences.append(
        f"The noise is set by ε (epsilon, the privacy budget per {unit}: a smaller ε adds more noise and protects "
        f"more), tried at ε = {', '.join(_g(e) for e in config['epsilons'])} per {unit} with the "
        f"{_list(mechanisms)} mechanism{'s' if len(mechanisms) > 1 else ''}.")
    covers, missing = summary.get("eps_covers") or "–", _not_covered(note)
    own = "" if "in the clear" in note or not note else f" ({note})"
    sentences.append(f"ε protects the {covers} only{own}: it does NOT cover {', nor '.join(missing)}." if missing
                     else f"ε covers the {covers}" + (f" ({note})." if note else "."))

    baseline = ((summary.get("controls") or {}).get("baseline") or summary.get("baseline") or {}).get("auroc") or {}
    permuted = ((summary.get("controls") or {}).get("permuted") or {}).get("auroc") or {}
    shuffled = "" if permuted.get("value") is None else (
        f", against {permuted['value']:.2f}{_interval(permuted, '.2f', confidence)} when the same protocol learns "
        "shuffled labels (its control)")
    reference = "" if baseline.get("value") is None else (
        f"; for comparison, the same features without noise predict the label with AUROC {baseline['value']:.2f}"
        f"{_interval(baseline, '.2f', confidence)}{shuffled}, where {_g(baseline.get('chance', 0.5))} is a coin flip "
        "and 1 is perfect")
    test = (f"a test at the {1 - confidence:.0%} level that the noised vectors predict the label better than the "
            "same noise added to a blank table with no patient information")
    horizons = summary["horizons"]
    kept = {m: h for m, h in horizons.items() if isinstance(h, (int, float))}
    untested = [_mechanism(summary, m) for m, h in horizons.items() if h == "not tested"]
    rest = [_mechanism(summary, m) for m, h in horizons.items() if m not in kept and h != "not tested"]
    if kept:
        parts = [f"{_mechanism(summary, m)} keeps utility from ε = {_g(h)} upward" for m, h in kept.items()]
        parts += [f"{_list(rest)} at no ε tried"] if rest else []
        parts += [f"{_list(untested)} was not tested (too few noise draws)"] if untested else []
        sentences.append(f"Usefulness ({test}): {_list(parts)}{reference}.")
    elif rest:
        tail = f" ({_list(untested)}: not tested, too few noise draws)" if untested else ""
        sentences.append(f"Usefulness ({test}): no mechanism keeps utility at any ε tried, up to ε = "
                         f"{_g(max(config['epsilons']))}{tail}{reference}.")
    else:
        sentences.append(f"Usefulness was not tested ({test}): too few noise draws per ε{reference}.")
    sentences.append(calibration_sentence())
    return sentences


#: How the eegprivacy project's calibration stage judged the tests this verdict prints (rows of its
#: ``reports/calibration.md``: size verdict, coverage verdict). Kept here because a steward's report is written away
#: from the repository; ``tests/test_calibration.py`` holds it equal to the committed ``metrics/calibration.csv``, so
#: it cannot go stale silently. The marks are the calibration report's: † size not resolved, ⚠ inflated.
CALIBRATION = {
    "study_a.matched_null_difference": ("the utility test (release − matched null)", "holds", "holds"),
    "audit_cohort.verdict": ("the utility verdict over the ε grid", "holds", "holds"),
    "audit_cohort.reidentification": ("the re-identification interval", "no test", "holds"),
    "audit_cohort.membership": ("the membership interval", "no test", "holds"),
}


def calibration_sentence() -> str:
    """One sentence on how far the verdict's tests were checked: each test's size and interval coverage as the
    project's calibration stage measured them on null cohorts shaped like MSU (:data:`CALIBRATION`), with its
    marks (a size not resolved by the null cohorts run is said so, not hidden)."""
    words = {"holds": "holds", "undecided": "is not resolved (†) by the null cohorts run",
             "inflated": "is inflated (⚠): read its decision with care", "undercovers": "undercovers (⚠)"}
    parts = []
    for name, (what, size, coverage) in CALIBRATION.items():
        said = ([f"its size {words.get(size, size)}"] if size not in ("no test",) else []) + (
            [f"its 95% coverage {words.get(coverage, coverage)}"] if coverage not in ("no interval",) else [])
        parts.append(f"{what} ({name}): {' and '.join(said)}")
    return ("How these tests were checked: the eegprivacy project runs each through this code on synthetic null "
            "cohorts shaped like its MSU cohort (its reports/calibration.md, one row per test): " + "; ".join(parts)
            + ".")


def lead_text(summary: dict) -> list[str]:
    """The verdict's lead (what the console prints too): one sentence per point of ``summary["headline"]``, then the
    small-cohort caution where it applies; a synthetic cohort's first sentence says SYNTHETIC."""
    sentences = [_lead(summary, point) for point in summary.get("headline") or []]
    caution = _caution(summary)
    if caution:
        sentences.append(caution)
    if summary["synthetic"] and sentences:
        sentences[0] = "SYNTHETIC DATA (not real patients): " + sentences[0]
    return sentences


_RESAMPLED = {"subjects": "patients", "subjects+seeds": "patients and seeds", "seeds": "noise seeds"}


def intervals_note(summary: dict) -> str:
    """What the verdict's intervals resample, one clause per quantity, from each entry's ``ci_over`` (patients are
    the privacy unit; the membership rows are resampled over noise seeds)."""
    baseline = ((summary.get("controls") or {}).get("baseline") or {}).get("auroc") or {}
    point = (summary.get("headline") or [{}])[0]
    parts = [("the AUROCs", baseline.get("ci_over"))]
    for key, what in (("reidentification", "re-identification"), ("membership", "membership")):
        parts.append((what, (point.get(key) or {}).get("ci_over")))
    said = [f"{what} over {_RESAMPLED.get(over, over)}" for what, over in parts if over]
    return "Intervals resample " + "; ".join(said) + "." if said else ""


def verdict_html(summary: dict) -> str:
    """The verdict's sentences (:func:`verdict_text`), one short paragraph each, then what the intervals resample."""
    paragraphs = "".join(f'<p class="verdict-sentence mb-2">{html.escape(s)}</p>' for s in verdict_text(summary))
    note = intervals_note(summary)
    note = f'<p class="text-muted small mb-0">{html.escape(note)}</p>' if note else ""
    return f'<div class="verdict" style="font-size:1.05rem">{paragraphs}{note}</div>'


# ---------------------------------------------------------------------------------------------------------------
# Tables and their column definitions
# ---------------------------------------------------------------------------------------------------------------
def _columns(definitions: list[tuple[str, str]]) -> str:
    """A table's "Columns:" list, one line per column."""
    items = "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(text)}</li>" for name, text in definitions)
    return (f'<div class="columns small text-muted"><p class="mb-0"><b>Columns:</b></p><ul class="mb-3">{items}</ul>'
            "</div>")


# One line per column, for every table the report prints (the names are the tables' headers).
COLUMN_TEXT = {
    "mechanism": "the noise mechanism of the release (with its flag where its guarantee is not formal)",
    "metric": "what the classifier is scored on: LOSO AUROC (leave-one-patient-out, threshold-free) or balanced "
              "accuracy with a threshold chosen inside the training patients",
    "utility horizon": "the smallest ε at which the release keeps utility, every larger ε of the grid keeping it "
                       "too; 'none': no ε of the grid keeps utility; 'not tested': too few noise seeds",
    "test (correction)": "the test that decides the horizon: ε tested from the largest down, each at α/m, stopping "
                         "at the first that fails (m mechanisms share α)",
    "α per test": "the significance level each ε's p-value is compared with (α split over the mechanisms)",
    "decisions stable": "whether every decision lies more than 3 Monte-Carlo errors from α (another bootstrap seed "
                        "would not flip it)",
    "note": "why a horizon was not tested, where it was not",
    "ε covers": "what the privacy guarantee covers (features: not the scaling statistics, not the labels)",
    "ε unit": "what one ε protects: one subject (patient), i.e. all of that patient's recordings together",
    "ε": "the privacy budget per patient (smaller: more noise, more protection)",
    "release AUROC": "LOSO AUROC of a classifier trained on the noised release [95% interval over patients and "
                     "seeds]; 0.5 is chance",
    "null AUROC": "the same on the matched null: the same noise added to a blank table with no patient information",
    "release − null": "release AUROC minus null AUROC [95% interval, uncorrected]: the utility the noise leaves",
    "p (one-sided)": "bootstrap p-value that the release beats its matched null",
    "Monte-Carlo error of p": "how much p would move with another set of bootstrap resamples",
    "α tested": "the level p is compared with (α/m)",
    "adjusted p": "p corrected for the fixed-sequence test (m × the largest p at this or any larger ε); keeps "
                  "utility when it is below α",
    "keeps utility": "yes when the fixed-sequence test rejects 'release no better than null' at this ε",
    "decision stable": "yes when p lies more than 3 Monte-Carlo errors from α/m",
    "tested": "whether this ε entered the test (at least 2 noise seeds)",
    "release − null (BA)": "the same difference on balanced accuracy with a nested threshold [95% interval]",
    "corrected lower bound": "the lower end of release − null once the several ε and mechanisms tested are allowed "
                             "for; this report gives it as the decision 'adjusted p < α' — the [low, high] "
                             "printed are per-ε 95% intervals, uncorrected, so a lower end above 0 alone is not "
                             "evidence of utility",
    "value [95% CI]": "the attack's score with its 95% interval: top-1 accuracy (share of released vectors matched "
                      "to the right patient) or membership AUROC (likelihood attack)",
    "shuffled-identity control": "the same re-identification scored against shuffled identities: what the attack "
                                 "gets by luck",
    "distance attack": "membership AUROC of a simpler attacker ranking patients by distance to the released rows",
    "chance": "what guessing scores: 1/K for top-1 over K patients, 0.5 for AUROC",
    "CI over": "what the interval resamples: subjects (Wilson interval over K patients) or seeds",
    "δ": "the probability with which the ε guarantee may fail (0 for pure ε-DP mechanisms)",
    "noise scale": "the noise's standard deviation (Gaussian) or scale b (Laplace) added to each clipped feature",
    "sensitivity": "how far one patient can move the released vector after clipping (with the norm it is measured "
                   "in)",
    "formal guarantee": "whether the mechanism is proven (ε, δ)-DP at this ε for this many features",
    "scope": "what the guarantee assumes or leaves out",
    "flag (recordings)": "a data-quality flag the signal layer raised (a band or channel, never a patient)",
    "count": "recordings carrying the flag",
}


def _column_list(header: list[str], extra: tuple[str, ...] = (), own: dict | None = None) -> str:
    """The "Columns:" list of a table with this header (``own``: this table's definitions where they differ)."""
    text = {**COLUMN_TEXT, **(own or {})}
    return _columns([(h, text.get(h, "a column of the utility summary, as it is named there"))
                     for h in [*header, *extra] if h])


# The attack tables' own definitions (their rows include the table without noise: mechanism and ε "none").
ATTACK_COLUMNS = {
    "reidentification": {
        "value [95% CI]": "top-1 accuracy: the share of released vectors the attacker matched to the right patient, "
                          "with its 95% interval"},
    "membership": {
        "value [95% CI]": "membership AUROC of the likelihood attack (for mechanism none, of the distance attack), "
                          "with its 95% interval: how well an attacker tells released patients from others"},
}
_ATTACK_COMMON = {"mechanism": "the noise mechanism; none: the scaled and clipped table without any noise",
                  "ε": "the privacy budget per patient (smaller: more noise, more protection); none: no noise"}

def _fmt(entry) -> str:
    if entry is None:
        return "–"
    value, low, high = entry.get("value"), entry.get("ci_low"), entry.get("ci_high")
    if value is None:
        return "–"
    text = f"{value:.3f}"
    if low is not None and high is not None:
        text += f" [{low:.3f}, {high:.3f}]"
    return text


def _table(header: list[str], body: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in body)
    return f'<table class="table table-sm table-striped"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def cohort_html(summary: dict) -> str:
    c = summary["cohort"]
    positive, negative = _labels(summary)
    body = [["patients (subjects)", c["n_patients"]],
            [f"{positive} / {negative}", f"{c['n_label_1']} / {c['n_label_0']}"],
            ["recordings used / listed", f"{c['n_recordings']} / {c['n_recordings_listed']}"],
            ["windows", c["n_windows"]], ["channels", f"{c['n_channels']}: {', '.join(c['channels'])}"],
            ["sampling rate(s), Hz", ", ".join(f"{f:g}" for f in c["sfreqs"])],
            ["duration, total / median per recording (s)",
             f"{c['duration_s_total']:.0f} / {c['duration_s_median_per_recording']:.1f}"],
            ["sessions / runs (distinct labels)", f"{c['n_sessions']} / {c['n_runs']}"],
            ["recordings per subject (max); subjects with ≥ 2",
             f"{c['recordings_per_subject_max']}; {c['n_subjects_with_2plus_recordings']}"],
            ["tasks", ", ".join(c["tasks"]) or "–"], ["features per patient", c["n_features"]],
            ["dataset version", summary["dataset_version"]], ["synthetic", summary["synthetic"]]]
    return _table(["", ""], body)


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def _mechanism(summary: dict, mechanism: str) -> str:
    """A mechanism's name as every table prints it: with its flag (e.g. the paper's mechanism: no formal guarantee
    for d > 1)."""
    flag = summary.get("mechanism_flags", {}).get(mechanism)
    return f"{mechanism} ({flag})" if flag else mechanism


# The release − null columns of the utility summary (eegprivacy.studies.release.utility.summarise), in the order
# the table prints them; any other column the summary adds is printed after them, under its own name.
TEST_COLUMNS = (("p_value", "p (one-sided)"), ("p_mc_error", "Monte-Carlo error of p"),
                ("alpha_tested", "α tested"), ("p_adjusted", "adjusted p"), ("keeps_utility", "keeps utility"),
                ("decision_stable", "decision stable"), ("tested", "tested"))
_NOT_TEST_COLUMNS = {"value", "ci_low", "ci_high", "ci_over", "n", "n_seeds", "chance", "mlflow_metric", "protocol",
                     "eps_unit", "eps_covers", "eps_covers_note", "correction", "note", "attack_kind", "horizon",
                     "horizon_tested"}


def _controls_text(summary: dict) -> str:
    names = {"baseline": "Non-private baseline", "clipped": "Scaled and clipped table, no noise",
             "permuted": "Permuted-label control", "baseline_minus_permuted": "Baseline − permuted control",
             "baseline_minus_clipped": "Baseline − clipped (what scaling and clipping cost)"}
    controls = summary.get("controls") or {"baseline": summary["baseline"], "permuted": summary["permuted_labels"]}
    parts = []
    for arm, by_metric in controls.items():
        auroc, ba = by_metric.get("auroc"), by_metric.get("balanced_accuracy")
        text = f"{names.get(arm, arm)}: AUROC {_fmt(auroc)}, balanced accuracy {_fmt(ba)}"
        p = (auroc or {}).get("p_value")
        if p is not None:
            text += f" (AUROC one-sided p = {_number(p)})"
        parts.append(text)
    return ". ".join(parts) + "."


def horizon_html(summary: dict) -> str:
    """The horizon table: per mechanism and metric, the horizon, the test that decided it (the summary's
    ``correction``), whether it was tested (and why not), whether every decision is stable against the bootstrap's
    Monte-Carlo error, and what the ε covers."""
    body = []
    for mechanism, tests in summary.get("horizon_tests", {}).items():
        for metric, test in tests.items():
            horizon = test.get("horizon", "–")
            body.append([_mechanism(summary, mechanism), METRIC_LABELS.get(metric, metric),
                         f"ε = {horizon}" if horizon not in ("none", "not tested") else horizon,
                         test.get("correction", "–"), _number(test.get("alpha_tested")),
                         _number(test.get("decision_stable")), test.get("note") or "",
                         test.get("eps_covers", "–"), summary["eps_unit"]])
    header = ["mechanism", "metric", "utility horizon", "test (correction)", "α per test", "decisions stable", "note",
              "ε covers", "ε unit"]
    return _table(header, body) + _column_list(header)


def utility_html(summary: dict) -> str:
    covers = summary.get("eps_covers") or "–"
    intro = (f"<p>{html.escape(_controls_text(summary))} Intervals: 95% patient-level (cluster) bootstrap "
             "combined with seeds (ci_over = subjects+seeds).</p>"
             f"<p><b>Horizon test</b>: {html.escape(summary['horizon_rule'])}. <b>ε covers</b>: "
             f"{html.escape(covers)}"
             + (f" — {html.escape(summary['eps_covers_note'])}" if summary.get("eps_covers_note") else "")
             + ".</p>")
    body, extra = [], []
    for by_eps in summary["utility"].values():
        for cells in by_eps.values():
            for column in (cells.get("release_minus_null_auroc") or {}):
                if column not in _NOT_TEST_COLUMNS and column not in dict(TEST_COLUMNS) and column not in extra:
                    extra.append(column)
    columns = [*TEST_COLUMNS, *((c, c) for c in extra)]
    for mechanism, by_eps in summary["utility"].items():
        for eps, cells in by_eps.items():
            diff = cells.get("release_minus_null_auroc") or {}
            body.append([_mechanism(summary, mechanism), eps, _fmt(cells.get("release_auroc")),
                         _fmt(cells.get("matched_null_auroc")), _fmt(diff),
                         *(_number(diff.get(c)) for c, _ in columns),
                         _fmt(cells.get("release_minus_null_balanced_accuracy"))])
    horizons = ", ".join(f"{_mechanism(summary, m)}: {h if isinstance(h, str) else f'ε = {h:g}'}"
                         for m, h in summary["horizons"].items())
    return (intro + f"<p><b>Utility horizon</b> (AUROC) — {html.escape(horizons)}</p>" + horizon_html(summary)
            + "<h4>Release − matched null, per ε (AUROC)</h4>"
            + _table(header := ["mechanism", "ε", "release AUROC", "null AUROC", "release − null",
                                *(n for _, n in columns), "release − null (BA)"], body)
            + _column_list(header, ("corrected lower bound",)))


def attacks_html(summary: dict) -> str:
    parts = []
    for kind, title, metric in (("reidentification", "Re-identification (top-1 accuracy)", "top1_accuracy"),
                                ("membership", "Membership inference (AUROC, likelihood / distance)",
                                 "auroc_likelihood")):
        info = summary["attacks"].get(kind, {})
        if not info.get("applies"):
            parts.append(f"<h4>{title}</h4><p>Does not apply: {html.escape(info.get('reason', ''))}</p>")
            continue
        body = []
        for mechanism, by_eps in info["results"].items():
            for eps, cells in by_eps.items():
                main = cells.get(metric) or cells.get("auroc_distance") or cells.get("top1_accuracy")
                other = cells.get("top1_accuracy_shuffled_control") or cells.get("auroc_distance")
                body.append([_mechanism(summary, mechanism), eps, _fmt(main),
                             _fmt(other) if other is not main else "–",
                             f"{main['chance']:.3f}" if main and main.get("chance") is not None else "–",
                             main.get("ci_over", "") if main else ""])
        second = "shuffled-identity control" if kind == "reidentification" else "distance attack"
        note = f" ({html.escape(info.get('kind', ''))}: {html.escape(info.get('reason', ''))})" if kind == \
            "reidentification" else ""
        header = ["mechanism", "ε", "value [95% CI]", second, "chance", "CI over"]
        parts.append(f"<h4>{title}</h4><p>Beside chance{note}.</p>" + _table(header, body)
                     + _column_list(header, own={**_ATTACK_COMMON, **ATTACK_COLUMNS[kind]}))
    return "".join(parts)


def guarantees_html(summary: dict) -> str:
    body = [[_mechanism(summary, g["mechanism"]), f"{g['epsilon']:g}", f"{g['delta']:g}", g["eps_unit"],
             f"{g['noise_scale']:.4g}",
             f"{g['sensitivity']:.4g} ({g['sensitivity_norm']})", guarantee_label(g), g["note"]]
            for g in summary["guarantees"]]
    caveats = "".join(f"<li>{html.escape(c)}</li>" for c in summary["caveats"])
    header = ["mechanism", "ε", "δ", "ε unit", "noise scale", "sensitivity", "formal guarantee", "scope"]
    return (_table(header, body) + _column_list(header)
            + f"<h4>Caveats</h4><ul>{caveats}</ul>")


def left_out_html(summary: dict) -> str:
    """The recordings the audit left out, with why (file names and subjects redacted: the console and the private
    work folder's left_out.tsv name them)."""
    entries = summary["cohort"].get("left_out") or []
    if not entries:
        return "<p>No recording was left out.</p>"
    body = [[i, "could not be used" if e["unusable"] else "too short", e["reason"]] for i, e in enumerate(entries, 1)]
    header = ["#", "why", "reason (file names redacted)"]
    return (f"<p>{left_out_sentence(summary)}</p>" + _table(header, body)
            + _column_list(header, own={"#": "the recording's number in this list",
                                        "why": "could not be used: unreadable file or NaN samples (skipped with "
                                               "--skip-bad, the default); too short: no complete window",
                                        "reason (file names redacted)": "the reason as the console printed it, with "
                                        "the file name and subject replaced by <redacted>"}))


def left_out_sentence(summary: dict) -> str:
    """One sentence: how many recordings were left out and where they are named (empty when none was)."""
    entries = summary["cohort"].get("left_out") or []
    if not entries:
        return ""
    unusable = sum(1 for e in entries if e["unusable"])
    return (f"{len(entries)} recording(s) were left out ({unusable} could not be used, {len(entries) - unusable} too "
            "short for one window); the console output and the private work folder's left_out.tsv name each file, "
            "and the Data quality section gives each reason.")


def quality_html(summary: dict) -> str:
    c = summary["cohort"]
    body = [[flag, count] for flag, count in c["flags"].items()]
    header = ["flag (recordings)", "count"]
    text = "<h4>Left out</h4>" + left_out_html(summary) + "<h4>Flags</h4>"
    text += _table(header, body) + _column_list(header) if body else "<p>No recording carries a flag.</p>"
    if c["features_dropped_nonfinite"]:
        text += (f"<p>{len(c['features_dropped_nonfinite'])} feature(s) left out (not finite for every patient): "
                 f"{html.escape(', '.join(c['features_dropped_nonfinite'][:20]))}</p>")
    if c["warnings"]:
        text += "<ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in c["warnings"]) + "</ul>"
    return text


def write_html(path: str | Path, rows: pd.DataFrame, summary: dict, images: dict) -> Path:
    """The report, as one self-contained page (``mne.Report``), the verdict (:func:`verdict_text`) first, embedding
    the figures' PNG files (``images["utility"]``, ``images["attacks"]``): handed the Figures instead, MNE 1.13
    embedded them sheared (seen in Chromium), while the PNG files saved from the same figures are right. No section
    shows a tag badge (no "custom-html"/"custom-image")."""
    import mne

    title = ("[SYNTHETIC DATA] " if summary["synthetic"] else "") + f"Cohort audit: {summary['dataset']}"
    report = mne.Report(title=title, verbose="error")
    # Every element gets one tag of its own (its section's), never MNE's default "custom-html"/"custom-image", and
    # the badges are hidden (HIDE_BADGES): an element without any tag (tags=()) breaks MNE 1.13's page script
    # (gatherTags reads null for an empty data-mne-tags, so the top margin and the TOC links are never set).
    report.add_html(HIDE_BADGES + verdict_html(summary), title=VERDICT_TITLE, tags=("verdict",))
    report.add_html(cohort_html(summary), title="Cohort summary", section="Cohort", tags=("cohort",))
    report.add_html(utility_html(summary), title="Utility vs ε", section="Utility", tags=("utility",))
    report.add_image(images["utility"], title="Utility vs ε with matched null and horizon", section="Utility",
                     tags=("utility",),
                     caption="Release (solid) and matched null (dashed) with 95% intervals over subjects+seeds; "
                             "bands: non-private baseline, scaled and clipped table without noise, permuted-label "
                             "control; dash-dot: the horizon of the fixed-sequence test.")
    report.add_html(attacks_html(summary), title="Re-identification and membership", section="Attacks",
                    tags=("attacks",))
    report.add_image(images["attacks"], title="Attacks vs ε beside chance", section="Attacks", tags=("attacks",))
    report.add_html(guarantees_html(summary), title="Guarantees and caveats", section="Guarantees",
                    tags=("guarantees",))
    report.add_html(quality_html(summary), title="Data-quality flags", section="Data quality", tags=("quality",))
    report.save(str(path), open_browser=False, overwrite=True, verbose="error")
    return Path(path)


__all__ = ["figures", "utility_figure", "attack_figure", "horizon_html", "lead_text", "verdict_text", "verdict_html",
           "write_html", "close", "VERDICT_TITLE"]
