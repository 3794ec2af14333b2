"""Typed params of study B's core stages: ``federated_mia`` (params/federated_mia.yaml, also read by
federated_accounting, federated_lira, optuna_study_b and csp_exploration) and ``optuna_study_b``
(params/optuna.yaml).

ε here is per mechanism application (one local optimiser step on one batch gradient), not a cumulative
guarantee; ``.inf`` in ``federated_mia.epsilons`` is the no-DP baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from eegprivacy.attacks.membership import ATTACKERS
from eegprivacy.params import Config, ParamsError, invalid, param
from eegprivacy.validation import (
    BOOLEAN,
    CLIP_NORM,
    EPSILONS_OR_INF,
    FRACTION_OPEN,
    NON_NEGATIVE,
    POSITIVE,
    TEXT,
    AnyOf,
    InstanceOf,
    Interval,
    Options,
    Range,
    count,
    counts,
    options,
    subset_of,
)

MODELS = ("simplenet", "eegnet")
WHOLE_NUMBER = Interval(None, None, integral=True, text="a whole number")


def _or_unset(constraint):
    """``constraint``, or None: the key is not in the params file and the loader's default applies."""
    return AnyOf((Options((None,)), constraint), text=str(constraint))


@dataclass(frozen=True)
class DatasetSpec(Config):
    """How one cohort becomes trials (:func:`eegprivacy.federated.cohort.load_trials`). A key the file leaves out
    stays None (the loader's default) and out of :meth:`as_mapping`, so the ``paradigm`` text that cell keys,
    tidy rows and MLflow record is the file's own spelling."""

    paradigm: str | None = param(_or_unset(options(("recording_label", "left_right_imagery"))), default=None,
                                 doc="recording_label (eegmat: rest vs arithmetic) or left_right_imagery (MI)")
    balance: bool | None = param(_or_unset(BOOLEAN), default=None,
                                 doc="as many epochs of each label per subject (recording_label only)")
    epoch_s: float | None = param(_or_unset(POSITIVE), default=None, doc="epoch length in seconds (default 4)")
    resample: float | None = param(_or_unset(POSITIVE), default=None, doc="sampling rate in Hz (default 128)")
    tmin: float | None = param(_or_unset(NON_NEGATIVE), default=None,
                               doc="seconds from the cue to the epoch's start (left_right_imagery only; default 0)")
    band: list | None = param(_or_unset(Range(text="a [low, high] band-pass in Hz with 0 < low < high")),
                              default=None, doc="band-pass in Hz (left_right_imagery default [8, 32])")
    dataset: dict | None = param(_or_unset(InstanceOf((dict,), text="a mapping of the dataset's arguments")),
                                 default=None, doc="keyword arguments of the registered dataset")

    def as_mapping(self) -> dict:
        """The keys the params file set, as it set them (what ``load_trials`` reads)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def paradigm_text(self) -> str:
        """The spec as cell configs and MLflow params record it (``repr`` of its sorted items)."""
        return repr(sorted(self.as_mapping().items()))


ATTACK_ROUNDS = AnyOf((options(("all",)), counts(1, "rounds")), text="'all' or a non-empty list of rounds ≥ 1")
PROTOCOL_KEYS = ("seeds", "num_rounds", "local_epochs", "attack_rounds", "epsilons")


@dataclass(frozen=True)
class ProtocolOverride(Config):
    """One dataset's departures from the grid's protocol (``federated_mia.per_dataset.<name>``); a key left out
    keeps the grid's value. Lets the primary cohort run the paper's protocol while a second one runs lighter."""

    seeds: int | None = param(_or_unset(count(1, "seeds")), default=None)
    num_rounds: int | None = param(_or_unset(count(1, "rounds")), default=None)
    local_epochs: int | None = param(_or_unset(count(1, "epochs")), default=None)
    attack_rounds: list | str | None = param(_or_unset(ATTACK_ROUNDS), default=None)
    epsilons: list | None = param(_or_unset(EPSILONS_OR_INF), default=None, doc="per-step ε grid")

    def changes(self) -> dict:
        return {key: getattr(self, key) for key in PROTOCOL_KEYS if getattr(self, key) is not None}


@dataclass(frozen=True)
class FederatedMIAConfig(Config):
    """``federated_mia``: the per-subject federation (one client per subject, per-client CSP) with per-step
    Laplace gradient DP, and the membership attacks run on it."""

    datasets: dict[str, DatasetSpec] = param(doc="the cohorts, by registered dataset name")
    models: list = param(subset_of(MODELS, "models"), doc="simplenet and/or eegnet")
    epsilons: list = param(EPSILONS_OR_INF, doc="per-step ε of the Laplace gradient DP (.inf: no DP)")
    clip_norm: float = param(CLIP_NORM, doc="per-step gradient clipping norm C")
    seeds: int = param(count(1, "seeds"), doc="seeds 0..n-1: split, init, client sampling, training, noise")
    test_size: float = param(FRACTION_OPEN, doc="share of each subject's trials held out as non-members")
    split_seed: int = param(WHOLE_NUMBER, doc="base of every seed's member split")
    csp_components: int = param(count(1, "components"), doc="CSP components per client")
    clients_per_round: int = param(count(1, "clients"), doc="clients FedAvg samples per round")
    num_rounds: int = param(count(1, "rounds"))
    local_epochs: int = param(count(1, "epochs"))
    learning_rate: float = param(POSITIVE, doc="clients' optimiser step size")
    batch_size: int = param(count(1, "trials"))
    attackers: list = param(subset_of(ATTACKERS, "attackers"), doc="attack classifiers (lr, rf, mlp)")
    rf_estimators: int = param(count(1, "trees"), doc="trees of the random-forest attacker")
    attack_test_size: float = param(FRACTION_OPEN, doc="attacker-test share of the attack data")
    cla_components: int = param(count(1, "components"), doc="PCA components of the client-level attack")
    subject_bootstrap: int = param(count(1, "resamples"), default=200,
                                   doc="B: client (subject) resamples of the cluster bootstrap every cell's "
                                       "replicates are computed on (intervals over subjects+seeds)")
    batchnorm_stats: str = param(options(("local", "shared"), "local or shared"), default="local",
                                 doc="EEGNet's BatchNorm running statistics: local (FedBN: each client keeps its "
                                     "own, never sent; the server averages trainable parameters only) or shared "
                                     "(sent un-noised with the weights: no DP guarantee at any ε)")
    attack_rounds: list | str = param(ATTACK_ROUNDS, default="all",
                                      doc="rounds after which RLA, FLA and GLA run ('all' or a list)")
    per_dataset: dict[str, ProtocolOverride] = param(default={},
                                                     doc="per dataset: seeds, num_rounds, local_epochs, "
                                                         "attack_rounds replacing the grid's")

    def check(self, source, prefix: str) -> None:
        rounds = self.attack_rounds
        if rounds != "all" and any(r > self.num_rounds for r in rounds):
            raise invalid(source, f"{prefix}attack_rounds", rounds,
                          f"'all' or a non-empty list of rounds in 1..num_rounds ({self.num_rounds})")
        unknown = sorted(set(self.per_dataset) - set(self.datasets))
        if unknown:
            raise ParamsError(f"{source}: {prefix}per_dataset.{unknown[0]} names no dataset of {prefix}datasets "
                              f"({', '.join(self.datasets)}). Fix it in {source} (nothing was computed or written)")
        for name in self.per_dataset:
            self.for_dataset(name, source, prefix)

    def for_dataset(self, name: str, source="params", prefix: str = "federated_mia.") -> FederatedMIAConfig:
        """The grid as dataset ``name`` runs it: its ``per_dataset`` overrides applied (and checked), no others.
        Every consumer of one dataset's protocol (the sweep, accounting, LiRA, the transfer check) reads this."""
        override = self.per_dataset.get(name)
        if override is None or not override.changes():
            return self
        changed = {f.name: getattr(self, f.name) for f in fields(self)}
        changed.update(override.changes(), per_dataset={})
        try:
            return type(self).from_mapping(changed, source, f"{prefix}per_dataset.{name}.")
        except ParamsError as err:
            raise ParamsError(f"{err} (with the overrides of {prefix}per_dataset.{name})") from None

    def attacked(self, rnd: int) -> bool:
        """Whether the per-round attacks (RLA, FLA, GLA) run after round ``rnd``."""
        return self.attack_rounds == "all" or int(rnd) in self.attack_rounds

    def dataset_spec(self, name: str, source="params") -> DatasetSpec:
        """The spec of dataset ``name``; an error naming the file when the params have none."""
        if name not in self.datasets:
            raise ParamsError(f"{source}: federated_mia.datasets has no entry for {name!r}")
        return self.datasets[name]


@dataclass(frozen=True)
class StudyBSearchSpace(Config):
    """What optuna_study_b's sampler may choose."""

    mechanisms: list = param(subset_of(("laplace_gradient", "none"), "mechanisms"),
                             doc="laplace_gradient and/or none (no DP: the non-private end of the front)")
    epsilon: list = param(Range(text="a [low, high] range of per-step ε with 0 < low < high"), doc="log-uniform")
    clip_norm: list = param(Range(text="a [low, high] range of C with 0 < low < high"), doc="log-uniform")
    local_epochs: list = param(Range(integral=True, text="a [low, high] range of whole epochs with 1 ≤ low < high"),
                               doc="integer, uniform")


@dataclass(frozen=True)
class OptunaStudyBConfig(Config):
    """``optuna_study_b``: the multi-objective search over the DP federation (every knob not searched, and the
    dataset's spec, come from ``federated_mia``)."""

    dataset: str = param(TEXT, doc="a key of federated_mia.datasets")
    model: str = param(options(MODELS, "simplenet or eegnet"))
    num_rounds: int = param(count(1, "rounds"))
    search_space: StudyBSearchSpace = param(doc="the knobs searched")
    noise_seeds: int = param(count(1, "seeds"), doc="every trial's objectives are means over these seeds")
    n_jobs: int = param(count(1, "processes"), doc="processes over a trial's seeds")
    n_trials: int = param(count(1, "trials"), doc="target number of complete trials")
    sampler: str = param(options(("tpe", "nsga2"), "tpe or nsga2"))
    population_size: int = param(count(1, "trials"), doc="NSGA-II population (nsga2 only)")
    seed: int = param(WHOLE_NUMBER, doc="sampler seed")
    storage: str = param(TEXT, doc="SQLAlchemy URL of the study database")
    heartbeat_interval: int = param(count(1, "seconds"))
