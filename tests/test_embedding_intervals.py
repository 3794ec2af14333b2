"""Study C intervals are over the privacy unit, the subject (issue 20).

Synthetic null data only (labelled as such): windows of one subject share a random effect, so windows are not
independent and an interval that resamples them is too narrow. Each check would fail with the old window
bootstrap (membership: chance covered in ~40 % of null datasets) or the Wilson interval over query windows (BPID).
"""

from __future__ import annotations

import numpy as np
import pytest

from eegprivacy.embeddings.endpoints.aeds import aeds
from eegprivacy.embeddings.endpoints.identity import bpid_at_1
from eegprivacy.embeddings.endpoints.membership import membership_auc, membership_difference
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

N_NULL = 200          # null datasets per coverage check
SUBJECTS, WINDOWS = 28, 25
BOOT = 200            # resamples per interval inside the test (the stage uses >= 1000)


def _null_membership(seed: int):
    """SYNTHETIC null: per-window losses = subject effect + noise; a random half of the subjects are "members",
    nothing is memorised."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(SUBJECTS), WINDOWS)
    loss = rng.normal(0, 1, SUBJECTS)[groups] + rng.normal(0, 1, groups.size)
    member = np.isin(groups, rng.permutation(SUBJECTS)[: SUBJECTS // 2])
    return loss, groups, member


def test_membership_interval_covers_chance_on_null_data():
    covered = 0
    for seed in range(N_NULL):
        loss, groups, member = _null_membership(seed)
        res = membership_auc(loss[member], loss[~member], BOOT, random_state=seed,
                             groups_members=groups[member], groups_nonmembers=groups[~member])
        assert res.ci_over == "subjects" and not res.joint
        covered += res.ci[0] <= 0.5 <= res.ci[1]
    assert covered / N_NULL >= 0.9, f"the 95 % interval covered chance in {covered} of {N_NULL} null datasets"


def test_bpid_interval_covers_chance_on_null_data():
    """SYNTHETIC null: each subject's reference and query embeddings carry a subject style, but independent ones,
    so nothing links a query to its own reference (BPID@1 = 1/K in expectation)."""
    covered = 0
    for seed in range(N_NULL):
        rng = np.random.default_rng(10_000 + seed)
        groups = np.repeat(np.arange(SUBJECTS), WINDOWS)
        ref = 0.7 * rng.normal(size=(SUBJECTS, 8))[groups] + rng.normal(size=(groups.size, 8))
        qry = 0.7 * rng.normal(size=(SUBJECTS, 8))[groups] + rng.normal(size=(groups.size, 8))
        res = bpid_at_1(ref, groups, qry, groups, n_bootstrap=BOOT, random_state=seed)
        assert res.ci_over == "subjects" and res.draws.shape == (BOOT,)
        covered += res.ci[0] <= res.chance <= res.ci[1]
    assert covered / N_NULL >= 0.9, f"the 95 % interval covered 1/K in {covered} of {N_NULL} null datasets"


def test_one_subject_gives_a_degenerate_interval():
    """Resampling subjects: with a single subject every resample is that subject, so the interval has no width
    however many windows it has (a window bootstrap would report a narrow but non-zero interval)."""
    rng = np.random.default_rng(0)
    losses = rng.normal(size=60)
    one = np.zeros(60, int)
    res = membership_auc(losses[:30], losses[30:], BOOT, groups_members=one[:30], groups_nonmembers=one[30:])
    assert res.joint and res.n_subjects == 1
    assert res.ci[0] == res.ci[1] == pytest.approx(res.auc)
    windows = membership_auc(losses[:30], losses[30:], BOOT)
    assert windows.ci_over == "windows" and windows.ci[1] > windows.ci[0]

    Z = rng.normal(size=(40, 4))
    bpid = bpid_at_1(Z[:20], np.r_[np.zeros(10), np.ones(10)], Z[20:], np.zeros(20), n_bootstrap=BOOT)
    assert bpid.n_query_subjects == 1 and bpid.ci[0] == bpid.ci[1] == pytest.approx(bpid.accuracy)


def test_membership_draws_are_exact_subject_resamples():
    """Each draw is the AUC of the windows of the drawn subjects, each counted as often as it was drawn."""
    from eegprivacy.attacks.metrics import auroc

    loss, groups, member = _null_membership(3)
    res = membership_auc(loss[member], loss[~member], 5, random_state=7, groups_members=groups[member],
                         groups_nonmembers=groups[~member])
    rng = np.random.RandomState(7)
    subj_m, subj_n = np.unique(groups[member]), np.unique(groups[~member])
    cm, cn = subject_counts(subj_m.size, 5, rng), subject_counts(subj_n.size, 5, rng)
    for b in range(5):
        pick_m = np.concatenate([np.flatnonzero(member & (groups == s)) for s, c in zip(subj_m, cm[b])
                                 for _ in range(c)])
        pick_n = np.concatenate([np.flatnonzero(~member & (groups == s)) for s, c in zip(subj_n, cn[b])
                                 for _ in range(c)])
        y = np.r_[np.ones(pick_m.size), np.zeros(pick_n.size)]
        assert res.draws[b] == pytest.approx(auroc(y, -np.r_[loss[pick_m], loss[pick_n]]))


def test_shared_subjects_are_resampled_jointly_and_differences_are_paired():
    """Encoder attack: the same subjects on both sides -> one resample of subjects carries their member and
    non-member windows together; an attack and its random-init control on the same windows pair draw by draw."""
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(8), 10)
    member = np.tile(np.r_[np.ones(5, bool), np.zeros(5, bool)], 8)
    trained = rng.normal(size=80) - 0.5 * member
    untrained = rng.normal(size=80)
    kw = {"groups_members": groups[member], "groups_nonmembers": groups[~member]}
    attack = membership_auc(trained[member], trained[~member], BOOT, random_state=3, **kw)
    control = membership_auc(untrained[member], untrained[~member], BOOT, random_state=3, **kw)
    assert attack.joint and attack.n_subjects == 8
    value, ci, draws = membership_difference(attack, control)
    assert value == pytest.approx(attack.auc - control.auc)
    np.testing.assert_allclose(draws, attack.draws - control.draws)
    assert ci[0] <= value <= ci[1]
    other = membership_auc(untrained[member], untrained[~member], BOOT, random_state=4, **kw)
    with pytest.raises(ValueError, match="differenced"):
        membership_difference(attack, other)


def test_membership_groups_are_checked():
    with pytest.raises(ValueError, match="every non-member loss"):
        membership_auc([0.1, 0.2], [0.3], groups_members=[0, 1])
    with pytest.raises(ValueError, match="groups_nonmembers"):
        membership_auc([0.1, 0.2], [0.3], groups_members=[0, 1], groups_nonmembers=[2, 3])


def test_aeds_combines_subject_draws_and_says_so():
    loss, groups, member = _null_membership(5)
    mem = membership_auc(loss[member], loss[~member], BOOT, groups_members=groups[member],
                         groups_nonmembers=groups[~member])
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(2 * groups.size, 4))
    bpid = bpid_at_1(Z[: groups.size], groups, Z[groups.size:], groups, n_bootstrap=BOOT)
    res = aeds((0.3, np.full(BOOT, 0.3)), mem, bpid, n_bootstrap=BOOT)
    assert res.ci_over == "subjects"
    # R_I's draws are BPID's own subject draws, not a window resample
    from eegprivacy.embeddings.endpoints.identity import identity_residual
    from eegprivacy.embeddings.endpoints.membership import membership_residual

    expected = 0.3 - np.maximum(membership_residual(mem.draws), identity_residual(bpid.draws, bpid.n_candidates))
    np.testing.assert_allclose(res.draws, expected)
    assert aeds(0.3, membership_auc(loss[member], loss[~member], BOOT)).ci_over == "windows"


def test_parent_runs_are_tagged_with_what_each_interval_is_over():
    """The MLflow report reads ``<aggregate>_ci_over`` tags; a row without an interval gets none."""
    import pandas as pd

    from eegprivacy.studies.embedding_audit.summaries import ci_over_tags

    base = {"encoder": "biot", "weights": "self_pretrained", "endpoint": "membership_head", "split": "s",
            "defense": "none", "attacker": "loss_threshold"}
    summary = pd.DataFrame([{**base, "unit": "membership", "metric": "auc", "ci_over": "subjects+seeds"},
                            {**base, "unit": "membership", "metric": "residual", "ci_over": "none"},
                            {**base, "unit": "identity", "metric": "bpid_at_1", "ci_over": "subjects"},
                            {**base, "encoder": "labram", "unit": "identity", "metric": "bpid_at_1",
                             "ci_over": "subjects"}])
    tags = ci_over_tags(summary, "biot", "self_pretrained")
    assert tags == {
        "unit_membership/endpoint_membership_head/split_s/defense_none/attacker_loss_threshold/auc_ci_over":
            "subjects+seeds",
        "unit_identity/endpoint_membership_head/split_s/defense_none/attacker_loss_threshold/bpid_at_1_ci_over":
            "subjects"}


def _perfectly_correlated_parts(n_subjects: int = 20, windows: int = 10):
    """SYNTHETIC: L_A and R_M are the same statistic of the same subjects. Subject s has ``k_s`` of its member
    windows with a very low loss (they beat every non-member window, the others beat none), so on any subject
    resample w the encoder-style attack (the same subjects on both sides) reads 2 AUC - 1 = sum w rho / sum w with
    rho_s = k_s / 5 - 1; the attribute decoder's per-subject moments (unit variances, within-subject covariance
    rho_s, controls at 0) give L_A = the same weighted mean of rho_s on every resample."""
    from eegprivacy.embeddings.endpoints.attribute import LeakageResult

    rng = np.random.default_rng(0)
    k = rng.integers(5, windows + 1, n_subjects)
    rho = k / 5 - 1
    subjects = np.arange(n_subjects)
    groups = np.repeat(subjects, windows)
    member_loss = np.where(np.arange(windows)[None, :] < k[:, None], -100.0, 100.0).ravel()
    mem = membership_auc(member_loss, np.zeros(groups.size), BOOT, random_state=1, groups_members=groups,
                         groups_nonmembers=groups)
    n, zero = np.full(n_subjects, float(windows)), np.zeros(n_subjects)
    real = np.stack([n, zero, zero, n, n, n * rho], axis=1)[:, :, None]  # n, Sp, St, Spp, Stt, Spt; one dim
    control = np.stack([n, zero, zero, n, n, zero], axis=1)[:, :, None]
    la = LeakageResult(score=rho.mean(), control_gaussian=0.0, control_permuted=0.0, gain=rho.mean(),
                       ci=(np.nan, np.nan), p_value=np.nan, per_dim_r=rho.mean()[None], alphas=np.ones(1),
                       n_test_windows=int(n.sum()), n_subjects=n_subjects, draws=np.empty(0),
                       null_scores=np.empty(0), subjects=subjects, moments=np.stack([real, control, control]))
    la.draws = la.draws_for(subjects, subject_counts(n_subjects, BOOT, 2))  # its own, separate resamples
    return la, mem


def test_joint_aeds_resamples_subjects_once_for_all_parts():
    """With L_A and R_M the same subjects' statistic, L_A - R_M is 0 on every subject resample: the joint interval
    collapses to 0, while combining each part's own (separately drawn) draws reports a wide interval."""
    from eegprivacy.embeddings.endpoints.membership import membership_residual

    la, mem = _perfectly_correlated_parts()
    assert mem.joint and la.gain == pytest.approx(mem.residual) and 0.2 < la.gain < 0.8
    joint = aeds(la, mem, 0.0, n_bootstrap=BOOT, random_state=5)
    assert joint.joint and joint.ci_over == "subjects" and joint.draws.shape == (BOOT,)
    assert joint.value == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(joint.draws, 0.0, atol=1e-12)
    assert joint.ci == pytest.approx((0.0, 0.0), abs=1e-12)
    independent = aeds((la.gain, la.draws), (mem.residual, membership_residual(mem.draws)), 0.0, n_bootstrap=BOOT,
                       random_state=5)
    assert not independent.joint and independent.value == pytest.approx(joint.value)
    assert independent.ci[1] - independent.ci[0] > 0.1


def test_joint_aeds_drops_resamples_that_lose_a_class():
    """Head attack with one member and one non-member subject: resampled with the other parts' subjects, a draw
    without the member (or the non-member) subject has no AUC -> NaN, kept in ``draws``, left out of ``ci``."""
    loss, groups, member = _null_membership(6)
    mem = membership_auc(loss[groups == 0], loss[groups == 1], BOOT, groups_members=groups[groups == 0],
                         groups_nonmembers=groups[groups == 1])
    assert not mem.joint and np.isfinite(mem.draws).all()  # stratified on its own: never loses a class
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(2 * groups.size, 4))
    bpid = bpid_at_1(Z[: groups.size], groups, Z[groups.size:], groups, n_bootstrap=BOOT)
    res = aeds(0.3, mem, bpid, n_bootstrap=BOOT, random_state=0)
    counts = subject_counts(SUBJECTS, BOOT, 0)
    lost = (counts[:, 0] == 0) | (counts[:, 1] == 0)
    assert res.joint and lost.any()
    np.testing.assert_array_equal(np.isnan(res.draws), lost)
    assert np.isfinite(res.ci).all()
    # a window-level membership fallback cannot join: the old, independent combination
    assert not aeds(0.3, membership_auc(loss[member], loss[~member], BOOT), bpid, n_bootstrap=BOOT).joint
