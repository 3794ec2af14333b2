"""SYNTHETIC cohorts: determinism, study-A shape, recoverable identity, and the task effects they promise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import welch

from eegprivacy.data import METADATA_COLUMNS, get_dataset
from eegprivacy.data import synthetic as synth
from eegprivacy.data.labels import patient_labels, report_is_positive
from eegprivacy.data.synthetic import (
    INTERICTAL_REPORTS,
    SyntheticClinical,
    SyntheticMotorImagery,
    SyntheticRestTask,
)

COHORTS = [SyntheticClinical, SyntheticMotorImagery, SyntheticRestTask]


@pytest.fixture(scope="module")
def clinical():
    return SyntheticClinical()


def _band_log_power(data, sfreq, lo, hi, nperseg=None):
    f, p = welch(data, sfreq, nperseg=nperseg or int(sfreq))
    band = (f >= lo) & (f <= hi)
    return np.log(p[..., band].mean(-1))


# ---------------------------------------------------------------------------------------------------------
# Shared contract
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", COHORTS)
def test_registry_and_synthetic_labelling(cls):
    ds = get_dataset(cls.name)
    assert isinstance(ds, cls) and ds.synthetic is True and cls.synthetic is True
    assert "SYNTHETIC" in ds.description
    md = ds.metadata()
    assert list(md.columns[: len(METADATA_COLUMNS)]) == METADATA_COLUMNS
    assert md["synthetic"].all()
    assert all("synthetic" in f.split(";") for f in md["flags"])
    assert md[["condition", "label", "sfreq", "n_channels", "channels", "duration_s"]].notna().all().all()
    assert (md["n_channels"] == md["channels"].str.split(",").map(len)).all()
    assert ds.version().startswith("synthetic-") and len(ds.version()) == len("synthetic-") + 64


@pytest.mark.parametrize("cls", COHORTS)
def test_determinism_per_seed(cls):
    a, b, c = cls(seed=3), cls(seed=3), cls(seed=4)
    assert a.version() == b.version() != c.version()
    ra, rb, rc = (ds.recordings()[1].load() for ds in (a, b, c))
    np.testing.assert_array_equal(ra.get_data(), rb.get_data())
    assert ra.get_data().shape[0] == rc.get_data().shape[0]
    n = min(ra.n_times, rc.n_times)
    assert not np.allclose(ra.get_data()[:, :n], rc.get_data()[:, :n])
    # loading twice, or in another order, gives the same signal (no shared RNG state)
    b.recordings()[0].load()
    np.testing.assert_array_equal(ra.get_data(), b.recordings()[1].load().get_data())


@pytest.mark.parametrize("cls", COHORTS)
def test_every_knob_changes_the_version(cls):
    base = cls(seed=0)
    assert cls(seed=0, noise_uv=2.0).version() != base.version()
    assert cls(seed=0, iaf=(9.0, 10.0)).version() != base.version()
    with pytest.raises(TypeError, match="unknown knob"):
        cls(seed=0, not_a_knob=1)


def test_generation_is_lazy(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("signal generated before load()")

    monkeypatch.setattr(synth, "render", boom)
    ds = SyntheticClinical(seed=11)
    assert len(ds.metadata()) > 0 and ds.version()
    with pytest.raises(AssertionError, match="before load"):
        ds.recordings()[0].load()


# ---------------------------------------------------------------------------------------------------------
# Study A's clinical cohort
# ---------------------------------------------------------------------------------------------------------
def test_clinical_shape_matches_study_a(clinical):
    md = clinical.metadata()
    per_patient = md.groupby("subject")
    assert md["subject"].nunique() == 17
    labels = per_patient["label"].agg(["min", "max"])
    assert (labels["min"] == labels["max"]).all()  # the label is the patient's
    assert labels["max"].value_counts().to_dict() == {0: 12, 1: 5}
    assert abs(len(md) - 122) <= 10
    counts = per_patient.size()
    assert counts.min() >= 4 and counts.max() <= 11 and counts.nunique() > 2
    assert set(md["sfreq"]) == {250.0, 500.0}
    assert md["hospital"].nunique() >= 2
    assert set(md["condition"]) == {"epilepsy", "non_epilepsy"}
    assert ((md["condition"] == "epilepsy") == (md["label"] == 1)).all()
    chans = md["channels"].iloc[0].split(",")
    assert len(chans) == 33 and len(set(chans)) == 33 and md["channels"].nunique() == 1
    assert {"Fp1", "Fp2", "C3", "Cz", "C4", "O1", "O2", "T7", "P8"} <= set(chans)
    assert md["duration_s"].between(20, 40).all()
    assert "report" not in md.columns  # report texts never enter a metadata table


def test_clinical_labels_come_from_the_keyword_rules(clinical):
    recs = clinical.recordings()
    reports = [(r.subject, clinical.report_text(r)) for r in recs]
    by_rules = patient_labels(reports)
    assert {r.subject: r.meta["label"] for r in recs} == by_rules
    for r in recs:
        assert r.meta["report_positive"] == int(report_is_positive(clinical.report_text(r)))
    # the traps are exercised: every interictal phrase appears in a negative patient's report
    negative_texts = {clinical.report_text(r) for r in recs if r.meta["label"] == 0}
    assert set(INTERICTAL_REPORTS) <= negative_texts
    # ictal discharges only in positive patients, and every positive patient has some
    ictal = {r.subject for r in recs if "ictal_discharges" in r.meta["flags"].split(";")}
    assert ictal == {r.subject for r in recs if r.meta["label"] == 1}


def test_clinical_raw_is_plausible_eeg(clinical):
    rec = clinical.recordings()[0]
    raw = rec.load()
    assert set(raw.get_channel_types()) == {"eeg"}
    assert raw.ch_names == rec.meta["channels"].split(",")
    assert raw.info["sfreq"] == rec.meta["sfreq"]
    assert raw.n_times / raw.info["sfreq"] == pytest.approx(rec.meta["duration_s"])
    assert "SYNTHETIC" in raw.info["description"]
    rms_uv = raw.get_data().std(axis=1) * 1e6
    assert 10 <= np.median(rms_uv) <= 50 and rms_uv.min() > 3
    assert raw.get_montage() is not None and not np.isnan(raw.get_montage().get_positions()["ch_pos"]["Oz"]).any()
    # neighbouring channels correlate more than distant ones (volume conduction)
    data = raw.get_data()
    idx = {c: i for i, c in enumerate(raw.ch_names)}
    near = np.corrcoef(data[idx["C3"]], data[idx["FC1"]])[0, 1]
    far = np.corrcoef(data[idx["C3"]], data[idx["O2"]])[0, 1]
    assert near > far + 0.1
    # 1/f background and a posterior alpha peak
    f, p = welch(data, raw.info["sfreq"], nperseg=int(2 * raw.info["sfreq"]))
    assert p[:, (f >= 2) & (f <= 4)].mean() > p[:, (f >= 25) & (f <= 35)].mean() * 5
    occ = p[[idx["O1"], idx["O2"]]].mean(0)
    assert occ[(f >= 8) & (f <= 12)].mean() > 1.5 * occ[(f >= 14) & (f <= 18)].mean()


def test_ictal_recordings_carry_3hz_spike_wave(clinical):
    recs = clinical.recordings()
    patient = next(r.subject for r in recs if "ictal_discharges" in r.meta["flags"])
    own = clinical.recordings([patient])
    ictal = next(r for r in own if "ictal_discharges" in r.meta["flags"])
    calm = next(r for r in own if "ictal_discharges" not in r.meta["flags"])

    def frontal_peak(rec):
        raw = rec.load()
        data = raw.get_data(picks=["Fz", "F3", "F4"])
        f, p = welch(data, raw.info["sfreq"], nperseg=int(4 * raw.info["sfreq"]))
        return p.mean(0)[(f >= 2.5) & (f <= 3.5)].max()

    assert frontal_peak(ictal) > 2 * frontal_peak(calm)


def test_subject_identity_is_recoverable(clinical):
    """Spectral fingerprints re-identify patients on held-out recordings, as with real EEG."""
    feats, subjects, order = [], [], []
    for subject in clinical.subjects():
        for k, rec in enumerate(clinical.recordings([subject])[:4]):
            raw = rec.load()
            sf = raw.info["sfreq"]
            f, p = welch(raw.get_data(), sf, nperseg=int(2 * sf))
            feats.append(np.log(p[:, (f >= 1) & (f <= 30)]).ravel())
            subjects.append(subject)
            order.append(k)
    X, y, k = np.array(feats), np.array(subjects), np.array(order)
    train, test = k < 2, k >= 2
    Z = X - X.mean(axis=1, keepdims=True)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    predicted = y[train][(Z[test] @ Z[train].T).argmax(axis=1)]
    accuracy = (predicted == y[test]).mean()
    assert accuracy > 0.8, f"nearest-neighbour re-identification {accuracy:.2f} (chance {1 / 17:.2f})"


def test_fingerprint_spread_exceeds_recording_jitter(clinical):
    fps = [clinical.fingerprint(i) for i in range(17)]
    iafs = np.array([fp.iaf for fp in fps])
    assert iafs.std() > 3 * clinical.cfg["iaf_jitter"]
    assert np.ptp([fp.exponent for fp in fps]) > 5 * clinical.cfg["exponent_jitter"]


# ---------------------------------------------------------------------------------------------------------
# Motor imagery and rest/task
# ---------------------------------------------------------------------------------------------------------
def test_motor_imagery_structure():
    ds = SyntheticMotorImagery()
    md = ds.metadata()
    assert md["subject"].nunique() == 9 and (md.groupby("subject").size() == 2).all()
    assert (md["label"] == -1).all() and set(md["sfreq"]) == {250.0}
    chans = md["channels"].iloc[0].split(",")
    assert len(chans) == 22 and {"C3", "Cz", "C4"} <= set(chans)
    raw = ds.recordings()[0].load()
    desc = list(raw.annotations.description)
    assert desc.count("left_hand") == desc.count("right_hand") == 10
    assert raw.annotations.onset.max() + 4.0 <= raw.times[-1]


def test_motor_imagery_contralateral_mu_desynchronisation():
    ds = SyntheticMotorImagery()
    agree = 0
    for subject in ds.subjects():
        raw = ds.recordings([subject])[0].load()
        sf = raw.info["sfreq"]
        data = raw.get_data(picks=["C3", "C4"])
        power = {"left_hand": [], "right_hand": []}
        for ann in raw.annotations:
            start = int((ann["onset"] + 0.5) * sf)
            power[ann["description"]].append(_band_log_power(data[:, start : start + int(3 * sf)], sf, 8, 13))
        left, right = np.mean(power["left_hand"], axis=0), np.mean(power["right_hand"], axis=0)
        # left-hand imagery lowers C4 mu, right-hand imagery lowers C3 mu
        agree += int(left[1] < right[1] and right[0] < left[0])
    assert agree >= 7, f"only {agree}/9 subjects show contralateral mu ERD"


def test_rest_task_alpha_is_lower_in_task():
    ds = SyntheticRestTask()
    md = ds.metadata()
    assert md["subject"].nunique() == 12 and len(md["channels"].iloc[0].split(",")) == 19
    assert set(zip(md["condition"], md["label"])) == {("rest", 0), ("task", 1)}
    lower = 0
    for subject in ds.subjects():
        alpha = {"rest": [], "task": []}
        for rec in ds.recordings([subject]):
            raw = rec.load()
            alpha[rec.meta["condition"]].append(
                _band_log_power(raw.get_data(picks=["O1", "O2", "Pz"]), raw.info["sfreq"], 8, 12).mean())
        lower += int(np.mean(alpha["task"]) < np.mean(alpha["rest"]))
    assert lower >= 11, f"task alpha below rest alpha for only {lower}/12 subjects"
