"""Study B's per-client data, in one place for the stage (all clients in one process) and for a SuperNode (one
client per machine): the dataset's trials under the study's paradigm, one subject's member/non-member split
(:func:`~eegprivacy.federated.splits.member_split`) and that client's own CSP, fitted on its members only.

A client's data is a pure function of (dataset, paradigm, split seed, test size, CSP size, its subject): the
split is seeded per subject id and the CSP sees no other subject, so a SuperNode that computes only its own
partition gets exactly the rows the stage's :class:`Federation` gives that client.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["load_trials", "client_data", "model_input_shape"]


def load_trials(name: str, spec: Mapping):
    """The dataset and its trials under the paradigm `spec` names (eegmat: rest vs arithmetic; MI: left vs
    right). `spec` holds ``paradigm``, ``epoch_s``, ``resample``, ``balance``, for motor imagery ``tmin`` (s
    from the cue) and ``band`` ([low, high] Hz), and the dataset's own ``dataset`` keyword arguments, as in
    ``params/federated_mia.yaml``."""
    from eegprivacy.data import get_dataset
    from eegprivacy.signal.epochs import LeftRightImagery, RecordingLabelParadigm
    from eegprivacy.signal.preprocess import PreprocessConfig

    dataset = get_dataset(name, **(spec.get("dataset") or {}))
    common = {"epoch_s": float(spec.get("epoch_s", 4.0)), "resample": spec.get("resample", 128.0)}
    if spec.get("paradigm", "recording_label") == "recording_label":
        if spec.get("tmin") is not None or spec.get("band") is not None:
            raise ValueError(f"{name}: tmin and band apply to left_right_imagery only (recording_label epochs "
                             "start at the recording's first sample and use the project's preprocessing)")
        paradigm = RecordingLabelParadigm(balance=bool(spec.get("balance", False)), **common)
    else:
        if spec.get("band") is not None:
            low, high = (float(v) for v in spec["band"])
            common["preprocess"] = PreprocessConfig(l_freq=low, h_freq=high)
        paradigm = LeftRightImagery(tmin=float(spec.get("tmin") or 0.0), **common)
    return dataset, paradigm.get_data(dataset)


def client_data(trials, member: np.ndarray, subject, output: str, n_components: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_members, y_members, X_nonmembers, y_nonmembers) of `subject` after its own CSP (fitted on members)."""
    from eegprivacy.signal.csp import ClientCSP

    rows = trials.metadata["subject"].to_numpy() == subject
    mem, non = rows & member, rows & ~member
    csp = ClientCSP(n_components=n_components, output=output).fit(trials.X[mem], trials.y[mem])
    return csp.transform(trials.X[mem]), trials.y[mem], csp.transform(trials.X[non]), trials.y[non]


def model_input_shape(model: str, n_components: int, epoch_s: float, resample: float) -> tuple[int, ...]:
    """What one client trial looks like to `model`, known without any data: the server needs it to draw the
    initial weights (SimpleNet: the CSP log-variances; EEGNet: the CSP signals of one resampled epoch)."""
    from eegprivacy.signal.csp import MODEL_INPUT

    if MODEL_INPUT.get(model) == "logvar":
        return (int(n_components),)
    if MODEL_INPUT.get(model) == "signals":
        return (int(n_components), int(round(float(epoch_s) * float(resample))))
    raise ValueError(f"unknown model {model!r}; known: {', '.join(MODEL_INPUT)}")
