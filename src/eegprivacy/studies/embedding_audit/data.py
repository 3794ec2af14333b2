"""The windows study C audits, and the role each one plays, per cohort (:class:`~.config.CohortConfig`).

Windows: the first ``windows_per_recording`` windows of every recording, labelled by their recording (eegmat:
rest / arithmetic; MSU: the subject's diagnosis), or one window from each imagery cue (eegmmidb: T1 left / T2
right), through the same preprocessing (0.5-70 Hz band-pass, clipped below Nyquist and flagged where the rate is
lower; the cohort's mains notch; average reference) at the dataset's own rate -- each encoder resamples and maps
channels itself.

Pretraining: either ``pretrain_subjects`` subjects that never enter an audit split (eegmat, MSU), or one run of
every subject while the other runs are audited (eegmmidb, ``pretrain: run``: the audit's identity linkage then
has every subject as a candidate, and the self-pretrained encoders have seen other runs of the audited subjects
-- the in-cohort pretraining a clinic would do; the random-init cells have seen nothing). Either way each
pretraining recording is cut into blocks of consecutive windows, and a seeded draw makes each block a member
block (it pretrains every neural encoder: the members of the encoder-membership attack) or a non-member block
(held out: its non-members), with a gap window dropped wherever the two meet (:func:`window_roles`). The attack
thus compares windows of the same subjects and recordings at the same times in expectation, so neither a
between-subject shift nor the drift within a recording can pass for memorisation.

Each audited window also carries its ``block`` (the rank of its recording within its subject: rest 0 /
arithmetic 1, or the run) and its identity ``part`` (0 enrolls, 1 queries, -1 neither; see
``CohortConfig.identity``).
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
    state: np.ndarray        # the cohort's task label (eegmat: 0 rest, 1 arithmetic)
    order: np.ndarray        # window index within its recording (time order)
    role: np.ndarray         # pretrain_member / pretrain_nonmember / pretrain_gap / audit
    sfreq: float
    ch_names: list[str]
    block: np.ndarray | None = None   # rank of the window's recording within its subject (time order)
    part: np.ndarray | None = None    # identity part: 0 reference, 1 query, -1 neither
    # False when the pretraining windows are other runs of the audited subjects (pretrain: run)
    pretrain_subject_disjoint: bool = True

    def __post_init__(self):
        if self.block is None:  # a recording-labelled cohort with one recording per label (eegmat)
            self.block = np.asarray(self.state)
        if self.part is None:
            self.part = np.asarray(self.state)

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


IDENTITY_GAP = 1  # windows dropped between the enrolling and the querying half of a recording (identity: halves)


def _recording_windows(dataset, config, cohort):
    """The first ``windows_per_recording`` windows of every recording, each labelled by its recording."""
    from eegprivacy.embeddings.pretrain import dataset_windows
    from eegprivacy.signal.preprocess import PreprocessConfig

    X, subj, recs, sfreq, names = dataset_windows(dataset, None, window_s=float(config.window_s),
                                                  preprocess_config=PreprocessConfig(notch_freq=cohort.notch_freq),
                                                  max_windows_per_recording=config.windows_per_recording)
    labels = {(r.subject, r.recording): int(r.meta["label"]) for r in dataset.recordings()}
    subj, recs = np.asarray(subj), np.asarray(recs)
    state = np.array([labels[(s, r)] for s, r in zip(subj, recs)])
    order = pd.Series(np.arange(len(recs))).groupby(recs).cumcount().to_numpy()
    return X, subj, recs, state, order, float(sfreq), list(names)


def _cue_windows(dataset, config, cohort):
    """One ``window_s`` window from each left/right imagery cue, broadband (the paradigm's 8-32 Hz band is for
    CSP; the encoders read 0.5-70 Hz like every other cohort), at the recording's own rate."""
    from eegprivacy.signal.epochs import LeftRightImagery
    from eegprivacy.signal.preprocess import PreprocessConfig

    trials = LeftRightImagery(preprocess=PreprocessConfig(notch_freq=cohort.notch_freq), resample=None,
                              epoch_s=float(config.window_s)).get_data(dataset)
    meta = trials.metadata
    recs = meta["recording"].astype(str).to_numpy()
    order = meta.groupby("recording").cumcount().to_numpy()
    return (trials.X, meta["subject"].astype(str).to_numpy(), recs, trials.y.astype(int), order,
            float(trials.sfreq), list(trials.channels))


def _blocks(subject, recording) -> np.ndarray:
    """Rank of each window's recording among its subject's recordings (sorted names: rest before arithmetic on
    eegmat, runs in order on eegmmidb)."""
    frame = pd.DataFrame({"s": subject, "r": recording})
    return frame.groupby("s")["r"].rank(method="dense").astype(int).to_numpy() - 1


def identity_parts(cohort, state, block, order, subject, audited) -> np.ndarray:
    """0 (enrolls), 1 (queries) or -1 (neither) per window, for ``CohortConfig.identity``; only audited windows
    get a part. ``runs``: the last audited run of a subject queries, its earlier audited runs enroll; ``halves``:
    the first half of a subject's audited windows (time order) enrolls and the second queries, with
    :data:`IDENTITY_GAP` windows dropped on each side of the middle."""
    part = np.full(len(state), -1)
    if cohort.identity == "label":
        part[audited] = state[audited]
        return part
    for s in np.unique(subject[audited]):
        idx = np.flatnonzero(audited & (subject == s))
        if cohort.identity == "runs":
            last = block[idx].max()
            part[idx] = np.where(block[idx] == last, 1, 0)
        else:
            idx = idx[np.lexsort((order[idx], block[idx]))]
            half = idx.size // 2
            part[idx[: max(0, half - IDENTITY_GAP)]] = 0
            part[idx[half + IDENTITY_GAP:]] = 1
    return part


def load_windows(dataset, config, cohort) -> AuditData:
    """Every window the audit of ``cohort`` reads, with its role, block and identity part."""
    load = _cue_windows if cohort.windows == "cues" else _recording_windows
    X, subj, recs, state, order, sfreq, names = load(dataset, config, cohort)
    block = _blocks(subj, recs)
    if cohort.pretrain == "run":
        run_of = {r.recording: int(r.meta.get("run", -1)) for r in dataset.recordings()}
        runs = np.array([run_of[r] for r in recs])
        if not (runs == cohort.pretrain_run).any():
            raise ParamsError(f"{dataset.name}: no window of run {cohort.pretrain_run} (pretrain_run) was loaded; "
                              f"runs present: {sorted(set(runs.tolist()))}")
        subject_role = np.where(runs == cohort.pretrain_run, "pretrain", "audit")
    else:
        roles = assign_roles(dataset.subjects(), config.pretrain_subjects, config.subject_seed)
        subject_role = np.array([roles[s] for s in subj])
    role = window_roles(subject_role, recs, order, seed=config.subject_seed)
    part = identity_parts(cohort, state, block, order, subj, role == "audit")
    return AuditData(X=X, subject=subj, state=state, order=order, role=role, sfreq=sfreq, ch_names=names,
                     block=block, part=part, pretrain_subject_disjoint=cohort.pretrain == "subjects")


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
