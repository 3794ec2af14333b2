"""The rows of one unit (an endpoint, a defense at one seed, or a bridge pair): each a pure function of its
context, unit and seed, so a cached cell never depends on the order or the process cells ran in.

Every row has the same columns (:func:`row`): the endpoint, the split it was measured under, the defense and
attacker, the metric with its CI and the chance level it is read against.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eegprivacy.studies.embedding_audit.context import TESTS, Context

# Who the members and non-members of each membership attack are.
MEMBERSHIP_SPLITS = {"head": "head_subjects_vs_release_subjects",
                     "dp_head": "head_subjects_vs_release_subjects",
                     "encoder": "pretrain_blocks_vs_interleaved_heldout_blocks_same_recordings"}
AEDS_SPLIT = "subject_disjoint+reference_set"
RELEASE_HALF = "subject_disjoint_release_half"


def row(endpoint, split, metric, value, *, defense="none", attacker="none", ci=(np.nan, np.nan), chance=np.nan,
        n=np.nan, eps_unit="none") -> dict:
    """One tidy row. ``eps_unit`` (``window``/``subject``) is set on ε rows: the unit an ε protects."""
    return {"endpoint": endpoint, "split": split, "defense": defense, "attacker": attacker, "metric": metric,
            "value": float(value), "ci_low": float(ci[0]), "ci_high": float(ci[1]), "chance": float(chance),
            "n": float(n), "eps_unit": eps_unit}


def leakage_rows(result, split, defense="none", attacker="ridge") -> list[dict]:
    common = {"defense": defense, "attacker": attacker, "n": result.n_test_windows}
    return [row("attribute", split, "gain", result.gain, ci=result.ci, chance=0.0, **common),
            row("attribute", split, "score", result.score, **common),
            row("attribute", split, "control_gaussian", result.control_gaussian, **common),
            row("attribute", split, "control_permuted", result.control_permuted, **common),
            row("attribute", split, "p_value", result.p_value, **common)]


def utility_rows(result, split, defense="none", endpoint="utility") -> list[dict]:
    common = {"defense": defense, "attacker": "logistic_head", "n": result.n_windows}
    return [row(endpoint, split, "balanced_accuracy", result.balanced_accuracy, ci=result.ci, chance=0.5, **common),
            row(endpoint, split, "control_gaussian", result.control_gaussian, chance=0.5, **common),
            row(endpoint, split, "control_permuted", result.control_permuted, chance=0.5, **common)]


def membership_rows(results: dict, defense="none") -> list[dict]:
    """AUC and R_M of every membership attack in ``results``. ``encoder_random_init`` is not an attack of its
    own but the encoder attack's matched null: it becomes the ``membership_encoder`` rows ``control_random_init``
    (its AUC and interval) and ``auc_minus_control`` (the attack's AUC minus it, paired subject-bootstrap CI)."""
    from eegprivacy.embeddings.endpoints.membership import membership_difference, membership_residual

    tests = results.get(TESTS, {})
    rows = []
    for target, res in results.items():
        if target in ("encoder_random_init", TESTS):
            continue
        attacker = "lira_online" if target.endswith("_lira") else "loss_threshold"
        target = target.removesuffix("_lira")
        common = {"defense": defense, "attacker": attacker, "n": res.n_members + res.n_nonmembers}
        split = MEMBERSHIP_SPLITS[target]
        rows += [row(f"membership_{target}", split, "auc", res.auc, ci=res.ci, chance=0.5, **common),
                 row(f"membership_{target}", split, "residual", res.residual, ci=membership_residual(res.ci),
                     chance=0.0, **common)]
        test = tests.get(target if attacker == "loss_threshold" else f"{target}_lira")
        if test is not None:  # the claim's test: member subjects permuted (exact under the null)
            rows += [row(f"membership_{target}", split, "p_value", test.p_value_two_sided, **common),
                     row(f"membership_{target}", split, "n_permutations", test.n_permutations, **common),
                     row(f"membership_{target}", split, "exact", float(test.exact), **common)]
        if target == "encoder" and "encoder_random_init" in results:
            control = results["encoder_random_init"]
            diff, ci, _ = membership_difference(res, control)
            rows += [row("membership_encoder", split, "control_random_init", control.auc, ci=control.ci,
                         chance=0.5, **common),
                     row("membership_encoder", split, "auc_minus_control", diff, ci=ci, chance=0.0, **common)]
    return rows


def _noise(Z, sigma, seed):
    from eegprivacy.embeddings.defenses import GaussianNoiseDefense

    return GaussianNoiseDefense(sigma=sigma, random_state=seed).fit(Z).transform(Z)


def identity_split(ctx: Context) -> str:
    """The split column of identity rows: how the cohort's enrolling and querying parts are drawn."""
    return f"reference_set_by_{ctx.cohort.identity}"


def _identity_rows(ctx: Context, b=None, defense: str = "none") -> list[dict]:
    """BPID@1 with its query-subject bootstrap interval, and R_I (its interval mapped through R_I, monotone); of
    the undefended embeddings, or ``b`` (a defended release's BPID result) under ``defense``."""
    from eegprivacy.embeddings.endpoints.identity import identity_residual

    undefended = b is None
    b = ctx.bpid() if b is None else b
    common = {"attacker": "centroid_cosine", "n": b.n_queries, "defense": defense}
    rows = [row("identity", identity_split(ctx), "bpid_at_1", b.accuracy, ci=b.ci, chance=b.chance, **common),
            row("identity", identity_split(ctx), "residual", b.residual,
                ci=identity_residual(np.asarray(b.ci), b.n_candidates), chance=0.0, **common)]
    if undefended:  # the claim's test: reference labels permuted between subjects, the guesses fixed
        from eegprivacy.evaluation.permutation import identity_permutation_test

        t = identity_permutation_test(b.guess, b.query_subjects, b.candidates,
                                      n_permutations=ctx.config.test_permutations,
                                      random_state=ctx.config.subject_seed)
        rows += [row("identity", identity_split(ctx), "p_value", t.p_value_two_sided, **common),
                 row("identity", identity_split(ctx), "n_permutations", t.n_permutations, **common),
                 row("identity", identity_split(ctx), "exact", float(t.exact), **common)]
    return rows


def _encoder_paired_rows(ctx: Context, seed: int) -> list[dict]:
    """The encoder-membership claim's test (first member-draw seed only: the pretraining windows do not depend on
    the seed): within-subject AUC of the pretrained minus the random-init encoder's losses on the same windows,
    with its paired subject-bootstrap interval and a sign-flip test over the pretraining subjects."""
    from eegprivacy.evaluation.permutation import paired_membership_test

    emb = ctx.emb
    if seed != ctx.config.defense_seeds[0] or "mia_control_members" not in emb:
        return []
    t = paired_membership_test(emb["mia_members"], emb["mia_nonmembers"], emb["mia_control_members"],
                               emb["mia_control_nonmembers"], emb["mia_members_subject"],
                               emb["mia_nonmembers_subject"], n_permutations=ctx.config.test_permutations,
                               n_bootstrap=ctx.config.bootstrap, random_state=seed)
    common = {"attacker": "loss_threshold", "n": len(emb["mia_members"]) + len(emb["mia_nonmembers"])}
    split = MEMBERSHIP_SPLITS["encoder"]
    subjects = np.unique(np.r_[emb["mia_members_subject"], emb["mia_nonmembers_subject"]]).size
    return [row("membership_encoder", split, "within_subject_auc_minus_control", t.statistic, ci=t.difference_ci,
                chance=0.0, **common),
            row("membership_encoder", split, "paired_p_value", t.p_value_two_sided, **common),
            row("membership_encoder", split, "paired_permutations", t.n_permutations, **common),
            row("membership_encoder", split, "paired_exact", float(t.exact), **common),
            row("membership_encoder", split, "paired_subjects", subjects, **common)]


def _subject_label_rows(seed: int, ctx: Context) -> list[dict]:
    """The cohort's task label as a subject-level attribute (MSU: the diagnosis) of held-out subjects, read from
    their embeddings: subject-level balanced accuracy, beside the same protocol on Gaussian embeddings and a null
    that permutes the subjects' labels once across all folds and reruns the cross-fitted pipeline (exact; its p
    two-sided). The headline's interval inverts that test (``shift_ci``); the subject bootstrap's, which keeps
    the fitted heads and undercovers, is the ``balanced_accuracy_subject_bootstrap`` row."""
    from eegprivacy.embeddings.endpoints.labels import subject_label_leakage

    r = subject_label_leakage(ctx.Z, ctx.state, ctx.groups, ctx.splitter("subject_disjoint", seed),
                              n_bootstrap=ctx.config.bootstrap,
                              n_permutations=ctx.config.subject_label_permutations, random_state=seed)
    common = {"attacker": "logistic_head", "n": r.n_subjects}
    task = ctx.cohort.task
    return [row(task, "subject_disjoint", "balanced_accuracy", r.balanced_accuracy, ci=r.shift_ci, chance=0.5,
                **common),
            row(task, "subject_disjoint", "balanced_accuracy_subject_bootstrap", r.balanced_accuracy, ci=r.ci,
                chance=0.5, **common),
            row(task, "subject_disjoint", "window_balanced_accuracy", r.window_balanced_accuracy, ci=r.window_ci,
                chance=0.5, **common),
            row(task, "subject_disjoint", "control_gaussian", r.control_gaussian, chance=0.5, **common),
            row(task, "subject_disjoint", "control_permuted", r.control_permuted, chance=0.5, **common),
            row(task, "subject_disjoint", "control_permuted_q95", r.control_permuted_q95, chance=0.5, **common),
            row(task, "subject_disjoint", "p_value", r.p_value_two_sided, **common),
            row(task, "subject_disjoint", "n_permutations", len(r.null_scores), **common)]


def _window_label_rows(seed: int, ctx: Context) -> list[dict]:
    """The cohort's task where it is a label of windows (eegmat: a recording's state, rest vs arithmetic;
    eegmmidb: a cue's side, left vs right) on held-out subjects: window-level balanced accuracy, tested against
    the null that permutes the labels among each subject's recordings (a recording's state) or among the cues of
    each run (a cue's side) and reruns the cross-fitted pipeline (exact; p two-sided); its interval inverts that
    test, the subject bootstrap's is the ``balanced_accuracy_subject_bootstrap`` row."""
    from eegprivacy.embeddings.endpoints.labels import window_label_leakage

    per_recording = pd.Series(ctx.state).groupby(ctx.recording).nunique().max() == 1
    # a recording's state: permuted among a subject's recordings; a cue's side: among the cues of its run
    units, strata = (ctx.recording, ctx.groups) if per_recording else (np.arange(len(ctx.state)), ctx.recording)
    r = window_label_leakage(ctx.Z, ctx.state, ctx.groups, units, ctx.splitter("subject_disjoint", seed),
                             n_bootstrap=ctx.config.bootstrap, n_permutations=ctx.config.window_label_permutations,
                             random_state=seed, strata=strata)
    common = {"attacker": "logistic_head", "n": r.n_subjects}
    return [row("window_label", "subject_disjoint", "balanced_accuracy", r.balanced_accuracy, ci=r.ci, chance=0.5,
                **common),
            row("window_label", "subject_disjoint", "balanced_accuracy_subject_bootstrap", r.balanced_accuracy,
                ci=r.subject_ci, chance=0.5, **common),
            row("window_label", "subject_disjoint", "control_gaussian", r.control_gaussian, chance=0.5, **common),
            row("window_label", "subject_disjoint", "control_permuted", r.control_permuted, chance=0.5, **common),
            row("window_label", "subject_disjoint", "p_value", r.p_value_two_sided, **common),
            row("window_label", "subject_disjoint", "n_permutations", len(r.null_scores), **common),
            row("window_label", "subject_disjoint", "n_arrangements", r.n_arrangements, **common),
            # 1: a recording's label, permuted among each subject's recordings; 0: a cue's, among its run's cues
            row("window_label", "subject_disjoint", "label_per_recording", float(per_recording), **common)]


def _aeds_rows(seed: int, ctx: Context) -> list[dict]:
    """AEDS of seed ``seed``: the membership results of the same seed (the same member draw), the reported
    subject-disjoint L_A (seed 0: a seed only redraws the members, not the leakage folds -- ours) and BPID@1.
    The random-init control is a null, not an attack, so it never counts as the strongest membership.

    The AEDS interval resamples the subjects once per draw and recomputes L_A, R_M and R_I on that resample
    (``aeds``'s joint path; an error if a part cannot be rescored). The encoder attack's subjects are cached as
    codes into the pretraining subjects (:attr:`Context.pretrain_subjects`) and mapped back to their ids here, so
    where they are audited subjects (eegmmidb: run 4 pretrains) one resample moves both their parts."""
    from dataclasses import replace

    from eegprivacy.embeddings.endpoints.aeds import aeds
    from eegprivacy.embeddings.endpoints.identity import identity_residual
    from eegprivacy.embeddings.endpoints.membership import membership_residual

    la = ctx.leakage("subject_disjoint", 0)
    attacks = {k: m for k, m in ctx.membership(seed).items() if k not in ("encoder_random_init", TESTS)}
    strongest = max(attacks, key=lambda k: attacks[k].residual)
    mem = attacks[strongest]
    if strongest.startswith("encoder") and mem.units_members is not None:
        def named(units):
            codes = np.asarray(units, int)
            if codes.size and codes.max() < ctx.pretrain_subjects.size:
                return ctx.pretrain_subjects[codes]
            # losses given without pretraining windows in the data (a hand-built context): subjects of their own
            return np.array([f"pretraining-subject-code:{u}" for u in codes], dtype=object)
        mem = replace(mem, units_members=named(mem.units_members), units_nonmembers=named(mem.units_nonmembers))
    b = ctx.bpid()
    res = aeds(la, mem, b, n_bootstrap=ctx.config.bootstrap, random_state=seed)
    if not res.joint:
        raise ValueError("AEDS needs every part rescored on one subject resample, but a part carries no "
                         "per-subject statistics (results cached by older code?)")
    return [row("aeds", AEDS_SPLIT, "aeds", res.value, ci=res.ci, chance=0.0),
            row("aeds", AEDS_SPLIT, "l_a", la.gain, ci=la.ci, chance=0.0),
            row("aeds", AEDS_SPLIT, "r_m", mem.residual, ci=membership_residual(mem.ci), chance=0.0),
            row("aeds", AEDS_SPLIT, "r_i", b.residual, ci=identity_residual(np.asarray(b.ci), b.n_candidates),
                chance=0.0)]


def _deployment_rows(sigma: float, seed: int, ctx: Context) -> list[dict]:
    """Rest vs arithmetic of held-out subjects from the clean (σ = 0) or noised release."""
    from eegprivacy.embeddings.defenses import utility_with_controls

    Z = ctx.Z if sigma == 0 else _noise(ctx.Z, sigma, seed)
    u = utility_with_controls(Z, ctx.state, ctx.groups, ctx.splitter("subject_disjoint", seed),
                              n_bootstrap=ctx.config.bootstrap, random_state=seed)
    return utility_rows(u, "subject_disjoint", defense=f"noise_{sigma:g}" if sigma else "none",
                        endpoint="deployment_state")


def core_rows(unit: str, seed: int, ctx: Context) -> list[dict]:
    """One endpoint of the undefended embeddings."""
    from eegprivacy.embeddings.endpoints.reconstruction import raw_copy_fraction, reconstruction_r2

    if unit == "raw_copy":
        # Cosine after removing the mean embedding (ours): a common offset (e.g. log powers of ~1e-11 V²) would
        # otherwise make every pair of windows look like a copy.
        frac = raw_copy_fraction(ctx.Z - ctx.Z.mean(axis=0), ctx.recording, ctx.order)
        return [row("raw_copy", "adjacent_windows", "fraction_cosine_ge_0.99", frac, n=len(ctx.Z))]
    if unit.startswith("attribute/"):
        return leakage_rows(ctx.leakage(unit.split("/")[1], seed), unit.split("/")[1])
    if unit == "identity":
        return _identity_rows(ctx)
    if unit == "subject_label":
        return _subject_label_rows(seed, ctx)
    if unit == "window_label":
        return _window_label_rows(seed, ctx)
    if unit == "membership":
        return membership_rows(ctx.membership(seed)) + _encoder_paired_rows(ctx, seed)
    if unit == "reconstruction":
        r = reconstruction_r2(ctx.Z, ctx.X_down, ctx.groups, ctx.splitter("subject_disjoint", seed),
                              random_state=seed)
        return [row("reconstruction", "subject_disjoint", "r2", r.r2, chance=0.0, n=len(ctx.Z))]
    if unit == "aeds":
        return _aeds_rows(seed, ctx)
    if unit.startswith("deployment/"):
        return _deployment_rows(float(unit.split("/")[1]), seed, ctx)
    raise KeyError(f"unknown unit {unit!r}")


def undefended_utility(ctx: Context, split: str, seed: int):
    """The undefended embeddings' held-out rest-vs-arithmetic utility (with its controls) that a defense at
    ``seed`` is judged against, computed once per (split, seed). ``subject_disjoint``: all audited windows with
    the same folds and seed as the ``deployment/0`` unit (so the same numbers); :data:`RELEASE_HALF`: only the
    release half of ``seed`` with the folds the DP head's release is scored on."""
    from eegprivacy.embeddings.defenses import utility_with_controls

    def compute():
        if split == RELEASE_HALF:
            rel = ~ctx.head_rows_for(seed)
            groups = ctx.groups[rel]
            return utility_with_controls(ctx.Z[rel], ctx.state[rel], groups,
                                         ctx.splitter("subject_disjoint", seed, groups),
                                         n_bootstrap=ctx.config.bootstrap, random_state=seed)
        if split == "subject_disjoint":
            return utility_with_controls(ctx.Z, ctx.state, ctx.groups, ctx.splitter("subject_disjoint", seed),
                                         n_bootstrap=ctx.config.bootstrap, random_state=seed)
        raise KeyError(f"no undefended utility for split {split!r}")
    return ctx.memoized(("undefended_utility", split, seed), compute)


def verdict_rows(leakages: list, defended: float, split: str, seed: int, ctx: Context, defense: str,
                 attacker: str = "all_attackers") -> list[dict]:
    """Whether the defense closes the channel (1 yes, 0 no, NaN undecided), the absolute-bar rule beside it, the
    share of utility kept, and the undefended utility with its controls that the share is relative to."""
    from eegprivacy.embeddings.defenses import channel_verdict

    base = undefended_utility(ctx, split, seed)
    v = channel_verdict(leakages, defended, base, kept_threshold=ctx.config.utility_kept,
                        absolute_threshold=ctx.config.utility_threshold)
    common = {"defense": defense, "attacker": attacker}
    return [row("defense", split, "closes_channel", v.as_value(), **common),
            row("defense", split, "closes_channel_undecided", float(v.closes is None), **common),
            row("defense", split, "closes_channel_absolute", float(v.closes_absolute), **common),
            row("defense", split, "utility_kept", v.kept, chance=0.0, **common),
            row("defense", split, "undefended_balanced_accuracy", base.balanced_accuracy, ci=base.ci, chance=0.5,
                n=base.n_windows, **common),
            row("defense", split, "undefended_control_gaussian", base.control_gaussian, chance=0.5, **common),
            row("defense", split, "undefended_control_permuted", base.control_permuted, chance=0.5, **common)]


def identity_verdict_rows(b, defended: float, split: str, seed: int, ctx: Context, defense: str) -> list[dict]:
    """Whether the defense closes the identity channel: BPID@1's interval reaches chance (1/K) and the release
    keeps the share of the utility the attribute verdict asks for (the same rule: :func:`channel_verdict` on
    BPID@1 minus chance); 1 yes, 0 no, NaN undecided (no utility to keep)."""
    from eegprivacy.embeddings.defenses import channel_verdict

    base = undefended_utility(ctx, split, seed)
    excess = (float(b.ci[0]) - b.chance, float(b.ci[1]) - b.chance)
    v = channel_verdict([excess], defended, base, kept_threshold=ctx.config.utility_kept,
                        absolute_threshold=ctx.config.utility_threshold)
    common = {"defense": defense, "attacker": "centroid_cosine"}
    return [row("defense", split, "closes_identity", v.as_value(), **common),
            row("defense", split, "closes_identity_undecided", float(v.closes is None), **common)]


def _epsilon_rows(head, defense: str) -> list[dict]:
    """ε spent in its unit; under window-level DP also the subject-level group-privacy bound (k ε and its δ_k,
    vacuous when δ_k ≥ 1). No row for the non-private head (an ∞ would poison the means)."""
    if not math.isfinite(head.epsilon_):
        return []
    rows = [row("defense", RELEASE_HALF, "epsilon_spent", head.epsilon_, defense=defense, eps_unit=head.eps_unit_)]
    if head.eps_unit_ == "window" and head.group_size_ is not None:
        rows += [row("defense", RELEASE_HALF, "epsilon_subject_bound", head.subject_epsilon_, defense=defense,
                     eps_unit="subject", n=head.group_size_),
                 row("defense", RELEASE_HALF, "delta_subject_bound", min(head.subject_delta_, 1e300),
                     defense=defense, eps_unit="subject", n=head.group_size_)]
    return rows


def dp_head_rows(epsilon: float, seed: int, ctx: Context) -> list[dict]:
    """The DP-SGD head trained on the head subjects of ``seed``; its hidden layer of the release subjects is what
    is released: L_A of that, the head's own held-out accuracy, its membership, the ε it spent (with its unit)
    and the verdict against the undefended utility of the same release half."""
    from eegprivacy.embeddings.defenses import UtilityResult, balanced_accuracy_ci, utility_with_controls
    from eegprivacy.embeddings.dp_head import DPSGDHead
    from eegprivacy.embeddings.endpoints.attribute import attribute_leakage
    from eegprivacy.embeddings.endpoints.membership import membership_auc

    cfg, boot = ctx.config.defenses.dp_head, ctx.config.bootstrap
    head = DPSGDHead(epsilon=epsilon, delta=cfg.delta, max_grad_norm=float(cfg.max_grad_norm), hidden=cfg.hidden,
                     epochs=cfg.epochs, batch_size=cfg.batch_size, privacy_unit=cfg.privacy_unit,
                     random_state=seed)
    fit, rel = ctx.head_rows_for(seed), ~ctx.head_rows_for(seed)
    head.fit(ctx.Z[fit], ctx.state[fit], groups=ctx.groups[fit])
    released, groups = head.transform(ctx.Z[rel]), ctx.groups[rel]
    split = ctx.splitter("subject_disjoint", seed, groups)
    la = attribute_leakage(released, ctx.A[rel], groups, split, n_bootstrap=boot,
                           n_permutations=ctx.config.defense_permutations, random_state=seed)
    truth = ctx.state[rel]
    # The head's own held-out accuracy (it was trained on the other half), beside the controls of a logistic
    # read-out of its released representation.
    acc, ci = balanced_accuracy_ci(truth, head.predict(ctx.Z[rel]), groups, boot, random_state=seed)
    util = utility_with_controls(released, truth, groups, split, n_bootstrap=boot, random_state=seed)
    util = UtilityResult(acc, ci, util.control_gaussian, util.control_permuted, util.n_windows, util.n_subjects)
    losses_in = head.sample_losses(ctx.Z[fit], ctx.state[fit])
    losses_out = head.sample_losses(ctx.Z[rel], truth)
    mia = membership_auc(losses_in, losses_out, boot, random_state=seed, groups_members=ctx.groups[fit],
                         groups_nonmembers=groups)
    defense = f"dp_head_eps{epsilon:g}"
    b = ctx.bpid_of(released, np.flatnonzero(rel))
    rows = [*leakage_rows(la, RELEASE_HALF, defense), *utility_rows(util, RELEASE_HALF, defense),
            *membership_rows({"dp_head": mia}, defense), *_epsilon_rows(head, defense),
            *_identity_rows(ctx, b, defense)]
    return (rows + verdict_rows([la], util.balanced_accuracy, RELEASE_HALF, seed, ctx, defense)
            + identity_verdict_rows(b, util.balanced_accuracy, RELEASE_HALF, seed, ctx, defense))


def _released(kind: str, value: float, seed: int, ctx: Context) -> tuple:
    """What a transform defense releases, its name, and its attackers (name -> (decoder, clean fit data))."""
    from eegprivacy.embeddings.defenses import CoordinateDropout, PCABottleneck, WienerAttacker

    if kind == "noise":
        return (_noise(ctx.Z, value, seed), f"noise_{value:g}",
                {"ridge": (None, None), "wiener": (WienerAttacker(sigma=value, random_state=seed), ctx.Z)})
    if kind == "pca":
        released = PCABottleneck(int(value), random_state=seed).fit(ctx.Z).transform(ctx.Z)
        return released, f"pca_{int(value)}", {"ridge": (None, None)}
    if kind == "dropout":
        released = CoordinateDropout(value, random_state=seed).fit(ctx.Z).transform(ctx.Z)
        return released, f"dropout_{value:g}", {"ridge": (None, None)}
    raise KeyError(f"unknown defense {kind!r}")


def defense_rows(unit: str, seed: int, ctx: Context) -> list[dict]:
    """One defense at one seed: L_A of what is released (subject-disjoint) next to the head's balanced accuracy,
    and whether it closes the channel."""
    from eegprivacy.embeddings.defenses import utility_with_controls
    from eegprivacy.embeddings.endpoints.attribute import attribute_leakage

    kind, value = unit.split("/")[1], float(unit.split("/")[2])
    if kind == "dp_head":
        return dp_head_rows(value, seed, ctx)
    boot = ctx.config.bootstrap
    split = ctx.splitter("subject_disjoint", seed)
    released, defense, attackers = _released(kind, value, seed, ctx)
    util = utility_with_controls(released, ctx.state, ctx.groups, split, n_bootstrap=boot, random_state=seed)
    rows = utility_rows(util, "subject_disjoint", defense)
    leakages = []
    for attacker, (decoder, Z_fit) in attackers.items():
        # The Wiener attacker trains on clean shadow embeddings (the encoder is public) and decodes the release.
        la = attribute_leakage(released, ctx.A, ctx.groups, split, decoder=decoder, Z_fit=Z_fit, n_bootstrap=boot,
                               n_permutations=ctx.config.defense_permutations, random_state=seed)
        rows += leakage_rows(la, "subject_disjoint", defense, attacker)
        leakages.append(la)
    # The verdict needs every attacker to fail: attacker "all_attackers", not a strongest one picked afterwards.
    b = ctx.bpid_of(released)
    rows += _identity_rows(ctx, b, defense)
    return (rows + verdict_rows(leakages, util.balanced_accuracy, "subject_disjoint", seed, ctx, defense)
            + identity_verdict_rows(b, util.balanced_accuracy, "subject_disjoint", seed, ctx, defense))


def bridge_rows(config: dict, seed: int, embeddings: dict, A, groups, audit_config, splitter) -> list[dict]:
    """The cross-encoder bridge from ``config["target"]``'s embeddings to ``config["source"]``'s decoder."""
    from eegprivacy.embeddings.bridge import bridge_transfer

    res = bridge_transfer(embeddings[config["source"]], embeddings[config["target"]], A, groups, splitter,
                          n_bootstrap=audit_config.bootstrap, n_permutations=audit_config.bridge_permutations,
                          random_state=seed)
    d = res.as_dict()
    rows = [row("bridge", "subject_disjoint", "gain", d["gain"], ci=(d["ci_low"], d["ci_high"]), chance=0.0)]
    for k in ("score", "control_gaussian", "control_permuted", "p_value", "beta", "tau2", "bridge_error", "rho0",
              "bound"):
        rows.append(row("bridge", "subject_disjoint", k, d[k]))
    for r in rows:
        r["unit"] = "bridge"
    return rows
