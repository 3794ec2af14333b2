"""Label DP for study A: randomized response on each patient's binary diagnosis, and its composition with the
feature release.

The feature mechanisms (:mod:`eegprivacy.privacy.mechanisms`) noise the feature columns only; a label column
released beside them in the clear carries no guarantee, so the row (features, label) as a whole has none either.
:class:`RandomizedResponse` closes that channel: each patient's label is kept with probability e^ε/(1 + e^ε)
and flipped otherwise, which is ε-DP for that patient's label (Warner 1965; Dwork & Roth 2014, §3.2), and
:func:`compose_with_labels` states the guarantee of the two releases together.

As with the feature mechanisms, the object is only its privacy parameter: ``calibrate()`` gives the flip
probability (loggable before any label is drawn), ``release(y, random_state)`` draws the flips.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from eegprivacy.privacy.accounting import basic_composition
from eegprivacy.validation import EPSILON_OR_INF, check

# Integer seeds are mixed with this tag (as release.py does for feature noise, with another tag) so that the
# flips never share a stream with the feature noise of the same seed: composition assumes independent coins.
_LABEL_STREAM_TAG = 0x4C41424C
LABELS_IN_CLEAR_NOTE = ("labels are released in the clear: the feature mechanism's ε covers the feature columns "
                        "only, so a released (features, label) row carries no DP guarantee")


@dataclass(frozen=True)
class LabelCalibration:
    """Randomized response at one ε: the flip probability and the scope of its guarantee."""

    epsilon: float
    flip_probability: float  # 1 / (1 + e^ε); 0 at ε = ∞
    formal_guarantee: bool
    note: str
    mechanism: str

    @property
    def keep_probability(self) -> float:
        return 1.0 - self.flip_probability

    def to_dict(self) -> dict:
        """Flat params for MLflow, prefixed ``label_`` so they never collide with the feature mechanism's."""
        return {f"label_{k}": v for k, v in asdict(self).items()}


def _label_generator(random_state) -> np.random.Generator:
    """A Generator is used as given; an int (or None) seeds a stream kept apart from ``default_rng(int)`` and
    from the feature noise stream of the same int."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    return np.random.default_rng([_LABEL_STREAM_TAG, int(random_state)])


def _binary_labels(y, name: str = "y") -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per patient), got shape {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1 (1 = positive class)")
    return y.astype(np.int64)


@dataclass(frozen=True)
class RandomizedResponse:
    """Binary randomized response: keep each label with probability e^ε/(1 + e^ε), flip it otherwise.

    For any two values of one patient's label the output probabilities differ by at most e^ε, so the label
    release is ε-DP per patient under replace-one adjacency (one patient = one row). ``epsilon = inf`` keeps
    every label (no label DP: the labels travel in the clear). Apply it to the patient-level labels, one per
    patient, once: flipping per window would spend ε per window and split a patient's label.
    """

    epsilon: float
    name: ClassVar[str] = "randomized_response"

    def __post_init__(self) -> None:
        check(self.epsilon, EPSILON_OR_INF, "label epsilon")
        object.__setattr__(self, "epsilon", float(self.epsilon))

    @property
    def flip_probability(self) -> float:
        """1/(1 + e^ε), written as e^-ε/(1 + e^-ε) so that a large ε (or ∞) gives 0 instead of overflowing."""
        tail = math.exp(-self.epsilon)
        return tail / (1.0 + tail)

    def calibrate(self) -> LabelCalibration:
        """The flip probability and what it guarantees; no label is drawn."""
        if math.isinf(self.epsilon):
            return LabelCalibration(self.epsilon, 0.0, False, LABELS_IN_CLEAR_NOTE, self.name)
        return LabelCalibration(
            self.epsilon, self.flip_probability, True,
            f"randomized response: each patient's label flipped with probability {self.flip_probability:.4g}, "
            "ε-DP for the label column per patient (replace-one adjacency)", self.name)

    def release(self, y, random_state=None) -> np.ndarray:
        """Released labels (0/1 ints): each flipped independently with ``flip_probability``.

        ``random_state``: a numpy Generator (used as given) or an int seed. One uniform is drawn per label
        whatever ε is, so with the same seed the flips at a larger ε are a subset of those at a smaller ε
        (a monotone coupling across an ε sweep) and ε = ∞ flips nothing.
        """
        y = _binary_labels(y)
        uniforms = _label_generator(random_state).random(y.size)
        return np.where(uniforms < self.flip_probability, 1 - y, y)

    __call__ = release

    def estimate_positive_rate(self, y_released) -> float:
        """Unbiased estimate of the true positive rate from released labels: (mean − p)/(1 − 2p), p the flip
        probability (E[mean] = π(1 − 2p) + p). It may fall outside [0, 1] at small ε and is not clipped, so
        that averages over seeds stay unbiased."""
        y_released = _binary_labels(y_released, "y_released")
        if y_released.size == 0:
            raise ValueError("y_released is empty")
        p = self.flip_probability
        return float((y_released.mean() - p) / (1.0 - 2.0 * p))

    def to_dict(self) -> dict:
        """MLflow params / tags for the label release."""
        return {"label_mechanism": self.name, "label_epsilon": self.epsilon}


@dataclass(frozen=True)
class LabelledReleaseGuarantee:
    """The guarantee of a feature release and a label release on the same patients, taken together."""

    epsilon: float  # ∞: no guarantee for the released rows (labels in the clear, or un-noised features)
    delta: float
    feature_epsilon: float
    feature_delta: float
    label_epsilon: float
    eps_unit: str
    accounting: str
    formal_guarantee: bool
    note: str

    def to_dict(self) -> dict:
        return asdict(self)


def compose_with_labels(feature_epsilon: float, feature_delta: float, label_epsilon: float
                        ) -> LabelledReleaseGuarantee:
    """(ε, δ) of releasing each patient's features at (ε_f, δ_f) and its label by randomized response at ε_l.

    Both mechanisms read the same patients with independent randomness, so basic sequential composition
    (:func:`~eegprivacy.privacy.accounting.basic_composition`) gives ε = ε_f + ε_l, δ = δ_f for a whole
    patient row (``eps_unit`` "subject": one patient = one row). ``feature_epsilon`` is the feature release's
    own total (including any DP scaling statistics it paid for) and inherits its conditions (e.g. fixed
    private scaling). The features' ε alone covers only the feature columns: with ``label_epsilon = inf``
    (labels in the clear) the rows carry no guarantee and ε is reported as ∞, as it is for un-noised features.
    """
    feature_epsilon = float(check(feature_epsilon, EPSILON_OR_INF, "feature epsilon"))
    label_epsilon = float(check(label_epsilon, EPSILON_OR_INF, "label epsilon"))
    feature_delta = float(feature_delta)
    if not 0.0 <= feature_delta < 1.0:
        raise ValueError(f"feature delta must lie in [0, 1), got {feature_delta}")
    common = dict(feature_epsilon=feature_epsilon, feature_delta=feature_delta, label_epsilon=label_epsilon,
                  eps_unit="subject", accounting="cumulative")
    if math.isinf(label_epsilon) or math.isinf(feature_epsilon):
        what = LABELS_IN_CLEAR_NOTE if math.isinf(label_epsilon) else "features released without noise"
        return LabelledReleaseGuarantee(math.inf, feature_delta, **common, formal_guarantee=False,
                                        note=f"no guarantee: {what}")
    epsilon, delta = basic_composition((feature_epsilon, feature_delta), label_epsilon)
    return LabelledReleaseGuarantee(
        epsilon, delta, **common, formal_guarantee=True,
        note=(f"basic composition per patient: features (ε = {feature_epsilon:g}, δ = {feature_delta:g}) + "
              f"label randomized response (ε = {label_epsilon:g}); the features' ε alone covers only the "
              "feature columns"))
