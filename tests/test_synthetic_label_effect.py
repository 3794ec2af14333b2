"""SYNTHETIC clinical cohort's ``label_effect_size``: off by default (today's bytes), label-linked when on.

The effect is checked with a cheap spectral statistic (no classifier): the patient-level relative slow power
(0.5-8 Hz over 0.5-30 Hz, channel mean, seizure-free recordings) should separate the classes more as the effect
grows, and not beyond chance when it is off. The MLP calibration against the paper's LOSO accuracy lives outside
the test suite (it is slow and seed-noisy); see ``SyntheticClinical``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.signal import welch
from scipy.stats import ttest_ind

from eegprivacy.data.base import config_version
from eegprivacy.data.synthetic import (
    GENERATOR_VERSION,
    SLOWING,
    SyntheticClinical,
    between_subject_sd,
    draw_fingerprint,
)
from eegprivacy.validation import InvalidParameterError

EFFECTS = (0.0, 1.0, 2.0, 4.0)
RECORDINGS_PER_PATIENT = 2  # enough for a patient-level mean; keeps the test to a few seconds


def _patient_labels(ds) -> dict[str, int]:
    return ds.metadata().drop_duplicates("subject").set_index("subject")["label"].astype(int).to_dict()


def _relative_slow_power(raw) -> float:
    f, p = welch(raw.get_data(), raw.info["sfreq"], nperseg=int(2 * raw.info["sfreq"]))
    p = p.mean(axis=0)
    return float(p[(f >= 0.5) & (f < 8)].sum() / p[(f >= 0.5) & (f < 30)].sum())


def _slowing_t(effect: float) -> float:
    """Welch t of patient-mean relative slow power, positives minus negatives."""
    ds = SyntheticClinical(label_effect_size=effect)
    labels = _patient_labels(ds)
    per_patient: dict[str, list[float]] = {}
    for rec in ds.recordings():
        values = per_patient.setdefault(rec.subject, [])
        # seizure recordings are left out: their 3-Hz spike-wave bursts are label-linked delta on their own
        if rec.meta["n_seizures"] == 0 and len(values) < RECORDINGS_PER_PATIENT:
            values.append(_relative_slow_power(rec.load()))
    means = {s: np.mean(v) for s, v in per_patient.items()}
    pos = [m for s, m in means.items() if labels[s] == 1]
    neg = [m for s, m in means.items() if labels[s] == 0]
    return float(ttest_ind(pos, neg, equal_var=False).statistic)


@pytest.fixture(scope="module")
def slowing_t() -> dict[float, float]:
    return {d: _slowing_t(d) for d in EFFECTS}


def test_default_is_todays_cohort():
    default = SyntheticClinical()
    zero = SyntheticClinical(label_effect_size=0.0)
    assert default.label_effect_size == 0.0
    # the version is the pre-existing formula over the pre-existing config: no new key when the effect is off
    legacy = {"cohort": default.name, "generator_version": GENERATOR_VERSION, "seed": 0, **SyntheticClinical.DEFAULTS}
    assert default.version() == zero.version() == "synthetic-" + config_version(legacy)
    assert "label_effect_size" not in default.metadata().columns
    # every patient's fingerprint is the plain seeded draw, so every recording is rendered as before
    lay = default._layout()
    for i in range(default.cfg["n_patients"]):
        expected = draw_fingerprint(default._rng(0, i), lay, default.cfg)
        got = default.fingerprint(i)
        for f in dataclasses.fields(expected):
            np.testing.assert_array_equal(getattr(got, f.name), getattr(expected, f.name))
    for a, b in zip(default.recordings()[:3], zero.recordings()[:3]):
        np.testing.assert_array_equal(a.load().get_data(), b.load().get_data())


def test_effect_touches_positive_patients_only_and_keeps_their_fingerprint():
    base, slowed = SyntheticClinical(), SyntheticClinical(label_effect_size=2.0)
    labels = _patient_labels(base)
    assert labels == _patient_labels(slowed)
    assert slowed.version() != base.version()
    md = slowed.metadata()
    assert (md["label_effect_size"] == 2.0).all() and md["synthetic"].all()
    assert all("synthetic" in f.split(";") for f in md["flags"])
    assert "SYNTHETIC" in slowed.description and "slowing" in slowed.description
    for i in range(base.cfg["n_patients"]):
        fb, fs = base.fingerprint(i), slowed.fingerprint(i)
        positive = labels[base._subject(i)] == 1
        for name, sign in SLOWING:
            shift = sign * 2.0 * between_subject_sd(base.cfg[name]) if positive else 0.0
            assert getattr(fs, name) == pytest.approx(getattr(fb, name) + shift)
        # everything else (alpha topography, gains, levels) is the patient's own draw
        for f in dataclasses.fields(fb):
            if f.name not in dict(SLOWING):
                np.testing.assert_array_equal(getattr(fs, f.name), getattr(fb, f.name))
    first = {}
    for a, b in zip(base.recordings(), slowed.recordings()):
        first.setdefault(labels[a.subject], (a, b))
    neg_a, neg_b = first[0]
    np.testing.assert_array_equal(neg_a.load().get_data(), neg_b.load().get_data())
    pos_a, pos_b = first[1]
    assert not np.allclose(pos_a.load().get_data(), pos_b.load().get_data())


@pytest.mark.parametrize("effect", [0.0, 0.5, 3.0])
def test_label_counts_unchanged(effect):
    md = SyntheticClinical(label_effect_size=effect).metadata()
    patients = md.drop_duplicates("subject")
    assert len(patients) == 17 and int(patients["label"].sum()) == 5
    assert len(md) == 122


def test_separability_grows_with_effect_size(slowing_t):
    t = [slowing_t[d] for d in EFFECTS]
    assert all(b > a for a, b in zip(t, t[1:])), f"t-statistic by effect size {dict(zip(EFFECTS, t))}"
    # no-signal case: with the effect off the classes do not differ in slowing beyond chance
    assert abs(slowing_t[0.0]) < 2.5, slowing_t
    assert slowing_t[EFFECTS[-1]] > 4.0, slowing_t


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "1", None, True])
def test_invalid_effect_size_is_a_clear_error(bad):
    with pytest.raises(InvalidParameterError, match=r"SyntheticClinical: label_effect_size .* finite number ≥ 0"):
        SyntheticClinical(label_effect_size=bad)
