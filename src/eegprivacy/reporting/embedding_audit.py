"""Study C's outputs of one cohort drawn from its summary table
(:func:`eegprivacy.studies.embedding_audit.summaries.summarise`): four figures, the markdown report and the headline
JSON. Nothing here computes a number; every function reads the summary rows of the cells it is given.

A cohort's design (its task, how identity is linked, what pretrains the encoders) comes from ``meta["cohort"]``
(:func:`cohort_design`); an audit from before cohorts (no ``meta["cohort"]``) is eegmat's design and keeps its
file names (``embedding_audit_<figure>.png``), a cohort's files carry its name (``embedding_audit_<cohort>_*``).

One idea over about 700 lines: the outputs of one cohort's summary table; the figures, the markdown and the JSON
read the same rows and the same cohort design.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import write_text_atomic  # noqa: E402
from eegprivacy.evaluation.cluster_bootstrap import holm  # noqa: E402
from eegprivacy.reporting.format import DASH, estimate_of  # noqa: E402
from eegprivacy.studies.embedding_audit.summaries import summary_row as _get  # noqa: E402
from eegprivacy.studies.embedding_audit.units import encoder_label as _label  # noqa: E402

FIGURES = ("leakage", "aeds", "bridge", "defenses")
ALPHA = 0.05
DEFAULT_PREFIX = "embedding_audit"  # the file stem of an audit without a cohort (eegmat before cohorts)
# eegmat's design: what a meta without ``cohort`` (or a cohort entry that leaves a key out) stands for.
EEGMAT_DESIGN = {"task": "rest_vs_arithmetic", "task_text": "rest vs mental arithmetic", "identity": "label",
                 "identity_text": "reference = rest recording, queries = arithmetic recording",
                 "subject_level_task": False}
LEAKAGE_SPLITS = ("temporal_gap", "subject_disjoint")
AEDS_NOTE = (
    "AEDS = L_A (subject-disjoint) − max(R_M, R_I); R_M = max(0, 2·AUC − 1) of the stronger membership attack, R_I = "
    "max(0, (BPID@1 − 1/K)/(1 − 1/K)); its interval draws one subject resample per replicate and computes L_A, R_M "
    "and R_I on it (the parts are not combined as if independent). AEDS > 0 with its CI above 0: attribute leakage is the deciding risk even "
    "where the other endpoints look safe. Membership: the head's members are the windows of the subjects it was "
    "trained on, its non-members those of the other audited subjects (chance 0.5; a between-subject shift can also "
    "separate them, so read it as an upper bound); the head's member half is redrawn per seed. The encoder's "
    "members are its pretraining windows: 4-window blocks of each pretraining recording drawn at random, its "
    "non-members the other blocks of the same recordings with one gap window between a member and a non-member "
    "block, so within-recording drift is not membership. Its control is the same attack on the same windows "
    "through the untrained (random-init) encoder; the headline is the difference (paired subject bootstrap).")


def cohort_design(meta: dict) -> dict:
    """The cohort's design as the report states it: ``meta["cohort"]`` with eegmat's design
    (:data:`EEGMAT_DESIGN`) wherever it says nothing, so an audit from before cohorts still renders, and a
    ``pretrain_text`` built from ``n_pretrain_subjects`` where none is given."""
    given = {k: v for k, v in (meta.get("cohort") or {}).items() if v is not None}
    design = {**EEGMAT_DESIGN, **given}
    if not design.get("pretrain_text"):
        n = int(meta.get("n_pretrain_subjects") or 0)
        design["pretrain_text"] = (f"{n} further subjects pretrain the encoders and are the encoder-membership "
                                   "attack's members" if n else "no separate pretraining subjects")
    return design


def provenance_line(meta: dict | None, cells=None) -> str:
    """What every encoder's weights are, for table and figure titles: "Weights: BIOT = architecture,
    self-pretrained (120 steps on 58 windows); ..." (``meta["provenance"]``, keyed ``<encoder>/<weights>``;
    empty for an audit from before provenance was recorded)."""
    prov = (meta or {}).get("provenance") or {}
    keys = [f"{e}/{w}" for e, w in cells] if cells is not None else list(prov)
    parts = [f"{_label(*k.split('/', 1))} = {prov[k]}" for k in keys if k in prov]
    return ("Weights: " + "; ".join(parts) + ".") if parts else ""


def short_provenance(meta: dict | None) -> str:
    """The weights in a few words for a figure title: the distinct provenance of the neural encoders' primary
    weights ("EEGPT architecture (0.82 M parameters), self-pretrained here: …"; several joined by " / ")."""
    prov = (meta or {}).get("provenance") or {}
    texts = dict.fromkeys(v for k, v in prov.items() if not k.endswith(("/random_init", "/none")))
    return " / ".join(texts)


def figure_prefix(meta: dict | None) -> str:
    """The stem of a cohort's files: ``embedding_audit_<dataset>`` when ``meta`` names a cohort, else
    ``embedding_audit`` (the single-cohort files from before cohorts)."""
    meta = meta or {}
    return f"{DEFAULT_PREFIX}_{meta['dataset']}" if meta.get("cohort") is not None else DEFAULT_PREFIX


def _identity_note(meta: dict) -> str:
    return (f"BPID@1: {cohort_design(meta)['identity_text']}; K candidates = the audited subjects with both a "
            "reference and a query (chance 1/K); its interval resamples query subjects.")


def _fmt(row, digits: int = 2, ci: bool = True) -> str:
    return estimate_of(row, digits=digits, ci=ci)


def _cell_rows(summary: pd.DataFrame, encoder: str, weights: str):
    """``get(unit, metric, **where)``: the summary row of one metric of one (encoder, weights) cell, or None."""
    def get(unit: str, metric: str, **where):
        return _get(summary, encoder=encoder, weights=weights, unit=unit, metric=metric, **where)
    return get


def _save(fig, path: Path, dpi: int) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _xerr(r) -> list:
    return [[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]]


def leakage_figure(summary: pd.DataFrame, cells, path: Path, title: str) -> Path:
    """Attribute leakage of every cell under both splits, beside its Gaussian and permuted controls."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(cells) + 2), sharey=True)
    for ax, split in zip(axes, ("temporal_gap", "subject_disjoint")):
        for i, (e, w) in enumerate(cells):
            score, g, perm, gain = (_get(summary, encoder=e, weights=w, unit=f"attribute/{split}", metric=m)
                                    for m in ("score", "control_gaussian", "control_permuted", "gain"))
            if score is None:
                continue
            ax.plot([g["value"]], [i], "s", color="0.6", label="Gaussian control" if i == 0 else None)
            ax.plot([perm["value"]], [i], "^", color="0.3", label="permuted control" if i == 0 else None)
            ax.plot([score["value"]], [i], "o", color="C0", label="real embeddings" if i == 0 else None)
            ax.errorbar([gain["value"]], [i + 0.25], xerr=_xerr(gain),
                        fmt="D", color="C3", ms=4, label="gain L_A [95% CI]" if i == 0 else None)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_title(split.replace("_", " "))
        ax.set_xlabel("mean Pearson r (centered PSD)")
    axes[0].set_yticks(range(len(cells)), [_label(e, w) for e, w in cells])
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{title}: attribute leakage vs negative controls")
    return _save(fig, path, 120)


def aeds_figure(summary: pd.DataFrame, cells, path: Path, title: str) -> Path:
    """AEDS of every cell with the three scores it combines."""
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cells) + 1.8))
    for i, (e, w) in enumerate(cells):
        for j, (metric, marker, name) in enumerate((("aeds", "D", "AEDS [95% CI]"), ("l_a", "o", "L_A"),
                                                    ("r_m", "s", "R_M"), ("r_i", "^", "R_I"))):
            r = _get(summary, encoder=e, weights=w, unit="aeds", metric=metric)
            if r is None:
                continue
            err = None if metric != "aeds" else _xerr(r)
            ax.errorbar([r["value"]], [i + 0.15 * j], xerr=err, fmt=marker, color=f"C{j}", ms=5,
                        label=name if i == 0 else None)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_yticks(range(len(cells)), [_label(e, w) for e, w in cells])
    ax.set_xlabel("score (AEDS = L_A − max(R_M, R_I))")
    ax.legend(fontsize=7)
    ax.set_title(f"{title}: AEDS per encoder")
    return _save(fig, path, 120)


def bridge_figure(bridge: pd.DataFrame, path: Path, title: str) -> Path:
    """The bridge's gain for every (source, target) pair, with its CI and bound (``bridge``: its summary rows,
    source in ``encoder``, target in ``weights``)."""
    names = sorted(set(bridge["encoder"]) | set(bridge["weights"]))
    M = np.full((len(names), len(names)), np.nan)
    text = [["" for _ in names] for _ in names]
    for _, r in bridge[bridge["metric"] == "gain"].iterrows():
        i, j = names.index(r["encoder"]), names.index(r["weights"])  # encoder = source, weights = target
        M[i, j] = r["value"]
        bound = _get(bridge, encoder=r["encoder"], weights=r["weights"], metric="bound")
        text[i][j] = (f"{r['value']:.2f}\n[{r['ci_low']:.2f}, {r['ci_high']:.2f}]\nbound "
                      f"{bound['value']:.2f}" if bound is not None else "")
    fig, ax = plt.subplots(figsize=(1.9 * len(names) + 2, 1.5 * len(names) + 1.5))
    lim = np.nanmax(np.abs(M)) if np.isfinite(M).any() else 1.0
    im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim)
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, text[i][j] or ("—" if i == j else ""), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(names)), [_label(n, "none") for n in names])
    ax.set_yticks(range(len(names)), [_label(n, "none") for n in names])
    ax.set_xlabel("target encoder t (its held-out subjects are decoded)")
    ax.set_ylabel("source encoder s (decoder D_s)")
    fig.colorbar(im, ax=ax, label="bridged gain over matched control")
    ax.set_title(f"{title}: cross-encoder bridge")
    return _save(fig, path, 120)


def _points(part: pd.DataFrame, family: str, metric: str, **where) -> list[tuple]:
    """(summary row, strength) of ``metric`` at each strength of a defense family, in increasing strength."""
    xs = sorted({float(u.split("/")[2]) for u in part["unit"]})
    pts = [(_get(part, unit=f"defense/{family}/{x:g}", metric=metric, **where), x) for x in xs]
    return [(r, x) for r, x in pts if r is not None]


def _errorbar(ax, pts, style: str, color: str, **kw) -> None:
    """``pts``: (summary row, x) pairs; ∞ is plotted at 32."""
    ax.errorbar([min(x, 32.0) for _, x in pts], [r["value"] for r, _ in pts],
                yerr=[[r["value"] - r["ci_low"] for r, _ in pts], [r["ci_high"] - r["value"] for r, _ in pts]],
                fmt=style, color=color, ms=4, capsize=2, **kw)


def _minus_chance(r: pd.Series) -> pd.Series:
    """A summary row with its value and interval moved by its chance level (BPID@1 − 1/K)."""
    out = r.copy()
    for k in ("value", "ci_low", "ci_high"):
        out[k] = float(r[k]) - float(r["chance"])
    return out


def _defense_identity(summary: pd.DataFrame) -> pd.DataFrame:
    """The identity rows of the defended releases (BPID@1 of what a defense releases), if the audit has them."""
    return summary[summary["unit"].str.startswith("defense/") & (summary["endpoint"] == "identity")
                   & (summary["metric"] == "bpid_at_1")]


def defenses_figure(summary: pd.DataFrame, cells, path: Path, title: str,
                    task_text: str = EEGMAT_DESIGN["task_text"]) -> Path:
    """Leakage (top), utility on the cohort's task (``task_text``) and, where the audit measured it, BPID@1 minus
    chance of the defended release (bottom) along each defense family's strength."""
    families = (("noise", "noise σ (× per-dim std)"), ("pca", "PCA components"), ("dropout", "dropout rate"),
                ("dp_head", "DP-SGD head ε (∞ plotted at 32)"))
    identity = not _defense_identity(summary).empty
    n_rows = 3 if identity else 2
    fig, axes = plt.subplots(n_rows, 4, figsize=(16, 3.5 * n_rows), sharey="row")
    for k, (family, xlabel) in enumerate(families):
        for c, (e, w) in enumerate(cells):
            part = summary[(summary["encoder"] == e) & (summary["weights"] == w)
                           & summary["unit"].str.startswith(f"defense/{family}/")]
            if part.empty:
                continue
            for attacker, style in (("ridge", "-o"), ("wiener", "--x")):
                pts = _points(part, family, "gain", attacker=attacker)
                if pts:
                    _errorbar(axes[0, k], pts, style, f"C{c}",
                              label=f"{_label(e, w)}" + (" (Wiener)" if attacker == "wiener" else ""))
            _errorbar(axes[1, k], _points(part, family, "balanced_accuracy"), "-o", f"C{c}")
            if identity:
                pts = [(_minus_chance(r), x) for r, x in _points(part, family, "bpid_at_1", endpoint="identity")]
                _errorbar(axes[2, k], pts, "-o", f"C{c}")
        for row in range(n_rows):
            if family in ("noise", "dp_head"):
                axes[row, k].set_xscale("log")
        axes[0, k].axhline(0, color="k", lw=0.6)
        axes[1, k].axhline(0.5, color="0.5", lw=0.6, ls=":")
        axes[n_rows - 1, k].set_xlabel(xlabel)
        if identity:
            axes[2, k].axhline(0, color="0.5", lw=0.6, ls=":")
    axes[0, 0].set_ylabel("attribute leakage gain L_A [95% CI]")
    axes[1, 0].set_ylabel(f"{task_text} balanced accuracy")
    if identity:
        axes[2, 0].set_ylabel("BPID@1 − chance [95% CI]")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(f"{title}: defenses (top: leakage, then utility on {task_text}"
                 f"{', then identity linkage' if identity else ''}; dotted = chance)")
    return _save(fig, path, 110)


def figure_paths(folder: Path, prefix: str = DEFAULT_PREFIX) -> dict[str, Path]:
    """Where each figure goes: ``folder/<prefix>_<name>.png``."""
    return {name: Path(folder) / f"{prefix}_{name}.png" for name in FIGURES}


def figures(summary: pd.DataFrame, cells: list[tuple[str, str]], folder: Path, title: str,
            prefix: str | None = None, meta: dict | None = None) -> list[Path]:
    """Every figure into ``folder`` as ``<prefix>_<name>.png`` (the bridge only when it ran). ``prefix`` defaults
    to :func:`figure_prefix` of ``meta`` (``embedding_audit_<cohort>``, or ``embedding_audit`` without a cohort),
    the same stem :func:`report_md` links to; ``meta`` also gives the cohort's task for the utility axis."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = figure_paths(folder, prefix or figure_prefix(meta))
    if short_provenance(meta):  # every figure title says what the encoders' weights are
        title = f"{title} [{short_provenance(meta)}]"
    paths = [leakage_figure(summary, cells, path["leakage"], title),
             aeds_figure(summary, cells, path["aeds"], title)]
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        paths.append(bridge_figure(bridge, path["bridge"], title))
    paths.append(defenses_figure(summary, cells, path["defenses"], title,
                                 task_text=cohort_design(meta or {})["task_text"]))
    return paths


# ----------------------------------------------------------------------------------------------- markdown

def _encoder_lines(cells, encoders_meta: dict) -> list[str]:
    lines = ["## Encoders", "",
             ("| encoder | weights | parameters | dim | config | pretraining | checkpoint sha256 | channels "
              "| ms/window (1 thread) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for (e, w) in cells:
        m = encoders_meta[(e, w)]
        d = m["describe"]
        pre = m.get("pretrain") or {}
        pre_text = (f"{pre['steps']} steps, loss {pre['loss_first']:.3f} → {pre['loss_last']:.3f}, "
                    f"{pre['wall_s']:.0f} s on {pre['n_windows']} windows of {pre['n_subjects']} subjects"
                    if pre else DASH)
        flags = d["channel_mapping"].get("flags") or []
        lines.append(f"| {_label(e, 'none')} | {w} | {d['n_params']:,} | {m['dim']} | "
                     f"{json.dumps(d['config']) if d['config'] else 'published'} | {pre_text} | "
                     f"{(pre.get('checkpoint_sha256') or d.get('checkpoint_sha256') or DASH)[:12]} | "
                     f"{len(d['channels'])}"
                     f"{' (' + ', '.join(map(str, flags)) + ')' if flags else ''} | {m['ms_per_window']:.1f} |")
    return lines


def channel_lines(cells, encoders_meta: dict) -> list[str]:
    """The cohort's montage onto each encoder's expected channels (issue 21): what is fed, what is missing and how
    it was handled (dropped, or zero-filled with a flag), which names were read through an alias (T3 -> T7), how
    many dataset channels the encoder ignores, and the resampling. One row per encoder (its weights share it)."""
    lines = ["## Channel mapping and resampling", "",
             "| encoder | dataset channels | fed to the encoder | missing (policy) | aliased | ignored | rate |",
             "|---|---|---|---|---|---|---|"]
    seen = set()
    for (e, w) in cells:
        if e in seen:
            continue
        seen.add(e)
        d = encoders_meta[(e, w)]["describe"]
        m = d["channel_mapping"]
        policy = "zero-filled, flagged" if m["missing_policy"] == "zero" else "dropped"
        missing = f"{', '.join(m['missing'])} ({policy})" if m["missing"] else "none"
        aliased = ", ".join(f"{k} ← {v}" for k, v in m.get("aliased", {}).items()) or "none"
        rate = (f"{d['input_sfreq']:g} → {d['expected_sfreq']:g} Hz" if d.get("expected_sfreq")
                and d["expected_sfreq"] != d["input_sfreq"] else f"{d['input_sfreq']:g} Hz (native)")
        lines.append(f"| {_label(e, 'none')} | {m['n_in']} | {m['n_out']} | {missing} | {aliased} | "
                     f"{len(m.get('unused', []))} | {rate} |")
    return lines + [""]


def leakage_holm(summary: pd.DataFrame, cells) -> dict[tuple, tuple[float, float]]:
    """(permutation p, Holm-adjusted p) of the undefended L_A of every (encoder, weights, split) in the table:
    Holm over all of the table's cells at once (2 splits x cells), NaN p-values not counted."""
    keys, raw = [], []
    for (e, w) in cells:
        for split in LEAKAGE_SPLITS:
            r = _get(summary, encoder=e, weights=w, unit=f"attribute/{split}", metric="p_value")
            keys.append((e, w, split))
            raw.append(float(r["value"]) if r is not None else np.nan)
    return dict(zip(keys, zip(raw, holm(raw))))


def _p_text(pair) -> str:
    raw, adj = pair
    if not np.isfinite(raw):
        return DASH
    return f"{raw:.3f} / {adj:.3f}{' *' if adj <= ALPHA else ''}"


def _holm_note(tests: dict) -> str:
    raw = np.array([p for p, _ in tests.values()], float)
    m = int(np.isfinite(raw).sum())
    if m == 0:
        return "No permutation p-values were computed for L_A, so no cell is marked significant."
    note = (f"p: split-local permutation p-value of L_A, raw / Holm-adjusted over the m = {m} L_A tests of this "
            f"table (Holm–Bonferroni, family-wise α = {ALPHA:g}); * marks Holm-adjusted p ≤ {ALPHA:g}. The "
            "intervals are per-cell 95 % intervals, not corrected. These p-values describe the permutation null; "
            "the attribute claim is decided once, by the test in the Claims table above.")
    smallest = float(np.nanmin(raw))
    if smallest > ALPHA / m:
        note += (f" The smallest raw p here is {smallest:.3f} > α/m = {ALPHA / m:.4f}: at this number of "
                 "permutations no cell can clear Holm's first step, however large its L_A.")
    return note


def _headline_lines(summary: pd.DataFrame, cells, meta: dict | None = None) -> list[str]:
    tests = leakage_holm(summary, cells)
    lines = ["## Headline per encoder", "",
             ("| encoder | raw-copy | L_A temporal gap | p (Holm) | L_A subject-disjoint (controls G / P) | p (Holm) "
              "| BPID@1 (chance) | MIA AUC head: loss / LiRA | MIA AUC encoder (random-init control) "
              "| encoder − control | recon. R² | AEDS |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (e, w) in cells:
        g = _cell_rows(summary, e, w)
        sd = g("attribute/subject_disjoint", "gain")
        ctrl = (f" ({g('attribute/subject_disjoint', 'control_gaussian')['value']:.2f} / "
                f"{g('attribute/subject_disjoint', 'control_permuted')['value']:.2f})" if sd is not None else "")
        b = g("identity", "bpid_at_1")
        lines.append(
            f"| {_label(e, w)} | {_fmt(g('raw_copy', 'fraction_cosine_ge_0.99'), 3, False)} | "
            f"{_fmt(g('attribute/temporal_gap', 'gain'))} | {_p_text(tests[(e, w, 'temporal_gap')])} | "
            f"{_fmt(sd)}{ctrl} | {_p_text(tests[(e, w, 'subject_disjoint')])} | "
            f"{_fmt(b)} ({b['chance']:.3f}) | "
            f"{_fmt(g('membership', 'auc', endpoint='membership_head', attacker='loss_threshold'))} / "
            f"{_fmt(g('membership', 'auc', endpoint='membership_head', attacker='lira_online'))} | "
            f"{_fmt(g('membership', 'auc', endpoint='membership_encoder'))} "
            f"({_fmt(g('membership', 'control_random_init', endpoint='membership_encoder'), ci=False)}) | "
            f"{_fmt(g('membership', 'auc_minus_control', endpoint='membership_encoder'))} | "
            f"{_fmt(g('reconstruction', 'r2'), 3, False)} | {_fmt(g('aeds', 'aeds'))} |")
    return lines + ["", _holm_note(tests), "", AEDS_NOTE + " " + _identity_note(meta or {}), ""]


def subject_label_holm(summary: pd.DataFrame, cells) -> dict[tuple, tuple[float, float]]:
    """(permutation p, Holm-adjusted p) of the subject-level label's balanced accuracy of every (encoder, weights)
    that has one: Holm over the table's cells, NaN p-values not counted."""
    keys, raw = [], []
    for (e, w) in cells:
        r = _get(summary, encoder=e, weights=w, unit="subject_label", metric="p_value")
        if _get(summary, encoder=e, weights=w, unit="subject_label", metric="balanced_accuracy") is not None:
            keys.append((e, w))
            raw.append(float(r["value"]) if r is not None else np.nan)
    return dict(zip(keys, zip(raw, holm(raw))))


def _value_text(r, digits: int = 2) -> str:
    return DASH if r is None or not np.isfinite(r["value"]) else f"{r['value']:.{digits}f}"


def subject_label_lines(summary: pd.DataFrame, cells, meta: dict) -> list[str]:
    """The subject-level label's leakage (MSU's diagnosis): decoded from the embeddings of held-out subjects,
    one prediction per subject, beside its Gaussian control and its subject-label permutation null (mean and
    95th percentile); nothing when the audit has no ``subject_label`` rows."""
    part = summary[summary["unit"] == "subject_label"]
    if part.empty:
        return []
    endpoint = str(part["endpoint"].iloc[0])
    tests = subject_label_holm(summary, cells)
    lines = [f"## {endpoint.replace('_', ' ').capitalize()} (subject-level label) leakage", "",
             f"Is the {cohort_design(meta)['task_text']} label decodable from the embeddings of held-out subjects? "
             "A logistic head on subject-disjoint folds; BA subject-level: balanced accuracy of one prediction per "
             "held-out subject (its windows' mean probability), 95 % interval: the permutation test inverted under "
             "a shift (the subject bootstrap keeps the fitted heads and undercovers: `reports/calibration.md`); "
             "window BA: the same over windows, subject-bootstrap CI. Controls: G = Gaussian embeddings, P = the "
             "subject labels permuted (mean and 95th percentile of the permutation null); chance 0.5.", "",
             "| encoder | BA subject-level [CI] | controls G / P (mean, q95) | p (Holm) | window BA [CI] |",
             "|---|---|---|---|---|"]
    for (e, w) in cells:
        g = _cell_rows(summary, e, w)
        ba = g("subject_label", "balanced_accuracy")
        if ba is None:
            continue
        controls = (f"{_value_text(g('subject_label', 'control_gaussian'))} / "
                    f"{_value_text(g('subject_label', 'control_permuted'))}, "
                    f"{_value_text(g('subject_label', 'control_permuted_q95'))}")
        lines.append(f"| {_label(e, w)} | {_fmt(ba)} | {controls} | {_p_text(tests[(e, w)])} | "
                     f"{_fmt(g('subject_label', 'window_balanced_accuracy'))} |")
    m = int(np.isfinite([p for p, _ in tests.values()]).sum())
    return lines + ["", f"p: subject-label permutation p-value, raw / Holm-adjusted over the m = {m} tests of this "
                        f"table (α = {ALPHA:g}; * marks Holm-adjusted p ≤ {ALPHA:g}); intervals uncorrected.", ""]


def _deployment_lines(summary: pd.DataFrame, cells, sigma: float, meta: dict | None = None) -> list[str]:
    task = cohort_design(meta or {})["task_text"]
    lines = [f"## Deployment relevance: {task} of held-out subjects", "",
             f"| encoder | clean (controls G / P) | noised σ = {sigma:g} × std (mean over seeds [t-CI]) |",
             "|---|---|---|"]
    for (e, w) in cells:
        g = _cell_rows(summary, e, w)
        cg, cp = g("deployment/0", "control_gaussian"), g("deployment/0", "control_permuted")
        lines.append(f"| {_label(e, w)} | {_fmt(g('deployment/0', 'balanced_accuracy'))} ({cg['value']:.2f} / "
                     f"{cp['value']:.2f}) | {_fmt(g(f'deployment/{sigma:g}', 'balanced_accuracy'))} |")
    return lines


def _verdict(closes, undecided=None) -> str:
    """The relative verdict over seeds: 1 yes, 0 no, NaN undecided (``undecided``: the share of undecided seeds)."""
    if closes is None:
        return DASH
    value = float(closes["value"])
    if not np.isfinite(value):
        share = float(undecided["value"]) if undecided is not None else np.nan
        return ("undecided: no utility to keep" if not np.isfinite(share) or share >= 1 else
                f"undecided on {share:.0%} of seeds")
    return "yes, every seed" if value == 1 else "no" if value == 0 else f"yes on {value:.0%} of seeds"


def _epsilon_text(spent, bound, delta) -> str:
    """ε with its unit; beside a window-level ε, its subject-level group-privacy bound (k ε, δ_k)."""
    if spent is None:
        return DASH
    unit = spent.get("eps_unit", "none")
    text = f"{spent['value']:.2f} per {unit}" if unit in ("window", "subject") else f"{spent['value']:.2f}"
    if unit == "window":
        if bound is None or delta is None:
            return text + "; per subject: not computed"
        k = bound["value"] / spent["value"]
        vacuous = " (vacuous: δ_k ≥ 1)" if delta["value"] >= 1 else ""
        text += f"; per subject ≤ {bound['value']:.1f} (k = {k:.0f} windows, δ_k = {delta['value']:.2g}){vacuous}"
    return text


def _undefended_text(g) -> str:
    base = g("undefended_balanced_accuracy")
    if base is None:
        return DASH
    cg, cp = g("undefended_control_gaussian"), g("undefended_control_permuted")
    return f"{_fmt(base)} ({cg['value']:.2f} / {cp['value']:.2f})"


def _identity_cells(g) -> str:
    """The defended release's BPID@1 [CI] (chance) and its identity verdict, as two table cells."""
    b = g("bpid_at_1", endpoint="identity")
    bpid = DASH if b is None else f"{_fmt(b)} ({b['chance']:.3f})"
    return f" {bpid} | {_verdict(g('closes_identity'), g('closes_identity_undecided'))} |"


def _defense_lines(summary: pd.DataFrame, cells, meta: dict) -> list[str]:
    kept = meta.get("utility_kept", 0.5)
    identity = not _defense_identity(summary).empty
    task = cohort_design(meta)["task_text"]
    lines = ["", "## Defenses (subject-disjoint; noise, dropout and DP-SGD rows: mean over "
             f"{meta['defense_seeds']} noise seeds with the t-interval across seeds)", "",
             f"| encoder | defense | L_A ridge | L_A Wiener | balanced accuracy ({task}) | undefended BA (controls "
             "G / P) | utility kept | MIA AUC (DP head) | ε spent (unit) | closes the channel | absolute bar "
             f"{meta['utility_threshold']:g} |" + (" BPID@1 [CI] (chance) | closes identity |" if identity else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if identity else "")]
    closing, closing_identity = [], []
    for (e, w) in cells:
        part = summary[(summary["encoder"] == e) & (summary["weights"] == w)
                       & summary["unit"].str.startswith("defense/")]
        for unit in sorted(part["unit"].unique(), key=lambda u: (u.split("/")[1], float(u.split("/")[2]))):
            g = lambda metric, **kw: _get(part, unit=unit, metric=metric, **kw)  # noqa: E731
            closes, absolute = g("closes_channel"), g("closes_channel_absolute")
            if closes is not None and closes["value"] == 1:
                closing.append(f"{_label(e, w)} {closes['defense']}")
            closes_id = g("closes_identity")
            if closes_id is not None and closes_id["value"] == 1:
                closing_identity.append(f"{_label(e, w)} {closes_id['defense']}")
            lines.append(f"| {_label(e, w)} | {g('gain', attacker='ridge')['defense']} | "
                         f"{_fmt(g('gain', attacker='ridge'))} | {_fmt(g('gain', attacker='wiener'))} | "
                         f"{_fmt(g('balanced_accuracy'))} | {_undefended_text(g)} | "
                         f"{_fmt(g('utility_kept'), 2, False)} | {_fmt(g('auc'))} | "
                         f"{_epsilon_text(g('epsilon_spent'), g('epsilon_subject_bound'), g('delta_subject_bound'))}"
                         f" | {_verdict(closes, g('closes_channel_undecided'))} | "
                         f"{_verdict(absolute) if absolute is not None else DASH} |"
                         + (_identity_cells(g) if identity else ""))
    identity_text = ("" if not identity else
                     " Closes identity: the stage's verdict for the identity endpoint (BPID@1 of the released "
                     "embeddings, reference and queries as in the headline, chance 1/K) under the same utility "
                     "rule and coding as the attribute channel (yes / no / undecided). Closing identity: "
                     f"{', '.join(closing_identity) if closing_identity else 'none'}.")
    return lines + [
        "", f"A defense closes the channel when L_A's CI reaches 0 for every attacker (all attackers must fail; "
        f"none is picked afterwards) and it keeps ≥ {kept:g} of the undefended utility above chance: utility kept "
        "= (BA_defended − 0.5) / (BA_undefended − 0.5), against the undefended embeddings' held-out balanced "
        "accuracy on the same subjects, folds and seed (the DP-SGD head: its release half). Leakage left open "
        "is a no whatever the utility; otherwise, where the undefended utility's CI does not lie above chance "
        "and both of its controls (G: Gaussian embeddings, P: permuted training rows), there is no utility to "
        "keep and the verdict is undecided. The absolute bar (the earlier rule: balanced accuracy ≥ "
        f"{meta['utility_threshold']:g}) is kept beside it. The verdict rests on uncorrected 95 % intervals on "
        "purpose: a multiplicity correction widens them and would make \"closes\" easier to claim. ε is stated "
        "in the unit it protects; a window-level ε carries its subject-level bound by group privacy "
        "(ε_k = k ε, δ_k = k e^{(k−1)ε} δ for k windows of one subject), vacuous when δ_k ≥ 1. The DP head "
        "standardises each window by its own coordinates (data-independent, no ε spent), so the ε printed is "
        f"the whole guarantee. Closing defenses: {', '.join(closing) if closing else 'none'}.{identity_text}",
        ""]


def _bridge_lines(bridge: pd.DataFrame) -> list[str]:
    lines = ["## Cross-encoder bridge (decoder on s, ridge bridge t → s, scored on t's held-out subjects)", "",
             "| source s | target t | gain [CI] | score | matched control ρ0 | β | τ_t² | ε_br | bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (s, t), part in bridge.groupby(["encoder", "weights"]):
        g = lambda m: _get(part, metric=m)  # noqa: E731
        lines.append(f"| {_label(s, 'none')} | {_label(t, 'none')} | {_fmt(g('gain'))} | "
                     f"{g('score')['value']:.2f} | {g('rho0')['value']:.2f} | {g('beta')['value']:.2f} | "
                     f"{g('tau2')['value']:.2f} | {g('bridge_error')['value']:.2f} | {g('bound')['value']:.2f} |")
    return lines + ["", "bound = sqrt(β / (1 + τ_t²)) − ε_br − ρ0 (protocol); the measured gain sits beside it.", ""]


def _design_lines(meta: dict) -> list[str]:
    d = cohort_design(meta)
    level = ("a subject-level label (every window of a subject carries it)" if d["subject_level_task"]
             else "a window-level label")
    return ["## Cohort design", "", "| | |", "|---|---|",
            f"| task | {d['task_text']} (`{d['task']}`; {level}) |",
            f"| identity linkage | {d['identity_text']} (`{d['identity']}`) |",
            f"| pretraining | {d['pretrain_text']} |", ""]


TABLE_SECTIONS = ("## Headline", "## Deployment", "## Defenses", "## Cross-encoder")


def _with_provenance(lines: list[str], text: str) -> list[str]:
    """``text`` (what the encoders' weights are) under the heading of every table section, the subject-level
    label's included: no table of study C without the provenance of the embeddings it audits."""
    if not text:
        return lines
    out = []
    for line in lines:
        out.append(line)
        if line.startswith(TABLE_SECTIONS) or (line.startswith("## ") and "(subject-level label)" in line):
            out += ["", f"*{text}*"]
    return out


def report_md(summary: pd.DataFrame, cells, meta: dict, encoders_meta: dict, prefix: str | None = None,
              claims: pd.DataFrame | None = None) -> str:
    """The markdown report: the cohort's design, encoders, headline endpoints, the subject-level label's leakage
    (where the cohort has one), deployment check, defenses, bridge, figures. ``prefix``: the figures' and tidy
    table's file stem, by default :func:`figure_prefix` (the one :func:`figures` writes under)."""
    prefix = prefix or figure_prefix(meta)
    synthetic = " [SYNTHETIC]" if meta.get("synthetic") else ""
    lines = [f"# Study C: embedding audit on {meta['dataset']}{synthetic}", "",
             f"{meta['n_audit_subjects']} audited subjects ({meta['n_audit_windows']} windows of "
             f"{meta['window_s']:g} s; task: {cohort_design(meta)['task_text']}); "
             f"{cohort_design(meta)['pretrain_text']}. Profile `{meta['profile']}`. "
             "Every interval is a 95 % bootstrap CI that resamples subjects (the privacy unit; column `ci_over` in "
             f"`metrics/{prefix}.csv`), except the task's, which inverts its permutation test: membership and "
             "AEDS are averaged over the member draws (`defense_seeds`), each with its subject-bootstrap bounds "
             "averaged (`subjects+seeds`); defense rows "
             "repeated over noise seeds are t-intervals across seeds (`seeds`). Every leakage value "
             "sits next to its Gaussian and split-local-permutation controls. Source: MLflow experiment "
             "`study-c-embedding-audit` (parents named `embedding_audit-<dataset>-<encoder>-<weights>`).", ""]
    if claims is not None:
        from eegprivacy.reporting.claims import claims_lines

        lines += claims_lines(claims)
    lines += _design_lines(meta) + _encoder_lines(cells, encoders_meta) + [""] + channel_lines(cells, encoders_meta)
    lines += _headline_lines(summary, cells, meta) + subject_label_lines(summary, cells, meta)
    lines += _deployment_lines(summary, cells, meta["deployment_sigma"], meta) + _defense_lines(summary, cells, meta)
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        lines += _bridge_lines(bridge)
    lines = _with_provenance(lines, provenance_line(meta, cells))
    shown = [name for name in FIGURES if name != "bridge" or not bridge.empty]  # the figures :func:`figures` writes
    lines += ["## Figures", ""]
    for name in shown:
        lines += [f"![{'AEDS' if name == 'aeds' else name}](figures/{figure_paths(Path(), prefix)[name].name})", ""]
    from eegprivacy.reporting.calibration import tests_lines

    return "\n".join(lines + tests_lines(f"reports/embedding_audit_{meta['dataset']}.md"))


# ----------------------------------------------------------------------------------------------- headline JSON

def _estimate(r) -> dict | None:
    if r is None:
        return None
    return {k: float(r[k]) if np.isfinite(r[k]) else None for k in ("value", "ci_low", "ci_high")}


def _number(r) -> float | None:
    return None if r is None or not np.isfinite(r["value"]) else float(r["value"])


def _subject_label(get) -> dict | None:
    """The subject-level label's leakage of one cell: its subject-level BA with CI, window BA, controls and p."""
    ba = get("subject_label", "balanced_accuracy")
    if ba is None:
        return None
    return {"endpoint": str(ba["endpoint"]), "balanced_accuracy": _estimate(ba), "chance": 0.5,
            "ci_over": str(ba.get("ci_over", "subjects")),
            "window_balanced_accuracy": _estimate(get("subject_label", "window_balanced_accuracy")),
            **{k: _number(get("subject_label", k)) for k in ("control_gaussian", "control_permuted",
                                                             "control_permuted_q95", "p_value")}}


def _defense_identity_verdicts(summary: pd.DataFrame) -> dict:
    """Per ``<encoder>/<weights>:<defense>`` with identity rows: BPID@1 of the release with its CI and chance,
    and the identity verdict (1 yes, 0 no, a share of seeds, None undecided) with the share of undecided seeds."""
    out = {}
    for r in _defense_identity(summary).itertuples():
        part = summary[(summary["encoder"] == r.encoder) & (summary["weights"] == r.weights)
                       & (summary["unit"] == r.unit)]
        out[f"{r.encoder}/{r.weights}:{r.defense}"] = {
            "bpid_at_1": _estimate(summary.loc[r.Index]), "chance": _number({"value": float(r.chance)}),
            "closes_identity": _number(_get(part, metric="closes_identity")),
            "closes_identity_undecided": _number(_get(part, metric="closes_identity_undecided"))}
    return out


def headline(summary: pd.DataFrame, cells, meta: dict) -> dict:
    """Per cell: L_A (both splits), BPID@1, membership AUCs, reconstruction R², AEDS, raw-copy fraction, the
    deployment accuracy and, where the cohort has one, the subject-level label's leakage, each with its CI; the
    defenses that close the attribute channel and identity, and the cohort's design."""
    out = {"meta": meta, "cohort": cohort_design(meta), "encoders": {}}
    for (e, w) in cells:
        get = _cell_rows(summary, e, w)
        g = lambda unit, metric, **kw: _estimate(get(unit, metric, **kw))  # noqa: E731
        out["encoders"][f"{e}/{w}"] = {
            "l_a_subject_disjoint": g("attribute/subject_disjoint", "gain"),
            "l_a_ci_lower_bound": (g("attribute/subject_disjoint", "gain") or {"ci_low": None})["ci_low"],
            "l_a_temporal_gap": g("attribute/temporal_gap", "gain"),
            "bpid_at_1": g("identity", "bpid_at_1"),
            "mia_auc_head": g("membership", "auc", endpoint="membership_head", attacker="loss_threshold"),
            "mia_auc_head_lira": g("membership", "auc", endpoint="membership_head", attacker="lira_online"),
            "mia_auc_encoder": g("membership", "auc", endpoint="membership_encoder"),
            "mia_auc_encoder_random_init_control": g("membership", "control_random_init",
                                                     endpoint="membership_encoder"),
            "mia_auc_encoder_minus_control": g("membership", "auc_minus_control", endpoint="membership_encoder"),
            "reconstruction_r2": g("reconstruction", "r2"),
            "aeds": g("aeds", "aeds"),
            "raw_copy_fraction": g("raw_copy", "fraction_cosine_ge_0.99"),
            "deployment_balanced_accuracy": g("deployment/0", "balanced_accuracy"),
            "subject_label": _subject_label(get),
        }
    for key, metric in (("defenses_closing_the_channel", "closes_channel"),
                        ("defenses_closing_the_channel_absolute", "closes_channel_absolute")):
        closes = summary[(summary["metric"] == metric) & (summary["value"] == 1)]
        out[key] = sorted(f"{r.encoder}/{r.weights}:{r.defense}" for r in closes.itertuples())
    undecided = summary[(summary["metric"] == "closes_channel_undecided") & (summary["value"] > 0)]
    out["defenses_undecided"] = sorted(f"{r.encoder}/{r.weights}:{r.defense}" for r in undecided.itertuples())
    closes_identity = summary[(summary["metric"] == "closes_identity") & (summary["value"] == 1)]
    out["defenses_closing_identity"] = sorted(f"{r.encoder}/{r.weights}:{r.defense}"
                                              for r in closes_identity.itertuples())
    out["defense_identity"] = _defense_identity_verdicts(summary)
    eps = summary[summary["metric"] == "epsilon_spent"]
    out["dp_head_epsilon"] = {f"{r.encoder}/{r.weights}:{r.defense}": {"value": float(r.value),
                                                                      "eps_unit": getattr(r, "eps_unit", "none")}
                              for r in eps.itertuples()}
    return out


def write_headline(path: Path, payload: dict) -> None:
    """The headline as strict JSON (sorted keys, no NaN), written atomically."""
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False, default=float) + "\n")
