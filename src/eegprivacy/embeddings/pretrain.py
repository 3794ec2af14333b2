"""Short self-supervised pretraining of a frozen encoder (protocol, "Encoders", weights option 2 -- ours).

No official checkpoint can be downloaded here, so the second-preferred weights are a short pretraining this repo
runs itself, on windows of subjects disjoint from every audit split (checked: :func:`pretrain` refuses any overlap
with ``audit_subjects``).

Objective: **masked-patch reconstruction through the pooled embedding** -- the one objective that works the same
way for every encoder, because it only touches the encoder's output ``z``: random time patches of the (mapped,
resampled, scaled) window are zeroed, the encoder embeds the masked window, and a small MLP decoder predicts the
per-channel, per-window z-scored waveform at ``target_points`` time points; the loss is the MSE over the masked
points. The target is deliberately the *waveform*, not band powers: a spectral target would train the encoder to
encode exactly the attribute study C audits and make "attribute leakage" true by construction.

The :class:`PretrainRecord` holds what the protocol asks for: steps, the data (window count, subject count, the
subjects only as keyed hashes -- never raw ids -- and a hash of the window bytes), the loss curve, and the
checkpoint's path and sha256.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from eegprivacy.embeddings.encoders.bandpower import BandPowerEncoder
from eegprivacy.embeddings.encoders.base import FrozenEncoder
from eegprivacy.embeddings.encoders.checkpoints import save_checkpoint

log = logging.getLogger(__name__)

DEFAULT_BUDGET_S = 300.0
_SUBJECT_KEY = b"eegprivacy/study-c/pretrain-subject/v1/"


def subject_hash(subject: str) -> str:
    """Keyed, truncated hash of a subject id: lets two records be checked for overlap without naming anyone."""
    return hashlib.sha256(_SUBJECT_KEY + str(subject).encode()).hexdigest()[:16]


@dataclass
class PretrainRecord:
    encoder: str
    objective: str
    config: dict[str, Any]
    steps: int
    wall_s: float
    budget_s: float
    n_windows: int
    n_subjects: int
    subject_hashes: list[str]
    data_sha256: str
    losses: list[float]
    param_change: float            # relative L2 change of the encoder weights
    checkpoint_path: str
    checkpoint_sha256: str
    n_audit_subjects_excluded: int
    encoder_description: dict[str, Any] = field(default_factory=dict)
    # The masked-patch decoder head, kept in memory (not serialised) so the encoder-membership endpoint can score
    # the pretraining loss of any window (:func:`masked_losses`).
    decoder: Any = field(default=None, repr=False, compare=False)

    @property
    def loss_first(self) -> float:
        return float(np.mean(self.losses[: max(1, len(self.losses) // 10)]))

    @property
    def loss_last(self) -> float:
        return float(np.mean(self.losses[-max(1, len(self.losses) // 10):]))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("decoder", None)
        out.update(loss_first=self.loss_first, loss_last=self.loss_last)
        return out

    def write_json(self, path: str | Path) -> Path:
        from eegprivacy.atomic import write_text_atomic

        return write_text_atomic(path, json.dumps(self.to_dict(), indent=1, default=str))


def _mask_and_target(x, patch_len: int, mask_ratio: float, target_points: int, gen):
    """Zero ``mask_ratio`` of the time patches (same patches on every channel of a window); the target is the
    per-channel z-scored clean window, average-pooled to ``target_points``; ``weight`` is each target point's
    masked fraction."""
    import torch
    import torch.nn.functional as F

    n, c, t = x.shape
    n_patches = max(1, t // patch_len)
    n_masked = max(1, int(round(mask_ratio * n_patches)))
    scores = torch.rand(n, n_patches, generator=gen)
    masked = torch.zeros(n, n_patches)
    masked.scatter_(1, scores.argsort(dim=1)[:, :n_masked], 1.0)
    mask_t = masked.repeat_interleave(patch_len, dim=1)
    if mask_t.shape[1] < t:
        mask_t = F.pad(mask_t, (0, t - mask_t.shape[1]))
    x_masked = x * (1.0 - mask_t[:, None, :])
    std = x.std(dim=-1, keepdim=True)
    z = (x - x.mean(dim=-1, keepdim=True)) / torch.where(std > 0, std, torch.ones_like(std))
    target = F.adaptive_avg_pool1d(z, target_points)
    weight = F.adaptive_avg_pool1d(mask_t[:, None, :], target_points)[:, 0]  # (n, P)
    return x_masked, target, weight


def _init_decoder(encoder: FrozenEncoder, windows: np.ndarray, hidden: int, target_points: int):
    """The masked-patch decoder head at initialisation, drawn from torch's global generator (seed it first): the
    same call in :func:`pretrain` and :func:`untrained_masked_losses` gives the same head."""
    import torch
    from torch import nn

    with torch.no_grad():
        probe = encoder.trainable_forward(encoder.prepare(windows[:1]))
    n_out_ch = encoder.prepare(windows[:1]).shape[1]
    return nn.Sequential(nn.Linear(probe.shape[1], hidden), nn.GELU(), nn.Linear(hidden, n_out_ch * target_points))


def pretrain(encoder: FrozenEncoder, windows: np.ndarray, subjects: Sequence[str], *,
             audit_subjects: Iterable[str], checkpoint_path: str | Path, budget_s: float = DEFAULT_BUDGET_S,
             max_steps: int | None = None, batch_size: int = 16, lr: float = 1e-4, weight_decay: float = 0.01,
             mask_ratio: float = 0.5, patch_s: float = 0.5, target_points: int = 32, hidden: int = 256,
             seed: int = 0) -> PretrainRecord:
    """Pretrain ``encoder`` in place for at most ``budget_s`` seconds of CPU wall time (and ``max_steps`` steps).

    ``windows`` (n, channels, samples) are at the dataset's rate and montage, as for ``transform``; ``subjects``
    names each window's subject. ``audit_subjects`` must be given (empty only if there is no audit) and may not
    share a subject with ``subjects``. Afterwards the encoder is frozen again, its weights are written to
    ``checkpoint_path`` (:func:`save_checkpoint`) and its ``weights_source`` is ``"self_pretrained"``.
    The budget is checked before each step, so the last step may run past it (measured on this 2-core CPU with
    the published configs and batch 16 of 4 s windows: BIOT ~3 s/step, LaBraM ~9 s/step, EEGPT ~29 s/step, so
    300 s buys tens of steps at most -- use a GPU or the tiny configs for anything more than a smoke run).
    """
    import torch

    if isinstance(encoder, BandPowerEncoder):
        raise TypeError("the band-power encoder has nothing to pretrain")
    windows = np.asarray(windows)
    subjects = [str(s) for s in subjects]
    if len(subjects) != len(windows) or len(windows) == 0:
        raise ValueError(f"need one subject per window and at least one window; got {len(windows)} windows and "
                         f"{len(subjects)} subjects")
    audit = {str(s) for s in audit_subjects}
    overlap = sorted(set(subjects) & audit)
    if overlap:
        raise ValueError(f"{len(overlap)} pretraining subject(s) are also audit subjects; pretraining must use "
                         f"subjects disjoint from every audit split")
    if budget_s <= 0:
        raise ValueError(f"budget_s must be positive, got {budget_s}")

    model = encoder.model
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = _init_decoder(encoder, windows, hidden, target_points)
        for p in model.parameters():
            p.requires_grad_(True)
        params = [p for p in model.parameters()] + list(decoder.parameters())
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        gen = torch.Generator().manual_seed(seed)
        rng = np.random.default_rng(seed)
        patch_len = max(1, int(round(patch_s * encoder.expected_sfreq)))
        losses: list[float] = []
        model.train()
        decoder.train()
        t0 = time.perf_counter()
        order = rng.permutation(len(windows))
        cursor = 0
        try:
            while time.perf_counter() - t0 < budget_s and (max_steps is None or len(losses) < max_steps):
                if cursor + batch_size > len(order):
                    order, cursor = rng.permutation(len(windows)), 0
                idx = np.sort(order[cursor:cursor + batch_size])
                cursor += batch_size
                x = encoder.prepare(windows[idx])
                x_masked, target, weight = _mask_and_target(x, patch_len, mask_ratio, target_points, gen)
                pred = decoder(encoder.trainable_forward(x_masked)).view_as(target)
                w = weight[:, None, :].expand_as(target)
                loss = ((pred - target) ** 2 * w).sum() / w.sum().clamp_min(1e-8)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                losses.append(float(loss.detach()))
        finally:
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
        wall = time.perf_counter() - t0
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    change = float((after - before).norm() / before.norm().clamp_min(1e-12))

    digest = save_checkpoint(encoder, checkpoint_path)
    encoder.weights_source, encoder.checkpoint_sha256 = "self_pretrained", digest
    data_hash = hashlib.sha256(np.ascontiguousarray(windows, dtype=np.float32).tobytes()).hexdigest()
    config = {"batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "mask_ratio": mask_ratio,
              "patch_s": patch_s, "target_points": target_points, "hidden": hidden, "seed": seed,
              "max_steps": max_steps, "optimizer": "AdamW", "grad_clip": 1.0}
    record = PretrainRecord(
        encoder=encoder.name, objective="masked_patch_waveform_reconstruction", config=config, steps=len(losses),
        wall_s=wall, budget_s=float(budget_s), n_windows=len(windows), n_subjects=len(set(subjects)),
        subject_hashes=sorted(subject_hash(s) for s in set(subjects)), data_sha256=data_hash, losses=losses,
        param_change=change, checkpoint_path=str(checkpoint_path), checkpoint_sha256=digest,
        n_audit_subjects_excluded=len(audit), encoder_description=encoder.describe(), decoder=decoder.eval())
    log.info("%s: self-supervised pretraining, %d steps in %.1f s on %d windows of %d subjects; loss %.4f -> %.4f; "
             "checkpoint sha256 %s", encoder.name, record.steps, wall, len(windows), record.n_subjects,
             record.loss_first if losses else float("nan"), record.loss_last if losses else float("nan"), digest)
    return record


def masked_losses(encoder: FrozenEncoder, record: PretrainRecord, windows: np.ndarray, *, seed: int = 0,
                  batch_size: int = 32) -> np.ndarray:
    """Per-window pretraining loss (masked-patch MSE) of the pretrained encoder and its decoder head.

    The score of the loss-threshold membership attack on the encoder itself (members = its pretraining windows).
    Masks are drawn from ``seed`` in window order, so every window gets the same mask whatever its group.
    """
    if record.decoder is None:
        raise ValueError("the record holds no decoder head (records read back from JSON do not): score the losses "
                         "in the run that pretrained the encoder")
    return _score_masked(encoder, record.decoder, record.config, windows, seed, batch_size)


def untrained_masked_losses(encoder: FrozenEncoder, windows: np.ndarray, *, seed: int = 0, batch_size: int = 32,
                            mask_ratio: float = 0.5, patch_s: float = 0.5, target_points: int = 32,
                            hidden: int = 256) -> np.ndarray:
    """Per-window masked-patch loss of ``encoder`` as it stands (untrained: its random initialisation) with the
    decoder head :func:`pretrain` would start from (same ``seed``, same defaults).

    The matched null of the encoder-membership attack: the same loss on the same windows from a model that never
    saw a member window, so any AUC it reaches is the member/non-member split, not memorisation. Masks are drawn
    as in :func:`masked_losses` (from ``seed`` in window order). Leaves torch's global generator as it was.
    """
    import torch

    if isinstance(encoder, BandPowerEncoder):
        raise TypeError("the band-power encoder has no masked-patch loss")
    windows = np.asarray(windows)
    if len(windows) == 0:
        return np.zeros(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = _init_decoder(encoder, windows, hidden, target_points).eval()
    config = {"patch_s": patch_s, "mask_ratio": mask_ratio, "target_points": target_points}
    return _score_masked(encoder, decoder, config, windows, seed, batch_size)


def _score_masked(encoder: FrozenEncoder, decoder, cfg: dict, windows: np.ndarray, seed: int,
                  batch_size: int) -> np.ndarray:
    import torch

    patch_len = max(1, int(round(cfg["patch_s"] * encoder.expected_sfreq)))
    gen = torch.Generator().manual_seed(int(seed))
    out = []
    encoder.model.eval()
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            x = encoder.prepare(windows[start:start + batch_size])
            x_masked, target, weight = _mask_and_target(x, patch_len, cfg["mask_ratio"], cfg["target_points"], gen)
            pred = decoder(encoder.trainable_forward(x_masked)).view_as(target)
            w = weight[:, None, :].expand_as(target)
            out.append((((pred - target) ** 2 * w).sum(dim=(1, 2)) / w.sum(dim=(1, 2)).clamp_min(1e-8)).numpy())
    return np.concatenate(out).astype(float) if out else np.zeros(0)


def dataset_windows(dataset, subjects: Sequence[str] | None = None, window_s: float = 4.0, overlap: float = 0.0,
                    preprocess_config=None, max_windows_per_recording: int | None = None):
    """Preprocessed windows of a dataset's recordings: (windows (n, ch, samples), subjects, recordings, sfreq,
    ch_names). Every recording must share the first one's channels and rate (eegmat does)."""
    from eegprivacy.signal.preprocess import PreprocessConfig, preprocess_raw
    from eegprivacy.signal.windows import WindowConfig, sliding_windows

    cfg = preprocess_config or PreprocessConfig()
    out, subj, recs, sfreq, names = [], [], [], None, None
    for rec in dataset.recordings(subjects):
        raw = rec.load()
        data, _ = preprocess_raw(raw, cfg)
        rate = float(raw.info["sfreq"])
        if sfreq is None:
            sfreq, names = rate, list(raw.ch_names)
        elif rate != sfreq or list(raw.ch_names) != names:
            raise ValueError(f"{rec.locate()}: channels or rate differ from the first recording")
        w, _ = sliding_windows(data.astype(np.float32), rate, WindowConfig(window_s, overlap))
        if max_windows_per_recording is not None:
            w = w[:max_windows_per_recording]
        out.append(np.array(w))
        subj += [rec.subject] * len(w)
        recs += [rec.recording] * len(w)
    return np.concatenate(out), subj, recs, sfreq, names


__all__ = ["DEFAULT_BUDGET_S", "PretrainRecord", "dataset_windows", "masked_losses", "pretrain",
           "subject_hash", "untrained_masked_losses"]
