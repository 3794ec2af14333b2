"""Typed params of stage ``embedding_audit``: section ``embedding_audit`` of ``params/embedding_audit.yaml``.

``profile`` picks one of ``profiles``: the encoder configs and the pretraining schedule (``default``: small
configs and 120 steps a CPU finishes in minutes; ``full``: the published configs and longer pretraining). Every
other key is the same under both, so a profile changes the encoders and nothing about how they are audited.
"""

from __future__ import annotations

from dataclasses import dataclass

from eegprivacy.embeddings.encoders import ENCODERS
from eegprivacy.params import Config, ParamsError, param
from eegprivacy.validation import (
    BOOLEAN,
    CLIP_NORM,
    DELTA,
    EPSILON_OR_INF,
    FRACTION_OPEN,
    POSITIVE,
    TEXT,
    InstanceOf,
    Interval,
    ListOf,
    count,
    counts,
    options,
    subset_of,
)

NEURAL = ("biot", "labram", "eegpt")  # the encoders that pretrain here (and get a random-init baseline)


def _invalid(source, key: str, value, must: str) -> ParamsError:
    return ParamsError(f"{source}: {key} = {value!r} is invalid; it must be {must}. Fix it in {source} and run "
                       "the stage again (nothing was computed or written)")


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
                raise _invalid(source, f"{prefix}max_steps.{name}", steps, str(count(1, "steps")))


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
class EmbeddingAuditConfig(Config):
    """``embedding_audit``: which encoders are audited on which windows, with how many resamples, and which
    defenses (the protocol: ``shared/spec/study-c-protocol.md``)."""

    dataset: str = param(TEXT, doc="registered dataset with rest (label 0) and task (label 1) recordings")
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
    utility_kept: float = param(Interval(0, 1, closed="right", text="a share of utility in (0, 1]"), default=0.5,
                                doc="the verdict: a defense keeps ≥ this share of the undefended utility above "
                                    "chance")

    def check(self, source, prefix: str) -> None:
        if self.profile not in self.profiles:
            raise _invalid(source, f"{prefix}profile", self.profile, f"one of {sorted(self.profiles)}")
        steps = self.active_profile.pretrain.max_steps
        for name in (e for e in self.encoders if e in NEURAL and e not in steps):
            raise _invalid(source, f"{prefix}profiles.{self.profile}.pretrain.max_steps", steps,
                           f"a mapping with the steps of every neural encoder audited (missing {name})")

    @property
    def active_profile(self) -> ProfileConfig:
        """The profile ``profile`` names."""
        return self.profiles[self.profile]
