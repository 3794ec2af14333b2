"""Study B's data path: paradigms (trials from datasets), per-subject member splits, and per-client CSP."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _fixtures_data import no_network  # noqa: F401  (fixture used by offline_moabb)
from test_bnci_fixture import offline_moabb, write_bnci_fixture  # noqa: F401

from eegprivacy.data import get_dataset
from eegprivacy.federated.splits import SubjectMemberSplit, member_split
from eegprivacy.signal.csp import ClientCSP, numerical_rank
from eegprivacy.signal.epochs import (
    SYNTHETIC_MI_SHAPES,
    TRIAL_COLUMNS,
    LeftRightImagery,
    RecordingLabelParadigm,
    Trials,
)
from eegprivacy.signal.preprocess import PreprocessConfig

NO_FILTER = PreprocessConfig(l_freq=None, h_freq=None, notch_freq=None, average_reference=False)
MI_EVENTS = {"left_hand": 0, "right_hand": 1}


@pytest.fixture(scope="module")
def small_mi():
    return get_dataset("synthetic_mi", n_subjects=3, n_sessions=1, n_trials_per_class=6)


@pytest.fixture(scope="module")
def mi_trials(small_mi) -> Trials:
    return LeftRightImagery().get_data(small_mi)


# -- paradigms -------------------------------------------------------------------------------------------------
def test_imagery_trials_follow_the_annotations_and_are_tagged_synthetic(small_mi, mi_trials):
    X, y, meta = mi_trials
    assert X.shape == (3 * 12, 22, 512) and X.dtype == np.float32 and mi_trials.sfreq == 128.0
    assert list(meta.columns) == TRIAL_COLUMNS and mi_trials.tags() == {"dataset": "synthetic_mi", "synthetic": "true"}
    assert mi_trials.subjects() == ["S01", "S02", "S03"]
    for rec in small_mi.recordings():
        ann = rec.load().annotations
        rows = meta[(meta.subject == rec.subject) & (meta.recording == rec.recording)]
        assert list(rows.event) == list(ann.description)
        assert list(rows.label) == [MI_EVENTS[d] for d in ann.description]
        assert np.allclose(rows.onset_s, ann.onset, atol=0.5 / 128)  # onsets on the 128-Hz grid
    assert np.array_equal(y, meta.label.to_numpy()) and np.bincount(y).tolist() == [18, 18]


def test_epochs_are_the_recording_samples_from_each_onset(small_mi):
    """Without filtering or resampling an epoch is exactly the raw slice that starts at its cue."""
    trials = LeftRightImagery(preprocess=NO_FILTER, resample=None, epoch_s=2.0).get_data(small_mi, subjects=["S02"])
    rec = small_mi.recordings(["S02"])[0]
    raw = rec.load()
    data = raw.get_data()
    n = int(2.0 * raw.info["sfreq"])
    for x, onset in zip(trials.X, trials.metadata.onset_s):
        start = int(round(onset * raw.info["sfreq"]))
        assert np.allclose(x, data[:, start:start + n], rtol=1e-6, atol=1e-12)


def test_motor_rhythm_difference_survives_preprocessing(mi_trials):
    """Left-hand imagery desynchronises C4, right-hand C3: the C4/C3 power ratio separates the classes."""
    ch = list(mi_trials.channels)
    power = (mi_trials.X.astype(float) ** 2).mean(axis=2)
    ratio = np.log(power[:, ch.index("C4")] / power[:, ch.index("C3")])
    assert ratio[mi_trials.y == 0].mean() < ratio[mi_trials.y == 1].mean()


def test_synthetic_cohort_reaches_the_papers_shapes():
    mi1 = get_dataset("synthetic_mi", **SYNTHETIC_MI_SHAPES["MI1"])
    assert len(mi1.subjects()) == 9
    trials = LeftRightImagery(resample=None).get_data(mi1, subjects=["S01"])
    assert trials.X.shape == (144, 22, 1000) and trials.sfreq == 250.0 and np.bincount(trials.y).tolist() == [72, 72]

    mi2 = get_dataset("synthetic_mi", **SYNTHETIC_MI_SHAPES["MI2"])
    meta = mi2.metadata()
    assert meta.subject.nunique() == 109 and set(meta.n_channels) == {64} and set(meta.sfreq) == {160.0}
    trials = LeftRightImagery(resample=None, epoch_s=750 / 160).get_data(mi2, subjects=["S109"])
    assert trials.X.shape[1:] == (64, 750) and len(trials) == 48 and trials.synthetic


def test_bnci_layout_through_moabb(tmp_path, offline_moabb):
    write_bnci_fixture(tmp_path)
    ds = get_dataset("bnci2014_001", root=tmp_path, subjects=[1])
    trials = LeftRightImagery(preprocess=PreprocessConfig(l_freq=8.0, h_freq=32.0)).get_data(ds)
    # the fixture's runs hold classes (1, 2, 3, 4) and (2, 1, 1, 4): left/right kept, in order, both sessions
    assert trials.y.tolist() == [0, 1, 1, 0, 0] * 2 and trials.X.shape == (10, 22, 512)
    assert not trials.synthetic and set(trials.metadata.recording) == {"A01T", "A01E"}


@pytest.mark.realdata
def test_eegmat_rest_vs_arithmetic_per_subject(data_root):
    ds = get_dataset("eegmat", root=data_root)
    trials = RecordingLabelParadigm().get_data(ds, subjects=["Subject00", "Subject22", "Subject31"])
    # Subject22 has no rest recording in the mirror: a client without both classes is left out
    assert trials.subjects() == ["Subject00", "Subject31"] and trials.tags()["synthetic"] == "false"
    assert trials.X.shape[1:] == (19, 512) and trials.sfreq == 128.0
    counts = trials.metadata.groupby(["recording", "label"]).size().to_dict()
    meta = ds.metadata().set_index("recording")
    for (rec, label), n in counts.items():
        assert label == meta.loc[rec, "label"] and n == int(meta.loc[rec, "duration_s"] // 4)
    onsets = trials.metadata.groupby("recording").onset_s.apply(list)
    assert all(np.allclose(np.diff(o), 4.0) and o[0] == 0.0 for o in onsets)  # consecutive, non-overlapping
    # the same data after average reference: channels sum to ~0 at every sample
    assert np.abs(trials.X.astype(float).sum(axis=1)).max() < 1e-3 * np.abs(trials.X).max()

    balanced = RecordingLabelParadigm(balance=True).get_data(ds, subjects=["Subject00"])
    assert np.bincount(balanced.y).tolist() == [15, 15]
    rest = balanced.metadata[balanced.y == 0].onset_s.to_numpy()
    assert rest[0] == 0.0 and rest[-1] >= 170.0  # evenly spread over the 3-min rest, not its first minute


@pytest.mark.realdata
def test_eegmmidb_reads_only_imagery_runs_with_t1_left_t2_right(data_root):
    ds = get_dataset("eegmmidb", root=data_root, runs=(1, 4, 6, 8, 12))
    trials = LeftRightImagery(resample=None).get_data(ds)
    imagery = sorted(r.recording for r in ds.recordings() if r.meta["run"] in (4, 8, 12))
    assert {"S001R04", "S001R08", "S001R12"} <= set(imagery)  # every subject the mirror holds, S001 at least
    assert sorted(set(trials.metadata.recording)) == imagery  # not R01 (baseline) or R06 (fists/feet)
    for rec in ds.recordings():
        if rec.recording not in set(trials.metadata.recording):
            continue
        ann = rec.load().annotations
        cues = [d for d in ann.description if d in ("T1", "T2")]
        rows = trials.metadata[trials.metadata.recording == rec.recording]
        assert list(rows.event) == cues and list(rows.label) == [0 if d == "T1" else 1 for d in cues]
    assert trials.X.shape == (15 * len(imagery), 64, 640) and trials.sfreq == 160.0  # 15 cues per imagery run
    with pytest.raises(ValueError, match="runs 4, 8, 12"):
        LeftRightImagery().get_data(get_dataset("eegmmidb", root=data_root, runs=(1, 2)))


def test_paradigm_refuses_bad_params_and_unusable_data(small_mi):
    with pytest.raises(ValueError, match="epoch_s"):
        LeftRightImagery(epoch_s=0)
    with pytest.raises(ValueError, match="resample"):
        RecordingLabelParadigm(resample=-1.0)
    with pytest.raises(ValueError, match="no recording fits"):
        RecordingLabelParadigm().get_data(small_mi)  # motor-imagery recordings carry no recording label


# -- splits ----------------------------------------------------------------------------------------------------
def _labels():
    subjects = np.repeat(["a", "b", "c"], [60, 40, 25])
    y = np.concatenate([np.repeat([0, 1], [45, 15]), np.tile([0, 1], 20), np.repeat([0, 1], [10, 15])])
    return y, subjects


def test_member_split_is_stratified_per_subject_and_deterministic():
    y, subjects = _labels()
    member = member_split(y, subjects, test_size=0.2, seed=3)
    for s in "abc":
        for c in (0, 1):
            rows = (subjects == s) & (y == c)
            held = int((~member[rows]).sum())
            assert abs(held - 0.2 * rows.sum()) <= 1  # each subject's 20 % holds each class in proportion
    assert np.array_equal(member, member_split(y, subjects, test_size=0.2, seed=3))
    assert not np.array_equal(member, member_split(y, subjects, test_size=0.2, seed=4))


def test_a_subjects_split_does_not_depend_on_the_other_subjects():
    y, subjects = _labels()
    full = member_split(y, subjects, seed=0)
    only_b = member_split(y[subjects == "b"], subjects[subjects == "b"], seed=0)
    order = np.r_[np.flatnonzero(subjects == "c"), np.flatnonzero(subjects == "b")]
    reordered = member_split(y[order], subjects[order], seed=0)
    assert np.array_equal(full[subjects == "b"], only_b)
    assert np.array_equal(reordered[subjects[order] == "b"], only_b)


def test_splitter_matches_the_function_and_refuses_unsplittable_subjects():
    y, subjects = _labels()
    splitter = SubjectMemberSplit(test_size=0.2, random_state=1)
    (train, test), = list(splitter.split(np.zeros((y.size, 1)), y, groups=subjects))
    member = member_split(y, subjects, 0.2, 1)
    assert np.array_equal(train, np.flatnonzero(member)) and np.array_equal(test, np.flatnonzero(~member))
    assert splitter.get_n_splits() == 1 and len(np.intersect1d(train, test)) == 0 and train.size + test.size == y.size
    with pytest.raises(ValueError, match="subject z"):
        member_split([0, 0, 0, 1], ["z"] * 4)
    with pytest.raises(ValueError, match="groups"):
        next(splitter.split(np.zeros((4, 1)), [0, 1, 0, 1], None))


# -- CSP -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(mi_trials):
    one = mi_trials.subject("S01")
    member = member_split(one.y, one.metadata.subject, seed=0)
    return one.X, one.y, member


def test_csp_outputs_and_agreement_with_mne(client):
    from mne.decoding import CSP

    X, y, member = client
    signals = ClientCSP(4, output="signals").fit(X[member], y[member]).transform(X)
    assert signals.shape == (len(y), 4, X.shape[2]) and signals.dtype == np.float32
    flat = ClientCSP(4, output="flat").fit(X[member], y[member]).transform(X)
    assert np.array_equal(flat, signals.reshape(len(y), -1))
    ours = ClientCSP(4, output="logvar", standardize=False).fit(X[member], y[member])
    mne_csp = CSP(4, transform_into="average_power", log=True, component_order="alternate",
                  rank=ours.rank_).fit(X[member].astype(float), y[member])
    assert np.allclose(ours.transform(X), mne_csp.transform(X.astype(float)), rtol=1e-4)


def test_csp_scaling_comes_from_the_training_trials_and_transform_never_refits(client):
    X, y, member = client
    csp = ClientCSP(4, output="logvar").fit(X[member], y[member])
    feats = csp.transform(X[member])
    assert np.allclose(feats.mean(axis=0), 0, atol=1e-5) and np.allclose(feats.std(axis=0), 1, atol=1e-4)
    held_out = csp.transform(X[~member])
    assert not np.allclose(held_out.mean(axis=0), 0, atol=1e-3)  # non-members are not standardised on themselves
    csp.transform(np.random.default_rng(0).normal(0, 1e-3, X[~member].shape))  # odd data through transform
    assert np.array_equal(csp.transform(X[member]), feats)


def test_csp_component_k_has_the_same_role_at_every_client(mi_trials):
    """Alternate order: even components favour class 0's variance, odd ones class 1's, at each client."""
    for subject in mi_trials.subjects():
        one = mi_trials.subject(subject)
        feats = ClientCSP(4, output="logvar", standardize=False).fit(one.X, one.y).transform(one.X)
        gap = feats[one.y == 0].mean(axis=0) - feats[one.y == 1].mean(axis=0)
        assert (gap[0::2] > 0).all() and (gap[1::2] < 0).all()


def test_csp_rank_accounts_for_the_average_reference(client):
    X, y, member = client
    n_ch = X.shape[1]
    assert numerical_rank(X) == n_ch - 1  # average reference: channels sum to zero
    csp = ClientCSP(4).fit(X[member], y[member])
    assert csp.rank_ == {"eeg": n_ch - 1}
    along_ones = np.abs(csp.filters_ @ np.ones(n_ch)) / np.linalg.norm(csp.filters_, axis=1) / np.sqrt(n_ch)
    assert along_ones.max() < 1e-3  # no weight on the null direction, where only float32 rounding lives
    full = ClientCSP(4).fit(np.random.default_rng(0).normal(size=(20, 5, 64)), np.tile([0, 1], 10))
    assert full.rank_ == "full"


def test_csp_refuses_what_it_cannot_fit(client):
    X, y, _ = client
    with pytest.raises(ValueError, match="two classes"):
        ClientCSP().fit(X[y == 0], y[y == 0])
    with pytest.raises(ValueError, match="output"):
        ClientCSP(output="power").fit(X, y)
    with pytest.raises(ValueError, match="n_components"):
        ClientCSP(n_components=X.shape[1]).fit(X, y)  # one more than the rank
    with pytest.raises(ValueError, match="channels"):
        ClientCSP().fit(X, y).transform(X[:, :-1])


def test_trials_select_and_by_subject(mi_trials):
    parts = mi_trials.by_subject()
    assert list(parts) == mi_trials.subjects() and sum(len(p) for p in parts.values()) == len(mi_trials)
    s2 = parts["S02"]
    assert set(s2.metadata.subject) == {"S02"} and s2.metadata.index.equals(pd.RangeIndex(len(s2)))
    assert np.array_equal(s2.X, mi_trials.X[(mi_trials.metadata.subject == "S02").to_numpy()])
