"""Study C's outputs drawn from the summary table (:func:`eegprivacy.studies.embedding_audit.summaries.summarise`):
four figures, the markdown report and the headline JSON. Nothing here computes a number; every function reads
the summary rows of the cells it is given.
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
LEAKAGE_SPLITS = ("temporal_gap", "subject_disjoint")
AEDS_NOTE = (
    "AEDS = L_A (subject-disjoint) − max(R_M, R_I); R_M = max(0, 2·AUC − 1) of the stronger membership attack, R_I = "
    "max(0, (BPID@1 − 1/K)/(1 − 1/K)). AEDS > 0 with its CI above 0: attribute leakage is the deciding risk even "
    "where the other endpoints look safe. Membership: the head's members are the windows of the subjects it was "
    "trained on, its non-members those of the other audited subjects (chance 0.5; a between-subject shift can also "
    "separate them, so read it as an upper bound); the head's member half is redrawn per seed. The encoder's "
    "members are its pretraining windows: 4-window blocks of each pretraining recording drawn at random, its "
    "non-members the other blocks of the same recordings with one gap window between a member and a non-member "
    "block, so within-recording drift is not membership. Its control is the same attack on the same windows "
    "through the untrained (random-init) encoder; the headline is the difference (paired subject bootstrap). "
    "BPID@1 has K candidates = audited subjects with both recordings; its interval resamples query subjects.")


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


def defenses_figure(summary: pd.DataFrame, cells, path: Path, title: str) -> Path:
    """Leakage (top) and utility (bottom) along each defense family's strength."""
    families = (("noise", "noise σ (× per-dim std)"), ("pca", "PCA components"), ("dropout", "dropout rate"),
                ("dp_head", "DP-SGD head ε (∞ plotted at 32)"))
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey="row")
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
        if family in ("noise", "dp_head"):
            axes[0, k].set_xscale("log")
            axes[1, k].set_xscale("log")
        axes[0, k].axhline(0, color="k", lw=0.6)
        axes[1, k].axhline(0.5, color="0.5", lw=0.6, ls=":")
        axes[1, k].set_xlabel(xlabel)
    axes[0, 0].set_ylabel("attribute leakage gain L_A [95% CI]")
    axes[1, 0].set_ylabel("rest vs arithmetic balanced accuracy")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(f"{title}: defenses (top: leakage, bottom: utility; dotted = chance)")
    return _save(fig, path, 110)


def figures(summary: pd.DataFrame, cells: list[tuple[str, str]], folder: Path, title: str) -> list[Path]:
    """Every figure into ``folder`` as ``embedding_audit_<name>.png`` (the bridge only when it ran)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = {name: folder / f"embedding_audit_{name}.png" for name in FIGURES}
    paths = [leakage_figure(summary, cells, path["leakage"], title),
             aeds_figure(summary, cells, path["aeds"], title)]
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        paths.append(bridge_figure(bridge, path["bridge"], title))
    paths.append(defenses_figure(summary, cells, path["defenses"], title))
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
                     f"{(pre.get('checkpoint_sha256') or DASH)[:12]} | {len(d['channels'])}"
                     f"{' (' + ', '.join(map(str, flags)) + ')' if flags else ''} | {m['ms_per_window']:.1f} |")
    return lines


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
            "intervals are per-cell 95 % intervals, not corrected.")
    smallest = float(np.nanmin(raw))
    if smallest > ALPHA / m:
        note += (f" The smallest raw p here is {smallest:.3f} > α/m = {ALPHA / m:.4f}: at this number of "
                 "permutations no cell can clear Holm's first step, however large its L_A.")
    return note


def _headline_lines(summary: pd.DataFrame, cells) -> list[str]:
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
    return lines + ["", _holm_note(tests), "", AEDS_NOTE, ""]


def _deployment_lines(summary: pd.DataFrame, cells, sigma: float) -> list[str]:
    lines = ["## Deployment relevance: rest vs arithmetic of held-out subjects", "",
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


def _defense_lines(summary: pd.DataFrame, cells, meta: dict) -> list[str]:
    kept = meta.get("utility_kept", 0.5)
    lines = ["", "## Defenses (subject-disjoint; noise, dropout and DP-SGD rows: mean over "
             f"{meta['defense_seeds']} noise seeds with the t-interval across seeds)", "",
             "| encoder | defense | L_A ridge | L_A Wiener | balanced accuracy | undefended BA (controls G / P) | "
             "utility kept | MIA AUC (DP head) | ε spent (unit) | closes the channel | absolute bar "
             f"{meta['utility_threshold']:g} |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    closing = []
    for (e, w) in cells:
        part = summary[(summary["encoder"] == e) & (summary["weights"] == w)
                       & summary["unit"].str.startswith("defense/")]
        for unit in sorted(part["unit"].unique(), key=lambda u: (u.split("/")[1], float(u.split("/")[2]))):
            g = lambda metric, **kw: _get(part, unit=unit, metric=metric, **kw)  # noqa: E731
            closes, absolute = g("closes_channel"), g("closes_channel_absolute")
            if closes is not None and closes["value"] == 1:
                closing.append(f"{_label(e, w)} {closes['defense']}")
            lines.append(f"| {_label(e, w)} | {g('gain', attacker='ridge')['defense']} | "
                         f"{_fmt(g('gain', attacker='ridge'))} | {_fmt(g('gain', attacker='wiener'))} | "
                         f"{_fmt(g('balanced_accuracy'))} | {_undefended_text(g)} | "
                         f"{_fmt(g('utility_kept'), 2, False)} | {_fmt(g('auc'))} | "
                         f"{_epsilon_text(g('epsilon_spent'), g('epsilon_subject_bound'), g('delta_subject_bound'))}"
                         f" | {_verdict(closes, g('closes_channel_undecided'))} | "
                         f"{_verdict(absolute) if absolute is not None else DASH} |")
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
        f"the whole guarantee. Closing defenses: {', '.join(closing) if closing else 'none'}.", ""]


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


def report_md(summary: pd.DataFrame, cells, meta: dict, encoders_meta: dict) -> str:
    """The markdown report: encoders, headline endpoints, deployment check, defenses, bridge, figures."""
    lines = [f"# Study C: embedding audit on {meta['dataset']}", "",
             f"{meta['n_audit_subjects']} audited subjects ({meta['n_audit_windows']} windows of "
             f"{meta['window_s']:g} s: rest and mental arithmetic), {meta['n_pretrain_subjects']} further subjects "
             f"for the encoders' pretraining and the encoder-membership attack. Profile `{meta['profile']}`. "
             "Every interval is a 95 % bootstrap CI that resamples subjects (the privacy unit; column `ci_over` in "
             "`metrics/embedding_audit.csv`): membership and AEDS are averaged over the member draws "
             "(`defense_seeds`), each with its subject-bootstrap bounds averaged (`subjects+seeds`); defense rows "
             "repeated over noise seeds are t-intervals across seeds (`seeds`). Every leakage value "
             "sits next to its Gaussian and split-local-permutation controls. Source: MLflow experiment "
             "`study-c-embedding-audit` (parents named `embedding_audit-<dataset>-<encoder>-<weights>`).", ""]
    lines += _encoder_lines(cells, encoders_meta) + [""] + _headline_lines(summary, cells)
    lines += _deployment_lines(summary, cells, meta["deployment_sigma"]) + _defense_lines(summary, cells, meta)
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        lines += _bridge_lines(bridge)
    lines += ["## Figures", "", "![leakage](figures/embedding_audit_leakage.png)", "",
              "![AEDS](figures/embedding_audit_aeds.png)", "", "![bridge](figures/embedding_audit_bridge.png)", "",
              "![defenses](figures/embedding_audit_defenses.png)", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- headline JSON

def _estimate(r) -> dict | None:
    if r is None:
        return None
    return {k: float(r[k]) if np.isfinite(r[k]) else None for k in ("value", "ci_low", "ci_high")}


def headline(summary: pd.DataFrame, cells, meta: dict) -> dict:
    """Per cell: L_A (both splits), BPID@1, membership AUCs, reconstruction R², AEDS, raw-copy fraction and the
    deployment accuracy, each with its CI; and the defenses that close the channel."""
    out = {"meta": meta, "encoders": {}}
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
        }
    for key, metric in (("defenses_closing_the_channel", "closes_channel"),
                        ("defenses_closing_the_channel_absolute", "closes_channel_absolute")):
        closes = summary[(summary["metric"] == metric) & (summary["value"] == 1)]
        out[key] = sorted(f"{r.encoder}/{r.weights}:{r.defense}" for r in closes.itertuples())
    undecided = summary[(summary["metric"] == "closes_channel_undecided") & (summary["value"] > 0)]
    out["defenses_undecided"] = sorted(f"{r.encoder}/{r.weights}:{r.defense}" for r in undecided.itertuples())
    eps = summary[summary["metric"] == "epsilon_spent"]
    out["dp_head_epsilon"] = {f"{r.encoder}/{r.weights}:{r.defense}": {"value": float(r.value),
                                                                      "eps_unit": getattr(r, "eps_unit", "none")}
                              for r in eps.itertuples()}
    return out


def write_headline(path: Path, payload: dict) -> None:
    """The headline as strict JSON (sorted keys, no NaN), written atomically."""
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False, default=float) + "\n")
