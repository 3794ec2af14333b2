"""Typed params of stage ``embedding_audit``: section ``embedding_audit`` of ``params/embedding_audit.yaml``.

``profile`` picks one of ``profiles``: the encoder configs and the pretraining schedule (``default``: small
configs and 120 steps a CPU finishes in minutes; ``full``: the published configs and longer pretraining). Every
other key is the same under both, so a profile changes the encoders and nothing about how they are audited.

``datasets`` are the audited cohorts (one DVC stage ``embedding_audit@<cohort>`` each) and ``cohorts`` says, per
cohort, what its windows, its task, its identity reference/query parts and its pretraining data are
(:class:`CohortConfig`): everything else -- endpoints, resamples, defenses -- is the same for every cohort.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eegprivacy.embeddings.encoders.registry import ENCODERS
from eegprivacy.params import Config, ParamsError, invalid, param
from eegprivacy.validation import (
    BOOLEAN,
    CLIP_NORM,
    DELTA,
    EPSILON_OR_INF,
    FRACTION_OPEN,
    POSITIVE,
    TEXT,
    TEXTS,
    AnyOf,
    InstanceOf,
    Interval,
    ListOf,
    Options,
    count,
    counts,
    options,
    subset_of,
)

NEURAL = ("biot", "labram", "eegpt")  # the encoders that pretrain here (and get a random-init baseline)
# What an identity row links, by the cohort's reference -> query parts: never one column without this label (a
# link within one recording is far easier than one across runs or sessions).
IDENTITY_LINKS = {"halves": "within one recording",
                  "runs": "across runs, same session",
                  "label": "across recordings (task 0 -> task 1), same session"}


@dataclass(frozen=True)
class PretrainConfig(Config):
    """Masked-patch pretraining of each neural encoder on the pretraining subjects' member blocks."""

    max_steps: dict = param(InstanceOf((dict,), text="a mapping of encoder names to step counts"),
                            doc="optimiser steps per encoder: what decides the weights (deterministic)")
    budget_s: float = param(POSITIVE, doc="hard cap in seconds per encoder (a warning says when it stopped one)")
    batch_size: int = param(count(1, "windows"))
    lr: float = param(POSITIVE, doc="Adam step size")

    def check(self, source, prefix: str) -> None:
        for name, steps in self.max_steps.items():
            if not count(1).is_satisfied_by(steps):
                raise invalid(source, f"{prefix}max_steps.{name}", steps, str(count(1, "steps")))


@dataclass(frozen=True)
class ProfileConfig(Config):
    """One variant of the encoders: their constructor overrides and their pretraining schedule."""

    configs: dict = param(InstanceOf((dict,), text="a mapping of encoder names to constructor overrides"),
                          doc="encoder -> constructor overrides ({} = the published config)")
    pretrain: PretrainConfig = param(doc="pretraining schedule")


@dataclass(frozen=True)
class TemporalGapSplitConfig(Config):
    n_splits: int = param(count(2, "folds"), doc="contiguous test blocks per subject")
    gap: int = param(count(0, "windows"), doc="windows dropped on each side of a test block")


@dataclass(frozen=True)
class SubjectDisjointSplitConfig(Config):
    n_splits: int = param(count(2, "folds"), doc="folds of held-out subjects (capped at the subject count)")


@dataclass(frozen=True)
class SplitsConfig(Config):
    temporal_gap: TemporalGapSplitConfig = param(doc="within-subject split with a gap around each test block")
    subject_disjoint: SubjectDisjointSplitConfig = param(doc="held-out-subject split")


@dataclass(frozen=True)
class DPHeadConfig(Config):
    """The DP-SGD downstream head (Opacus) whose hidden layer is released."""

    epsilons: list = param(ListOf(EPSILON_OR_INF, min_items=0, text="a list of ε > 0 (.inf for no DP)"),
                           doc="target ε of each head (.inf: the non-private head)")
    delta: float = param(DELTA)
    max_grad_norm: float = param(CLIP_NORM, doc="clipping norm of one privacy unit's gradient")
    hidden: int = param(count(1, "units"), doc="width of the released hidden layer")
    epochs: int = param(count(1, "epochs"))
    batch_size: int = param(count(1, "windows"), doc="expected windows per step")
    privacy_unit: str = param(options(("subject", "window")), default="subject",
                              doc="subject: ε per subject (subject sampling and clipping); window: ε per window, "
                                  "with the subject-level group-privacy bound beside it")


@dataclass(frozen=True)
class DefensesConfig(Config):
    """The defenses applied to the released embeddings (an empty list skips that family)."""

    noise_sigmas: list = param(ListOf(POSITIVE, min_items=0, text="a list of noise scales σ > 0"),
                               doc="Gaussian noise, × per-dimension std; each with a naive and a Wiener attacker")
    pca_components: list = param(ListOf(count(1), min_items=0, text="a list of whole numbers of components ≥ 1"),
                                 doc="PCA bottleneck widths")
    dropout_rates: list = param(ListOf(FRACTION_OPEN, min_items=0,
                                       text="a list of dropout rates strictly between 0 and 1"),
                                doc="coordinate dropout rates")
    dp_head: DPHeadConfig = param(doc="the DP-SGD head")


@dataclass(frozen=True)
class CohortConfig(Config):
    """What one cohort's audit reads and asks (``embedding_audit.cohorts.<dataset>``).

    The task (label 1 vs 0) is the deployment task, the head-membership target and the utility every defense is
    judged by; the identity parts say which windows enroll a subject and which query it; the pretraining design
    says which windows pretrain the encoders (the encoder-membership members and their interleaved non-members).
    """

    task: str = param(TEXT, doc="name of the label-1-vs-0 task (a row's endpoint when it is a subject-level label)")
    task_text: str = param(TEXT, doc="the task in words, for reports")
    windows: str = param(options(("recordings", "cues")), default="recordings",
                         doc="recordings: the first windows_per_recording windows of every recording, labelled by "
                             "the recording; cues: one window from each left/right imagery cue (eegmmidb T1/T2)")
    identity: str = param(options(("label", "halves", "runs")), default="label",
                          doc="BPID@1 reference -> query: label (label-0 windows enroll, label-1 windows query), "
                              "halves (first half of each subject's windows enrolls, second half queries, "
                              "1 gap window), runs (the earlier audited runs enroll, the last one queries)")
    temporal: str = param(options(("contiguous", "runs")), default="contiguous",
                          doc="the within-subject split of the attribute endpoint: contiguous blocks in time "
                              "(splits.temporal_gap) or one audited run per test block (leave one run out)")
    pretrain: str = param(options(("subjects", "run")), default="subjects",
                          doc="subjects: pretrain_subjects held-out subjects pretrain the encoders; run: run "
                              "pretrain_run of every subject does, the other runs are audited")
    pretrain_run: int | None = param(AnyOf((Options((None,)), count(1, "run")), text="a run number or null"),
                                     default=None, doc="the run that pretrains (pretrain: run)")
    subject_level_task: bool = param(BOOLEAN, default=False,
                                     doc="the task label is constant within a subject (a diagnosis): also audit "
                                         "it as a subject-level attribute with a subject-label permutation null")
    notch_freq: float = param(POSITIVE, default=50.0, doc="mains notch in Hz (50 Europe, 60 USA)")
    dataset: dict = param(InstanceOf((dict,), text="a mapping of the dataset's arguments"), default={},
                          doc="keyword arguments of the registered dataset (e.g. eegmmidb's runs)")

    def check(self, source, prefix: str) -> None:
        if self.pretrain == "run" and self.pretrain_run is None:
            raise invalid(source, f"{prefix}pretrain_run", None, "a run number when pretrain is 'run'")
        if self.windows == "cues" and self.pretrain == "subjects" and self.identity == "label":
            raise invalid(source, f"{prefix}identity", self.identity,
                           "halves or runs for cued windows (both labels occur in every run)")

    def describe(self) -> dict:
        """The cohort's design in words and flags, for the report and the run params."""
        identity = {"label": "reference = each subject's label-0 windows, queries = its label-1 windows",
                    "halves": "reference = first half of each subject's windows, queries = the second half "
                              "(1 gap window between)",
                    "runs": "reference = the earlier audited runs, queries = the last audited run"}[self.identity]
        return {"task": self.task, "task_text": self.task_text, "identity": self.identity,
                "identity_text": identity, "identity_link": IDENTITY_LINKS[self.identity],
                "temporal": self.temporal, "pretrain": self.pretrain,
                "pretrain_run": self.pretrain_run, "subject_level_task": self.subject_level_task,
                "windows": self.windows, "notch_freq": self.notch_freq}


@dataclass(frozen=True)
class EmbeddingAuditConfig(Config):
    """``embedding_audit``: which encoders are audited on which windows, with how many resamples, and which
    defenses (the protocol: ``shared/spec/study-c-protocol.md``)."""

    datasets: list = param(TEXTS, doc="the audited cohorts (each needs an entry in cohorts)")
    cohorts: dict[str, CohortConfig] = param(doc="per cohort: windows, task, identity parts, pretraining design")
    profile: str = param(TEXT, doc="a key of profiles")
    window_s: float = param(POSITIVE, doc="window length in seconds, the same for every encoder")
    windows_per_recording: int = param(count(6, "windows"), doc="the first non-overlapping windows of each "
                                                                "recording")
    pretrain_subjects: int = param(count(2, "subjects"), doc="held out of every audit split for pretraining")
    subject_seed: int = param(count(0), doc="which subjects pretrain, their member blocks, and (with each seed) "
                                            "the head halves")
    encoders: list = param(subset_of(ENCODERS, "encoders"))
    splits: SplitsConfig = param(doc="the two splits of the attribute endpoint")
    bootstrap: int = param(count(1000, "resamples"), doc="subject-level resamples for every CI")
    permutations: int = param(count(1, "permutations"), doc="for the p-values of the undefended leakage")
    defense_permutations: int = param(count(0, "permutations"), doc="for the defense rows' p-values")
    bridge_permutations: int = param(count(0, "permutations"), doc="for the bridge rows' p-values")
    lira_shadows: int = param(count(0, "shadow heads"), doc="LiRA shadows against the head (0: loss threshold only)")
    reconstruction_points: int = param(count(1, "points"), doc="samples per channel of the reconstruction target")
    deployment_sigma: float = param(POSITIVE, doc="noise of the deployment check, × per-dimension std")
    utility_threshold: float = param(Interval(0, 1, closed="neither",
                                              text="a balanced accuracy strictly between 0 and 1"),
                                     doc="the absolute rule (closes_channel_absolute): balanced accuracy ≥ this")
    defense_seeds: list = param(counts(0, "seeds"), doc="noise draws of the randomised defenses, and the member-half "
                                                        "draws of the head-membership attacks and AEDS")
    defenses: DefensesConfig = param(doc="noise, PCA, dropout and the DP-SGD head")
    profiles: dict[str, ProfileConfig] = param(doc="encoder variants, by name")
    random_init_baseline: bool = param(BOOLEAN, default=False,
                                       doc="also audit each neural encoder at its seeded random initialisation")
    published_weights: dict = param(
        InstanceOf((dict,), text="a mapping of encoder names to {path: <file>, sha256: <64 hex digits or null>}"),
        default={},
        doc="encoder -> {path, sha256} of the authors' published checkpoint (sources, sha256 and layouts: the "
            "published-weights README of the data mirror; the README's Study C section): that "
            "encoder is then audited with weights 'published' as its primary cell, built with the published config "
            "whatever the profile says (its random-init baseline too); sha256 is checked, and only a pinned sha256 "
            "lets a file that weights_only=True refuses be unpickled")
    utility_kept: float = param(Interval(0, 1, closed="right", text="a share of utility in (0, 1]"), default=0.5,
                                doc="the verdict: a defense keeps ≥ this share of the undefended utility above "
                                    "chance")
    subject_label_permutations: int = param(
        count(999, "permutations"), default=1000,
        doc="refits of the subject-level label's permuted-label null (MSU: the diagnosis); ≥ 999 so that a "
            "permutation p-value can pass Holm over the cohort's encoder cells (50 put the floor at 1/51)")
    window_label_permutations: int = param(
        count(999, "permutations"), default=1000,
        doc="refits of the recording label's permuted-label null (eegmat: rest vs arithmetic; the labels permuted "
            "among each subject's recordings); ≥ 999 for Holm over the encoder cells and for the 2.5 % quantiles "
            "its interval reads")
    test_permutations: int = param(
        count(999, "permutations"), default=9999,
        doc="draws of the cheap exact-null tests that decide a claim: identity (reference labels permuted), "
            "pretraining adds identity and encoder membership (sign flips over subjects against random init); "
            "enumerated exactly where the arrangements are fewer")

    def check(self, source, prefix: str) -> None:
        for name in (d for d in self.datasets if d not in self.cohorts):
            raise invalid(source, f"{prefix}cohorts", sorted(self.cohorts), f"a mapping with an entry for {name}")
        if self.profile not in self.profiles:
            raise invalid(source, f"{prefix}profile", self.profile, f"one of {sorted(self.profiles)}")
        steps = self.active_profile.pretrain.max_steps
        for name in (e for e in self.encoders if e in NEURAL and e not in steps):
            raise invalid(source, f"{prefix}profiles.{self.profile}.pretrain.max_steps", steps,
                           f"a mapping with the steps of every neural encoder audited (missing {name})")
        for name, entry in self.published_weights.items():
            key = f"{prefix}published_weights.{name}"
            if name not in NEURAL or name not in self.encoders:
                raise invalid(source, key, entry, f"under a neural encoder that is audited (one of "
                                                   f"{[e for e in self.encoders if e in NEURAL]})")
            sha = entry.get("sha256") if isinstance(entry, dict) else None
            if (not isinstance(entry, dict) or set(entry) - {"path", "sha256"} or not isinstance(entry.get("path"), str)
                    or not entry["path"] or not (sha is None or re.fullmatch(r"[0-9a-fA-F]{64}", str(sha)))):
                raise invalid(source, key, entry, "a mapping {path: <the published file>, sha256: <its 64 hex "
                                                   "digits, or null>}")

    def cohort(self, name: str, source="params") -> CohortConfig:
        """The design of cohort ``name``; an error naming the key when the params have none."""
        if name not in self.cohorts:
            raise ParamsError(f"{source}: embedding_audit.cohorts has no entry for {name!r} (audited cohorts: "
                              f"{', '.join(sorted(self.cohorts))}); add one and run the stage again")
        return self.cohorts[name]

    @property
    def active_profile(self) -> ProfileConfig:
        """The profile ``profile`` names."""
        return self.profiles[self.profile]
