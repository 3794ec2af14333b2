"""The windows study C audits, and the role each one plays.

Subjects: ``pretrain_subjects`` of the dataset never enter an audit split. The first half of each of their
recordings pretrains every neural encoder (the members of the encoder-membership attack), the end of it after a
gap is held out (its non-members), so the attack compares windows of the same subjects and recordings and
measures memorisation rather than a between-subject shift. Every other subject is audited.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.params import ParamsError


@dataclass
class AuditData:
    """Windows of one dataset with the metadata every split needs (subjects stay inside this process)."""

    X: np.ndarray            # (n, channels, samples), volts, at the dataset's rate
    subject: np.ndarray      # per window
    state: np.ndarray        # 0 rest, 1 arithmetic
    order: np.ndarray        # window index within its recording (time order)
    role: np.ndarray         # pretrain_member / pretrain_nonmember / pretrain_gap / audit
    sfreq: float
    ch_names: list[str]

    def select(self, role: str) -> np.ndarray:
        return np.flatnonzero(self.role == role)


def assign_roles(subjects, n_pretrain: int, seed: int) -> dict[str, str]:
    """Seeded draw of the pretraining subjects; everyone else is audited."""
    subjects = sorted(subjects)
    if len(subjects) < n_pretrain + 8:
        raise ParamsError(f"{len(subjects)} subjects leave fewer than 8 to audit after {n_pretrain} pretraining ones")
    order = np.random.default_rng(seed).permutation(len(subjects))
    return {subjects[i]: "pretrain" if rank < n_pretrain else "audit" for rank, i in enumerate(order)}


def window_roles(subject_role, recording, order, gap: int = 2) -> np.ndarray:
    """Pretraining subjects' windows: the first half of each recording pretrains the encoder (members), the last
    part after a ``gap`` of windows is held out (non-members) -- the same subjects and recordings on both sides
    (ours), so the encoder-membership attack measures memorisation rather than a between-subject shift."""
    roles = np.asarray(subject_role, dtype=object).copy()
    for rec in np.unique(recording[roles == "pretrain"]):
        idx = np.flatnonzero(recording == rec)
        half = (order[idx].max() + 1) // 2
        roles[idx] = np.where(order[idx] < half, "pretrain_member",
                              np.where(order[idx] >= half + gap, "pretrain_nonmember", "pretrain_gap"))
    return roles.astype(str)


def load_windows(dataset, config) -> AuditData:
    """The first ``config.windows_per_recording`` windows of every recording, with their roles."""
    from eegprivacy.embeddings.pretrain import dataset_windows

    roles = assign_roles(dataset.subjects(), config.pretrain_subjects, config.subject_seed)
    X, subj, recs, sfreq, names = dataset_windows(dataset, None, window_s=float(config.window_s),
                                                  max_windows_per_recording=config.windows_per_recording)
    labels = {(r.subject, r.recording): int(r.meta["label"]) for r in dataset.recordings()}
    subj, recs = np.asarray(subj), np.asarray(recs)
    state = np.array([labels[(s, r)] for s, r in zip(subj, recs)])
    order = pd.Series(np.arange(len(recs))).groupby(recs).cumcount().to_numpy()
    role = window_roles(np.array([roles[s] for s in subj]), recs, order)
    return AuditData(X=X, subject=subj, state=state, order=order, role=role,
                     sfreq=float(sfreq), ch_names=list(names))


def downsampled_waveform(X: np.ndarray, points: int) -> np.ndarray:
    """Reconstruction target: each channel average-pooled to ``points`` samples, in µV, flattened."""
    n, c, t = X.shape
    usable = (t // points) * points
    return (X[:, :, :usable].reshape(n, c, points, -1).mean(-1) * 1e6).reshape(n, -1)


def audit_targets(data: AuditData, config) -> tuple[np.ndarray, np.ndarray]:
    """What the decoders predict from an embedding, the same for every encoder: the audited windows' centred
    log-PSD (the attributes) and their downsampled waveforms (reconstruction). Computed once and shared, so the
    pickled contexts hold one copy."""
    from eegprivacy.embeddings.attributes import centered_psd

    audit = data.select("audit")
    return (centered_psd(data.X[audit], data.sfreq),
            downsampled_waveform(data.X[audit], config.reconstruction_points))
