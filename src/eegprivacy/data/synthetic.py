"""SYNTHETIC EEG cohorts: seeded stand-ins for the real data, so every study runs (and is tested) without it.

Why the signal model is not just noise: the privacy experiments ask how much of a *person* survives in
features, models and embeddings, so the synthetic signal must carry a person the way real EEG does. Every
subject gets a stable fingerprint drawn from the seed (individual alpha frequency, alpha topography, 1/f
exponent, background level, per-channel gain, beta/theta levels); each recording re-draws only a small
jitter around it, smaller than the spread between subjects, so re-identification from spectra works as it
does on real EEG.

Signal per recording (microvolts, then volts):
- 1/f^beta background, shaped in the frequency domain, one source per channel mixed with a Gaussian
  channel-distance kernel (volume conduction -> neighbouring channels correlate);
- alpha: narrow-band around the individual alpha frequency, mixed with a broader kernel, weighted by a
  posterior topography times a subject-specific smooth random field;
- small central beta and frontal-midline theta; per-channel gain; white sensor noise; optional line noise;
- cohort-specific extras (ictal spike-wave bursts, motor-imagery mu/beta desynchronisation, task effects);
- optionally (clinical cohort, ``label_effect_size`` > 0) a label-linked interictal slowing of the positive
  patients' fingerprints, so the patient label is learnable from background EEG at a chosen strength.

Everything is deterministic per (seed, subject, recording): structure, fingerprints and signals come from
``np.random.default_rng([seed, cohort_salt, stream, subject, recording])``, and the signal is only generated
when a recording is loaded. The version is ``"synthetic-" + sha256(config)`` where the config holds the seed,
every knob and a generator version (bump ``GENERATOR_VERSION`` when the signal model changes).

One idea over about 780 lines: one signal model and its cohort variants. Every cohort uses the same fingerprint and
background generators and differs only in its extras, so splitting it would split one model.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any

import numpy as np

from eegprivacy.data.base import EEGDataset, Recording, config_version
from eegprivacy.data.labels import NEGATIVE_KEYWORDS, POSITIVE_KEYWORDS, patient_labels, report_is_positive
from eegprivacy.validation import NON_NEGATIVE, check

GENERATOR_VERSION = 1

STANDARD_1020 = ("Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8",
                 "P7", "P3", "Pz", "P4", "P8", "O1", "O2")
# Study A has "around 33 channels": the 19 of the 10-20 system plus 14 common 10-10 positions.
CLINICAL_CHANNELS = STANDARD_1020 + ("AF3", "AF4", "FC5", "FC1", "FCz", "FC2", "FC6",
                                     "CP5", "CP1", "CP2", "CP6", "PO3", "PO4", "Oz")
# The 22-channel motor-imagery layout of BCI Competition IV 2a (BNCI2014-001).
MI_CHANNELS = ("Fz", "FC3", "FC1", "FCz", "FC2", "FC4", "C5", "C3", "C1", "Cz", "C2", "C4", "C6",
               "CP3", "CP1", "CPz", "CP2", "CP4", "P1", "Pz", "P2", "POz")

# Knobs shared by every cohort: ranges are (low, high) of a uniform draw per subject.
SIGNAL_DEFAULTS: dict[str, Any] = {
    "bg_uv": (10.0, 22.0),           # background RMS per channel
    "exponent": (1.0, 2.0),          # 1/f^exponent power spectrum
    "iaf": (8.5, 11.5),              # individual alpha frequency (Hz)
    "alpha_uv": (6.0, 20.0),         # alpha RMS at the strongest channel
    "alpha_bw": 0.6,                 # alpha peak width (Hz, Gaussian sd)
    "beta_freq": (17.0, 24.0),
    "beta_uv": (1.5, 4.0),
    "theta_freq": (5.0, 7.0),
    "theta_uv": (1.0, 3.5),
    "gain_sd": 0.15,                 # log-sd of the per-channel gain (skull, electrode)
    "topo_sd": 0.35,                 # log-sd of the subject's smooth alpha-topography field
    "kernel_m": 0.035,               # volume-conduction kernel width (m) for background
    "broad_kernel_m": 0.06,          # wider kernel for rhythms (alpha, beta, theta)
    "noise_uv": 1.0,                 # white sensor noise
    # recording-to-recording jitter around the fingerprint (kept well below the between-subject spread)
    "iaf_jitter": 0.15,
    "exponent_jitter": 0.05,
    "amp_jitter": 0.08,
    "gain_jitter": 0.03,
}


# ---------------------------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def standard_montage():
    """The 10-05 template montage (MNE renamed ``standard_1005`` to ``colin27_1005`` in 1.13)."""
    import mne

    name = "colin27_1005" if "colin27_1005" in mne.channels.get_builtin_montages() else "standard_1005"
    return mne.channels.make_standard_montage(name)


@lru_cache(maxsize=8)
def _positions(ch_names: tuple[str, ...]) -> np.ndarray:
    pos = standard_montage().get_positions()["ch_pos"]
    missing = [c for c in ch_names if c not in pos]
    if missing:
        raise ValueError(f"channels {missing} are not 10-05 positions; synthetic cohorts need standard names")
    return np.array([pos[c] for c in ch_names], dtype=float)


def _landmark(name: str) -> np.ndarray:
    return np.asarray(standard_montage().get_positions()["ch_pos"][name], dtype=float)


def _kernel(positions: np.ndarray, width_m: float) -> np.ndarray:
    """Gaussian channel-distance mixing matrix with unit-norm rows (unit-variance sources stay unit)."""
    d2 = ((positions[:, None, :] - positions[None, :, :]) ** 2).sum(-1)
    k = np.exp(-d2 / (2.0 * width_m**2))
    return k / np.linalg.norm(k, axis=1, keepdims=True)


def _focal(positions: np.ndarray, centre: np.ndarray, width_m: float) -> np.ndarray:
    return np.exp(-((positions - centre) ** 2).sum(-1) / (2.0 * width_m**2))


@dataclass(frozen=True)
class Layout:
    ch_names: tuple[str, ...]
    positions: np.ndarray
    kernel: np.ndarray
    broad_kernel: np.ndarray
    posterior: np.ndarray  # alpha weighting, 1 at the back of the head, ~0.15 at the front
    frontal: np.ndarray    # generalised, frontally predominant (spike-wave) weighting
    central: np.ndarray    # beta weighting around Cz
    midline_frontal: np.ndarray  # theta weighting around Fz

    @property
    def n(self) -> int:
        return len(self.ch_names)


@lru_cache(maxsize=8)
def layout(ch_names: tuple[str, ...], kernel_m: float, broad_kernel_m: float) -> Layout:
    pos = _positions(tuple(ch_names))
    y = pos[:, 1] - _landmark("Cz")[1]  # anterior-posterior axis relative to the vertex
    posterior = 0.15 + 0.85 / (1.0 + np.exp((y + 0.03) / 0.02))
    frontal = 0.6 + 0.4 / (1.0 + np.exp(-y / 0.03))
    return Layout(
        ch_names=tuple(ch_names), positions=pos,
        kernel=_kernel(pos, kernel_m), broad_kernel=_kernel(pos, broad_kernel_m),
        posterior=posterior, frontal=frontal,
        central=0.3 + 0.7 * _focal(pos, _landmark("Cz"), 0.05),
        midline_frontal=0.2 + 0.8 * _focal(pos, _landmark("Fz"), 0.05),
    )


# ---------------------------------------------------------------------------------------------------------
# Generator core
# ---------------------------------------------------------------------------------------------------------
def _draw(rng: np.random.Generator, spec) -> float:
    lo, hi = (spec, spec) if np.isscalar(spec) else spec
    return float(rng.uniform(lo, hi))


def _shaped_noise(rng: np.random.Generator, n_src: int, n: int, sfreq: float, amplitude) -> np.ndarray:
    """Gaussian noise with the given amplitude spectrum (function of frequency), unit variance per row."""
    freqs = np.fft.rfftfreq(n, 1.0 / sfreq)
    shape = amplitude(freqs)
    band = np.flatnonzero(shape > 1e-4 * shape.max())  # draw only where the spectrum lives (narrow bands)
    lo, hi = band[0], band[-1] + 1
    spec = np.zeros((n_src, freqs.size), dtype=complex)
    spec[:, lo:hi] = (rng.standard_normal((n_src, hi - lo)) + 1j * rng.standard_normal((n_src, hi - lo))) * shape[lo:hi]
    x = np.fft.irfft(spec, n=n, axis=1)
    return x / (x.std(axis=1, keepdims=True) + 1e-30)


def pink_noise(rng, n_src, n, sfreq, exponent, knee_hz=1.0, highpass_hz=0.3):
    """1/f^exponent power (knee avoids the DC blow-up; a soft high-pass removes drift below 0.3 Hz)."""

    def amp(f):
        hp = 1.0 / (1.0 + (highpass_hz / np.maximum(f, 1e-9)) ** 4)
        return hp * (f + knee_hz) ** (-exponent / 2.0)

    return _shaped_noise(rng, n_src, n, sfreq, amp)


def narrowband(rng, n_src, n, sfreq, f0, bw):
    """Waxing-and-waning rhythm: Gaussian spectral peak at f0 with sd bw (Hz)."""
    return _shaped_noise(rng, n_src, n, sfreq, lambda f: np.exp(-((f - f0) ** 2) / (4.0 * bw**2)))


def envelope(n: int, sfreq: float, events, ramp_s: float = 0.5) -> np.ndarray:
    """1 everywhere except during ``events`` = [(onset_s, duration_s, level)], with raised-cosine ramps."""
    env = np.ones(n)
    t = np.arange(n) / sfreq
    for onset, duration, level in events:
        rise = np.clip((t - onset + ramp_s / 2) / ramp_s, 0, 1)
        fall = np.clip((onset + duration + ramp_s / 2 - t) / ramp_s, 0, 1)
        w = np.minimum(rise, fall)
        w = 0.5 - 0.5 * np.cos(np.pi * w)
        env += (level - 1.0) * w
    return env


@dataclass(frozen=True)
class Fingerprint:
    """A subject's stable spectral identity (and, jittered, one recording's state)."""

    bg_uv: float
    exponent: float
    iaf: float
    alpha_uv: float
    alpha_topo: np.ndarray
    beta_freq: float
    beta_uv: float
    theta_freq: float
    theta_uv: float
    gain: np.ndarray


def draw_fingerprint(rng: np.random.Generator, lay: Layout, cfg: dict) -> Fingerprint:
    field = lay.broad_kernel @ rng.standard_normal(lay.n)
    field = (field - field.mean()) / (field.std() + 1e-12)
    alpha_topo = lay.posterior * np.exp(cfg["topo_sd"] * field)
    alpha_topo = alpha_topo / alpha_topo.max()
    return Fingerprint(
        bg_uv=_draw(rng, cfg["bg_uv"]), exponent=_draw(rng, cfg["exponent"]), iaf=_draw(rng, cfg["iaf"]),
        alpha_uv=_draw(rng, cfg["alpha_uv"]), alpha_topo=alpha_topo,
        beta_freq=_draw(rng, cfg["beta_freq"]), beta_uv=_draw(rng, cfg["beta_uv"]),
        theta_freq=_draw(rng, cfg["theta_freq"]), theta_uv=_draw(rng, cfg["theta_uv"]),
        gain=np.exp(cfg["gain_sd"] * rng.standard_normal(lay.n)),
    )


def jitter_fingerprint(fp: Fingerprint, rng: np.random.Generator, cfg: dict) -> Fingerprint:
    """One recording's state: the subject's fingerprint plus small recording-to-recording changes."""
    amp = lambda: float(np.exp(cfg["amp_jitter"] * rng.standard_normal()))  # noqa: E731
    return replace(
        fp,
        iaf=fp.iaf + cfg["iaf_jitter"] * rng.standard_normal(),
        exponent=fp.exponent + cfg["exponent_jitter"] * rng.standard_normal(),
        bg_uv=fp.bg_uv * amp(), alpha_uv=fp.alpha_uv * amp(), beta_uv=fp.beta_uv * amp(),
        theta_uv=fp.theta_uv * amp(),
        gain=fp.gain * np.exp(cfg["gain_jitter"] * rng.standard_normal(fp.gain.shape)),
    )


# The fingerprint parameters that interictal slowing moves, and the direction that means "slower".
SLOWING = (("iaf", -1.0), ("exponent", +1.0), ("theta_uv", +1.0))


def between_subject_sd(spec) -> float:
    """SD of a fingerprint parameter across subjects: ``(high - low) / sqrt(12)`` for the uniform draw of a
    ``(low, high)`` knob (as :func:`_draw` makes it), 0 for a fixed value."""
    lo, hi = (spec, spec) if np.isscalar(spec) else spec
    return (float(hi) - float(lo)) / np.sqrt(12.0)


def slow_fingerprint(fp: Fingerprint, effect_size: float, cfg: dict) -> Fingerprint:
    """``fp`` with interictal slowing of ``effect_size`` between-subject SDs (see :class:`SyntheticClinical`).

    Each parameter in :data:`SLOWING` moves by ``effect_size`` times its between-subject SD, in the slow
    direction: lower individual alpha frequency, steeper 1/f (power shifts from fast to slow frequencies at the
    same total background power) and more frontal-midline theta. Nothing is re-drawn, so the rest of the
    fingerprint, and every random draw of every recording, stays the patient's own.
    """
    return replace(fp, **{name: getattr(fp, name) + sign * effect_size * between_subject_sd(cfg[name])
                          for name, sign in SLOWING})


def render(rng: np.random.Generator, fp: Fingerprint, lay: Layout, sfreq: float, n: int, cfg: dict, *,
           alpha_env=1.0, beta_env=1.0, theta_env=1.0, extras=(), line_uv: float = 0.0,
           line_freq: float = 50.0) -> np.ndarray:
    """The shared signal model -> (n_channels, n) array in volts. ``extras`` are (topography, µV trace) pairs."""
    x = fp.bg_uv * (lay.kernel @ pink_noise(rng, lay.n, n, sfreq, fp.exponent))
    rhythms = (
        (fp.iaf, cfg["alpha_bw"], fp.alpha_uv * fp.alpha_topo, alpha_env),
        (fp.beta_freq, 2.0, fp.beta_uv * lay.central, beta_env),
        (fp.theta_freq, 0.8, fp.theta_uv * lay.midline_frontal, theta_env),
    )
    for f0, bw, topo, env in rhythms:
        src = lay.broad_kernel @ narrowband(rng, lay.n, n, sfreq, f0, bw)
        src /= src.std(axis=1, keepdims=True)
        x += topo[:, None] * src * env
    for topo, trace in extras:
        x += np.outer(topo, trace)
    x *= fp.gain[:, None]
    x += cfg["noise_uv"] * rng.standard_normal(x.shape)
    if line_uv:
        t = np.arange(n) / sfreq
        phase = rng.uniform(0, 2 * np.pi)
        x += line_uv * np.outer(rng.uniform(0.5, 1.5, lay.n), np.sin(2 * np.pi * line_freq * t + phase))
    return x * 1e-6


def to_raw(data: np.ndarray, ch_names, sfreq: float, description: str, annotations=None):
    """EEG-only RawArray in volts with 10-05 positions, so montage-based steps work downstream."""
    import mne

    info = mne.create_info(list(ch_names), float(sfreq), "eeg")
    info["description"] = description
    raw = mne.io.RawArray(data, info, verbose="error")
    raw.set_montage(standard_montage(), on_missing="ignore", verbose="error")
    if annotations is not None:
        raw.set_annotations(annotations)
    return raw


# ---------------------------------------------------------------------------------------------------------
# Shared dataset plumbing
# ---------------------------------------------------------------------------------------------------------
class _SyntheticCohort(EEGDataset):
    """Config handling, seeding, fingerprints and meta shared by every synthetic cohort."""

    synthetic = True
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, seed: int = 0, **overrides):
        unknown = sorted(set(overrides) - set(self.DEFAULTS))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown knob(s) {unknown}; known: {sorted(self.DEFAULTS)}")
        if int(seed) < 0:
            raise ValueError("seed must be a non-negative integer")
        self.seed = int(seed)
        cfg = dict(self.DEFAULTS)
        cfg.update(overrides)
        self.cfg = cfg
        self.config = {"cohort": self.name, "generator_version": GENERATOR_VERSION, "seed": self.seed, **cfg}

    def _version(self) -> str:
        return "synthetic-" + config_version(self.config)

    def _rng(self, stream: int, *keys: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(self.name.encode()), stream, *map(int, keys)])

    def _layout(self) -> Layout:
        return layout(tuple(self.cfg["channels"]), self.cfg["kernel_m"], self.cfg["broad_kernel_m"])

    def fingerprint(self, subject_index: int) -> Fingerprint:
        """The subject's stable fingerprint (stream 0): the ground truth an identity attack tries to recover."""
        return draw_fingerprint(self._rng(0, subject_index), self._layout(), self.cfg)

    def _base_meta(self, sfreq: float, duration_s: float, condition: str, label: int, flags=()) -> dict:
        chans = list(self.cfg["channels"])
        n = int(round(duration_s * sfreq))
        return {"condition": condition, "label": int(label), "sfreq": float(sfreq), "n_channels": len(chans),
                "channels": ",".join(chans), "duration_s": n / float(sfreq),
                "flags": ";".join(["synthetic", *flags]), "synthetic": True}

    def _raw(self, data, sfreq, annotations=None):
        return to_raw(data, self.cfg["channels"], sfreq, self.description, annotations)


def _durations(rng, spec, size: int) -> np.ndarray:
    """Whole seconds (so EDF's 1-s data records tile every recording exactly)."""
    lo, hi = (spec, spec) if np.isscalar(spec) else spec
    return np.round(rng.uniform(lo, hi, size)).astype(float)


# ---------------------------------------------------------------------------------------------------------
# Study A's clinical cohort
# ---------------------------------------------------------------------------------------------------------
ICTAL_REPORTS = (
    "Ictal EEG pattern: rhythmic generalised spike-and-wave discharges at about 3 Hz lasting several seconds.",
    "Epileptic seizure recorded, generalised onset with spike-and-wave complexes.",
    "Ictal EEG activity with frontally predominant rhythmic discharges; clinical correlate noted.",
)
INTERICTAL_REPORTS = (
    "Epileptiform interictal activity: isolated sharp waves, no seizure recorded.",
    "Abnormal interictal record with sporadic sharp transients.",
    "Interictal EEG activity with occasional sharp waves; background otherwise normal.",
)
NORMAL_REPORTS = (
    "Normal background activity; well-formed posterior dominant rhythm.",
    "Normal background, reactive to eye opening; no epileptiform discharges.",
    "Normal awake EEG.",
)


@dataclass(frozen=True)
class _ClinicalRec:
    patient: int
    index: int
    hospital: int
    sfreq: float
    duration_s: float
    kind: str  # "ictal" | "interictal" | "normal"
    report: str
    n_seizures: int


class SyntheticClinical(_SyntheticCohort):
    """SYNTHETIC multi-hospital clinical cohort shaped like study A's (17 patients, 12 negative / 5 positive).

    Defaults: 122 recordings (4-11 per patient), 33 channels, three hospitals recording at 250, 500 and
    500 Hz, 20-40 s per recording (the real ones are far longer; raise ``duration_s`` for realism), one
    free-text report per recording. Labels are *not* set directly: they come from the study-A keyword
    rules (:mod:`eegprivacy.data.labels`) applied to the reports, which include the interictal traps.
    Positive patients' ictal recordings contain 3-Hz spike-wave bursts; recordings whose report mentions
    interictal findings contain isolated sharp transients. ``n_cross_hospital_patients`` patients (default
    1) have their later recordings at a second hospital, so duplicate detection/linkage has a case to find.

    Ictal bursts and sharp waves sit in a few seconds of a few recordings, so averaged over a patient's windows
    they barely move the features: with the default ``label_effect_size=0`` the label is essentially not
    learnable from patient-level features. ``label_effect_size = d > 0`` adds a patient-level, label-linked
    *interictal slowing*: every positive (epilepsy-labelled) patient's fingerprint is shifted, in every one of
    its recordings, by ``d`` between-patient SDs (SD of the parameter's uniform draw, ``(high-low)/sqrt(12)``)
    in each of three parameters: individual alpha frequency down (default spread: d x 0.87 Hz), 1/f exponent up
    (d x 0.29: relatively more delta/theta, less beta/gamma at the same background power) and frontal-midline
    theta amplitude up (d x 0.72 µV). So ``d`` reads as Cohen's d of each slowing parameter between the classes
    (against the population SD of the draw; a knob set to a fixed value has no spread and is not moved). Why
    this shape: background slowing (a slower posterior dominant rhythm, more delta/theta power) is a common
    interictal finding in people with epilepsy, and anti-seizure medication slows the background too; it is
    stylised here, not fitted to any data. The shift is deterministic (no extra random draws), so each patient
    keeps its own fingerprint, and ``d = 0`` generates exactly the bytes, and the version, of the cohort before
    the knob existed. A non-zero ``d`` enters the version, the description and a ``label_effect_size`` metadata
    column; the cohort stays flagged ``synthetic`` and is never a headline. ``params/features.yaml`` sets the
    ``d`` whose non-private LOSO accuracy sits near the paper's for ``seed: 0``; the mapping from ``d`` to
    accuracy depends strongly on which 5 patients are positive, so another seed needs its own calibration.
    """

    name = "synthetic_clinical"
    description = ("SYNTHETIC clinical EEG cohort shaped like study A (17 patients, 12/5, 33 channels, "
                   "250/500 Hz, 3 hospitals); labels from keyword rules on synthetic reports")
    label_levels = {"label": {"0": "non-epilepsy: no report names a seizure-related phrase",
                              "1": "epilepsy: a report names a seizure-related phrase (study A's keyword rule)"}}
    DEFAULTS: dict[str, Any] = {
        "n_patients": 17,
        "n_positive": 5,
        "n_recordings": 122,               # total; None keeps the raw per-patient draws
        "recordings_per_patient": (4, 11),
        "hospitals": ("hospital_a", "hospital_b", "hospital_c"),
        "hospital_sfreq": (250.0, 500.0, 500.0),
        "hospital_line_uv": (1.5, 0.5, 3.0),
        "line_freq": 50.0,
        "n_cross_hospital_patients": 1,
        "duration_s": (20.0, 40.0),
        "channels": CLINICAL_CHANNELS,
        "ictal_fraction": 0.5,             # share of a positive patient's recordings with seizures (>= 1)
        "seizures_per_recording": (1, 2),
        "seizure_s": (3.0, 8.0),
        "spike_wave_hz": (2.5, 3.5),
        "spike_wave_uv": (80.0, 180.0),
        "interictal_rate_positive": 0.5,   # chance a non-ictal recording of a positive patient is interictal
        "interictal_rate_negative": 0.25,  # ... of a negative patient
        "sharp_waves_per_min": (3.0, 10.0),
        "sharp_wave_uv": (40.0, 90.0),
        "age": (18, 85),
        **SIGNAL_DEFAULTS,
    }

    def __init__(self, seed: int = 0, label_effect_size: float = 0.0, **overrides):
        super().__init__(seed, **overrides)
        self.line_freq = float(self.cfg["line_freq"])  # the mains its hospitals' line noise is rendered at
        d = float(check(label_effect_size, NON_NEGATIVE, f"{type(self).__name__}: label_effect_size"))
        self.label_effect_size = d
        if d > 0:  # only then, so the default cohort keeps today's version
            self.config["label_effect_size"] = d
            self.description = f"{self.description}; label-linked interictal slowing, effect size {d:g} SD"

    # -- structure (stream 2): who is positive, how many recordings, where, and what the reports say ------
    def _structure(self) -> list[_ClinicalRec]:
        return self._cached("_struct", self._build_structure)

    def _build_structure(self) -> list[_ClinicalRec]:
        c = self.cfg
        rng = self._rng(2)
        n, n_pos = int(c["n_patients"]), int(c["n_positive"])
        if not 0 <= n_pos <= n:
            raise ValueError("n_positive must lie between 0 and n_patients")
        n_hosp = len(c["hospitals"])
        if len(c["hospital_sfreq"]) != n_hosp or len(c["hospital_line_uv"]) != n_hosp:
            raise ValueError("hospitals, hospital_sfreq and hospital_line_uv must have the same length")
        positive = set(rng.choice(n, n_pos, replace=False).tolist())
        lo, hi = map(int, c["recordings_per_patient"])
        counts = rng.integers(lo, hi + 1, n)
        target = c["n_recordings"]
        if target is not None:
            if not lo * n <= target <= hi * n:
                raise ValueError(f"n_recordings={target} impossible with {n} patients x {lo}-{hi} recordings")
            while counts.sum() != target:
                i = rng.integers(n)
                if counts.sum() < target and counts[i] < hi:
                    counts[i] += 1
                elif counts.sum() > target and counts[i] > lo:
                    counts[i] -= 1
        home = np.array([i % n_hosp for i in range(n)])[rng.permutation(n)]  # every hospital gets patients
        n_cross = min(int(c["n_cross_hospital_patients"]), n) if n_hosp > 1 else 0
        cross = set(rng.choice(n, n_cross, replace=False).tolist()) if n_cross else set()
        negatives = [p for p in range(n) if p not in positive]
        # Guarantee each interictal trap phrase appears at least once among negative patients.
        forced = {p: k for k, p in enumerate(rng.permutation(negatives)[: len(INTERICTAL_REPORTS)].tolist())}

        recs: list[_ClinicalRec] = []
        for p in range(n):
            k = int(counts[p])
            kinds = []
            if p in positive:
                n_ictal = max(1, int(round(c["ictal_fraction"] * k)))
                ictal = set(rng.choice(k, n_ictal, replace=False).tolist())
                for r in range(k):
                    if r in ictal:
                        kinds.append("ictal")
                    else:
                        kinds.append("interictal" if rng.random() < c["interictal_rate_positive"] else "normal")
            else:
                kinds = ["interictal" if rng.random() < c["interictal_rate_negative"] else "normal"
                         for _ in range(k)]
            durations = _durations(rng, c["duration_s"], k)
            for r, kind in enumerate(kinds):
                hosp = int(home[p])
                if p in cross and r >= k - max(1, k // 3):
                    hosp = (hosp + 1) % n_hosp
                if kind == "ictal":
                    report = ICTAL_REPORTS[rng.integers(len(ICTAL_REPORTS))]
                    n_seiz = int(rng.integers(c["seizures_per_recording"][0], c["seizures_per_recording"][1] + 1))
                elif kind == "interictal":
                    pick = int(rng.integers(len(INTERICTAL_REPORTS)))
                    if p in forced and r == 0:
                        pick = forced[p]
                    report, n_seiz = INTERICTAL_REPORTS[pick], 0
                else:
                    if p in forced and r == 0:
                        kind, report = "interictal", INTERICTAL_REPORTS[forced[p]]
                    else:
                        report = NORMAL_REPORTS[rng.integers(len(NORMAL_REPORTS))]
                    n_seiz = 0
                recs.append(_ClinicalRec(p, r, hosp, float(c["hospital_sfreq"][hosp]), float(durations[r]),
                                         kind, report, n_seiz))
        return recs

    def _demographics(self, patient: int) -> tuple[int, str]:
        rng = self._rng(4, patient)
        lo, hi = self.cfg["age"]
        return int(rng.integers(lo, hi + 1)), str(rng.choice(["F", "M"]))

    @staticmethod
    def _subject(p: int) -> str:
        return f"P{p + 1:02d}"

    def report_text(self, rec: Recording) -> str:
        """The synthetic free-text report of one recording (kept out of ``meta`` on purpose: real reports
        carry names, so no report text ever enters a metadata table)."""
        return self._cached("_reports", lambda: {
            (self._subject(s.patient), f"r{s.index + 1:02d}"): s.report for s in self._structure()
        })[(rec.subject, rec.recording)]

    def _labels(self) -> dict[str, int]:
        """Patient label by subject id, from the keyword rules on the reports (as the real cohort's)."""
        return self._cached("_patient_labels", lambda: patient_labels(
            ((self._subject(s.patient), s.report) for s in self._structure()), POSITIVE_KEYWORDS, NEGATIVE_KEYWORDS))

    def fingerprint(self, subject_index: int) -> Fingerprint:
        """The patient's stable fingerprint, slowed by ``label_effect_size`` if its label is positive."""
        fp = super().fingerprint(subject_index)
        if self.label_effect_size > 0 and self._labels()[self._subject(subject_index)]:
            fp = slow_fingerprint(fp, self.label_effect_size, self.cfg)
        return fp

    def _recordings(self) -> list[Recording]:
        labels = self._labels()
        out = []
        for s in self._structure():
            subject = self._subject(s.patient)
            label = labels[subject]
            flags = ["ictal_discharges"] if s.n_seizures else []
            if s.kind == "interictal":
                flags.append("interictal_sharp_waves")
            meta = self._base_meta(s.sfreq, s.duration_s, "epilepsy" if label else "non_epilepsy", label, flags)
            age, sex = self._demographics(s.patient)
            meta.update(hospital=self.cfg["hospitals"][s.hospital], n_reports=1,
                        report_positive=int(report_is_positive(s.report)), n_seizures=s.n_seizures,
                        age=age, sex=sex)
            if self.label_effect_size > 0:
                meta["label_effect_size"] = self.label_effect_size
            out.append(Recording(self.name, subject, f"r{s.index + 1:02d}", partial(self._load, s), meta))
        return out

    def _spike_wave(self, rng, n: int, sfreq: float, duration_s: float, n_seizures: int) -> np.ndarray:
        """3-Hz spike-and-wave bursts: a sharp spike then a slow wave per cycle, ramped on and off."""
        c = self.cfg
        trace = np.zeros(n)
        t = np.arange(n) / sfreq
        for _ in range(n_seizures):
            dur = min(_draw(rng, c["seizure_s"]), duration_s - 2.0)
            onset = rng.uniform(1.0, max(1.0, duration_s - dur - 1.0))
            f = _draw(rng, c["spike_wave_hz"])
            amp = _draw(rng, c["spike_wave_uv"])
            for tk in np.arange(onset, onset + dur, 1.0 / f):
                tk += 0.01 * rng.standard_normal()
                ramp = min(1.0, (tk - onset) / 0.5, (onset + dur - tk) / 0.5)
                lo_i, hi_i = int((tk - 0.1) * sfreq), int((tk + 0.45) * sfreq)
                seg = slice(max(lo_i, 0), min(hi_i, n))
                tt = t[seg] - tk
                wave = -1.0 * np.exp(-tt**2 / (2 * 0.012**2)) + 0.6 * np.exp(-((tt - 0.13) ** 2) / (2 * 0.06**2))
                trace[seg] += amp * max(ramp, 0.2) * wave
        return trace

    def _sharp_waves(self, rng, lay: Layout, n: int, sfreq: float, duration_s: float):
        """Isolated focal sharp waves (what 'interictal' reports describe), one extra per event."""
        c = self.cfg
        rate = _draw(rng, c["sharp_waves_per_min"]) / 60.0
        extras = []
        t = np.arange(n) / sfreq
        focus = lay.positions[rng.integers(lay.n)]
        topo = _focal(lay.positions, focus, 0.04)
        trace = np.zeros(n)
        for _ in range(int(rng.poisson(rate * duration_s))):
            tk = rng.uniform(0.5, duration_s - 0.5)
            amp = _draw(rng, c["sharp_wave_uv"])
            tt = t - tk
            trace += amp * (-np.exp(-tt**2 / (2 * 0.02**2)) + 0.3 * np.exp(-((tt - 0.1) ** 2) / (2 * 0.05**2)))
        extras.append((topo, trace))
        return extras

    def _load(self, s: _ClinicalRec):
        lay = self._layout()
        rng = self._rng(1, s.patient, s.index)
        state = jitter_fingerprint(self.fingerprint(s.patient), rng, self.cfg)
        n = int(round(s.duration_s * s.sfreq))
        extras = []
        if s.n_seizures:
            extras.append((lay.frontal, self._spike_wave(rng, n, s.sfreq, s.duration_s, s.n_seizures)))
        if s.kind == "interictal":
            extras.extend(self._sharp_waves(rng, lay, n, s.sfreq, s.duration_s))
        data = render(rng, state, lay, s.sfreq, n, self.cfg, extras=extras,
                      line_uv=float(self.cfg["hospital_line_uv"][s.hospital]), line_freq=self.cfg["line_freq"])
        return self._raw(data, s.sfreq)


# ---------------------------------------------------------------------------------------------------------
# Motor imagery
# ---------------------------------------------------------------------------------------------------------
class SyntheticMotorImagery(_SyntheticCohort):
    """SYNTHETIC left/right-hand motor imagery, BNCI2014-001-like (9 subjects, 22 channels, 250 Hz).

    Each run holds ``n_trials_per_class`` cued trials per hand (annotations "left_hand"/"right_hand",
    ``trial_s`` long) separated by jittered rest. Sensorimotor mu and beta sources sit under C3 and C4;
    imagery of one hand desynchronises the contralateral source (left hand -> C4, right hand -> C3) by a
    subject-specific depth, with a small ipsilateral rebound. Trial labels live in the annotations; the
    recording-level label is -1. Subjects keep their spectral fingerprint (and mu frequency) across runs.
    """

    name = "synthetic_mi"
    description = "SYNTHETIC motor-imagery EEG (left/right hand, mu/beta ERD over C4/C3), 22 channels, 250 Hz"
    EVENTS = ("left_hand", "right_hand")
    DEFAULTS: dict[str, Any] = {
        "n_subjects": 9,
        "n_sessions": 2,
        "n_runs": 1,
        "n_trials_per_class": 10,
        "sfreq": 250.0,
        "channels": MI_CHANNELS,
        "lead_s": 2.0,
        "trial_s": 4.0,
        "iti_s": (1.5, 2.5),
        "mu_freq": (9.0, 12.5),
        "mu_uv": (6.0, 14.0),
        "mu_beta_freq": (18.0, 25.0),
        "mu_beta_uv": (2.0, 5.0),
        "erd_depth": (0.2, 0.45),         # fractional mu amplitude drop, contralateral (subject trait)
        "beta_erd_depth": (0.1, 0.3),
        "erd_trial_sd": 0.5,              # trial-to-trial spread of the depth (relative): some trials fail
        "ipsi_rebound": 0.1,              # small ipsilateral increase
        "motor_focus_m": 0.03,
        **SIGNAL_DEFAULTS,
        "alpha_uv": (3.0, 10.0),          # occipital alpha is weaker than mu in this layout
    }

    def _plan(self):
        c = self.cfg
        plan = []
        for s in range(int(c["n_subjects"])):
            for sess in range(int(c["n_sessions"])):
                for run in range(int(c["n_runs"])):
                    idx = sess * int(c["n_runs"]) + run
                    rng = self._rng(2, s, idx)
                    classes = np.repeat([0, 1], int(c["n_trials_per_class"]))
                    classes = classes[rng.permutation(classes.size)]
                    onsets, t = [], float(c["lead_s"])
                    for _ in classes:
                        onsets.append(t)
                        t += float(c["trial_s"]) + _draw(rng, c["iti_s"])
                    duration = float(np.ceil(t + 1.0))
                    plan.append((s, sess, run, idx, tuple(classes.tolist()), tuple(onsets), duration))
        return plan

    def _recordings(self) -> list[Recording]:
        out = []
        sfreq = float(self.cfg["sfreq"])
        for s, sess, run, idx, classes, onsets, duration in self._plan():
            meta = self._base_meta(sfreq, duration, "motor_imagery", -1)
            meta.update(session=sess + 1, run=run + 1, n_trials=len(classes))
            out.append(Recording(self.name, f"S{s + 1:02d}", f"session{sess + 1}_run{run + 1}",
                                 partial(self._load, s, idx, classes, onsets, duration), meta))
        return out

    def _load(self, s, idx, classes, onsets, duration):
        import mne

        c = self.cfg
        lay = self._layout()
        sfreq = float(c["sfreq"])
        traits = self._rng(3, s)  # subject-stable motor traits
        mu_f, mu_uv = _draw(traits, c["mu_freq"]), _draw(traits, c["mu_uv"])
        mb_f, mb_uv = _draw(traits, c["mu_beta_freq"]), _draw(traits, c["mu_beta_uv"])
        erd, berd = _draw(traits, c["erd_depth"]), _draw(traits, c["beta_erd_depth"])
        rng = self._rng(1, s, idx)
        state = jitter_fingerprint(self.fingerprint(s), rng, c)
        n = int(round(duration * sfreq))
        extras = []
        trial_s, up = float(c["trial_s"]), 1.0 + float(c["ipsi_rebound"])
        strength = np.clip(1.0 + c["erd_trial_sd"] * rng.standard_normal(len(classes)), 0.0, 2.0)
        for hemi, site in ((0, "C3"), (1, "C4")):  # C3 serves the right hand (class 1), C4 the left (class 0)
            contra = 1 - hemi
            topo = _focal(lay.positions, _landmark(site), c["motor_focus_m"])
            mu_ev = [(o, trial_s, 1.0 - min(erd * g, 0.9) if k == contra else up)
                     for o, k, g in zip(onsets, classes, strength)]
            beta_ev = [(o, trial_s, 1.0 - min(berd * g, 0.9) if k == contra else 1.0)
                       for o, k, g in zip(onsets, classes, strength)]
            mu = narrowband(rng, 1, n, sfreq, mu_f + 0.2 * rng.standard_normal(), 0.6)[0]
            beta = narrowband(rng, 1, n, sfreq, mb_f, 1.5)[0]
            extras.append((topo, mu_uv * mu * envelope(n, sfreq, mu_ev)
                           + mb_uv * beta * envelope(n, sfreq, beta_ev)))
        data = render(rng, state, lay, sfreq, n, c, extras=extras)
        annotations = mne.Annotations(list(onsets), [trial_s] * len(onsets), [self.EVENTS[k] for k in classes])
        return self._raw(data, sfreq, annotations)


# ---------------------------------------------------------------------------------------------------------
# Rest vs task
# ---------------------------------------------------------------------------------------------------------
class SyntheticRestTask(_SyntheticCohort):
    """SYNTHETIC rest vs mental-task recordings, EEGMAT-like (12 subjects, 19 channels, 250 Hz).

    Task recordings suppress alpha by a subject-specific fraction and raise frontal theta and beta; label
    0 = rest, 1 = task. Recordings alternate rest/task so each subject has both.
    """

    name = "synthetic_rest_task"
    description = "SYNTHETIC rest vs task EEG (task: alpha suppression, more theta/beta), 19 channels, 250 Hz"
    label_levels = {"label": {"0": "rest", "1": "task"}}
    DEFAULTS: dict[str, Any] = {
        "n_subjects": 12,
        "n_pairs": 2,                      # rest/task pairs per subject
        "sfreq": 250.0,
        "channels": STANDARD_1020,
        "duration_s": (25.0, 35.0),
        "alpha_suppression": (0.35, 0.6),  # fraction of alpha amplitude removed during the task
        "theta_increase": (1.3, 1.8),
        "beta_increase": (1.2, 1.5),
        **SIGNAL_DEFAULTS,
    }

    def _plan(self):
        plan = []
        for s in range(int(self.cfg["n_subjects"])):
            durations = _durations(self._rng(2, s), self.cfg["duration_s"], 2 * int(self.cfg["n_pairs"]))
            for idx, dur in enumerate(durations):
                plan.append((s, idx, idx % 2, float(dur)))
        return plan

    def _recordings(self) -> list[Recording]:
        sfreq = float(self.cfg["sfreq"])
        out = []
        for s, idx, task, dur in self._plan():
            condition = "task" if task else "rest"
            meta = self._base_meta(sfreq, dur, condition, task)
            out.append(Recording(self.name, f"S{s + 1:02d}", f"{condition}{idx // 2 + 1}",
                                 partial(self._load, s, idx, task, dur), meta))
        return out

    def _load(self, s, idx, task, dur):
        c = self.cfg
        traits = self._rng(3, s)
        supp, theta, beta = (_draw(traits, c[k]) for k in ("alpha_suppression", "theta_increase", "beta_increase"))
        rng = self._rng(1, s, idx)
        state = jitter_fingerprint(self.fingerprint(s), rng, c)
        sfreq = float(c["sfreq"])
        n = int(round(dur * sfreq))
        gains = dict(alpha_env=1.0 - supp, theta_env=theta, beta_env=beta) if task else {}
        return self._raw(render(rng, state, self._layout(), sfreq, n, c, **gains), sfreq)


__all__ = [
    "CLINICAL_CHANNELS",
    "MI_CHANNELS",
    "STANDARD_1020",
    "SyntheticClinical",
    "SyntheticMotorImagery",
    "SyntheticRestTask",
]
