"""The windows study C audits, and the role each one plays.

Subjects: ``pretrain_subjects`` of the dataset never enter an audit split. Each of their recordings is cut into
blocks of consecutive windows, and a seeded draw makes each block a member block (it pretrains every neural
encoder: the members of the encoder-membership attack) or a non-member block (held out: its non-members), with a
gap window dropped wherever the two meet (:func:`window_roles`). The attack thus compares windows of the same
subjects and recordings at the same times in expectation, so neither a between-subject shift nor the drift within
a recording can pass for memorisation. Every other subject is audited.
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


MEMBERSHIP_BLOCK = 4  # windows per member / non-member block of a pretraining recording (ours)
MEMBERSHIP_GAP = 1    # windows dropped where a member and a non-member block meet (ours; >= 1 window = 4 s)


def window_roles(subject_role, recording, order, gap: int = MEMBERSHIP_GAP, block: int = MEMBERSHIP_BLOCK,
                 seed: int = 0) -> np.ndarray:
    """Roles of the pretraining subjects' windows: interleaved member / non-member blocks within each recording.

    **(ours)** Each pretraining recording, in time order, is cut into blocks of ``block`` windows; a seeded
    permutation makes half of its blocks member blocks (``pretrain_member``, they pretrain the encoder) and the
    other half non-member blocks (``pretrain_nonmember``; an odd block goes to either side by the same draw).
    Wherever the label changes from one block to the next, the first ``gap`` windows of the later block become
    ``pretrain_gap`` and are dropped, so a member and a non-member window are never adjacent. Member and non-member
    windows then come from the same subjects, recordings and -- across recordings -- the same times, so slow drift
    within a recording no longer separates them (the old first-half / second-half split confounded the two).
    Recordings are visited in sorted order from one ``numpy`` generator seeded by ``seed``.
    """
    if int(block) < 1 or int(gap) < 1:
        raise ValueError(f"block and gap must be >= 1 window, got block={block}, gap={gap}")
    roles = np.asarray(subject_role, dtype=object).copy()
    recording, order = np.asarray(recording), np.asarray(order)
    rng = np.random.default_rng(seed)
    for rec in np.unique(recording[roles == "pretrain"]):
        idx = np.flatnonzero(recording == rec)
        idx = idx[np.argsort(order[idx], kind="stable")]
        n_blocks = max(2, -(-idx.size // int(block)))
        member = (rng.permutation(n_blocks) % 2 == 0) ^ bool(rng.integers(2))
        of_block = np.minimum(np.arange(idx.size) // int(block), n_blocks - 1)
        label = np.where(member[of_block], "pretrain_member", "pretrain_nonmember").astype(object)
        starts = np.flatnonzero(np.r_[False, member[1:] != member[:-1]])  # blocks whose label differs from the last
        for b in starts:
            first = np.flatnonzero(of_block == b)[: int(gap)]
            label[first] = "pretrain_gap"
        roles[idx] = label
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
    role = window_roles(np.array([roles[s] for s in subj]), recs, order, seed=config.subject_seed)
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
